"""``mooncake.http_metadata_server``: Mooncake's HTTP metadata server as a
module; ``python3 -m mooncake.http_metadata_server --port N`` runs
crescent-metadata (the same GET/PUT/DELETE /metadata?key= API and /health)."""
import sys

from mooncake.cli import http_metadata_server_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
