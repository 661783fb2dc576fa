#!/usr/bin/env bash
# The transfer engine core must not know its transports by name: a transport
# is one folder under src/transfer/transport/ plus one line in
# src/transfer/transport/registry.c. Fails (exit 1, listing the lines) if any
# file of src/transfer outside those names one of them (the folder names, in
# lower case as identifiers, strings and paths use them; "TCP" the protocol is
# fine). Usage: scripts/check-transport-names.sh [repo root]
set -euo pipefail
root=${1:-$(dirname "$0")/..}
cd "$root/src/transfer"
names=$(find transport -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
[ -n "$names" ] || { echo "no transport folders under src/transfer/transport"; exit 1; }
bad=0
for n in $names; do
  hits=$(grep -rnE "(^|[^A-Za-z0-9])${n}([^a-z0-9]|\$)" --include='*.c' --include='*.h' \
           --include='*.txt' . \
         | grep -vE "^\./transport/${n}/|^\./transport/registry\.c:" || true)
  if [ -n "$hits" ]; then
    echo "src/transfer names transport '$n' outside transport/$n/ and transport/registry.c:"
    printf '%s\n' "$hits"
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "transport names: core clean ($(echo $names | tr '\n' ' '))"
exit "$bad"
