"""``mooncake.cli_client``: the ``mooncake_client`` command as a module
(``python3 -m mooncake.cli_client ...``): crescent-node with Mooncake's flags,
the same translation as mooncake.cli.client_main."""
import sys

from mooncake.cli import client_main

__all__ = ["main"]


def main():
    return client_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
