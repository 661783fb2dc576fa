"""``mooncake.cli_bench``: the ``transfer_engine_bench`` command as a module
(``python3 -m mooncake.cli_bench ...``): crescent-bench te with Mooncake's
flags, the same translation as mooncake.cli.transfer_engine_bench_main."""
import sys

from mooncake.cli import transfer_engine_bench_main

__all__ = ["main"]


def main():
    return transfer_engine_bench_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
