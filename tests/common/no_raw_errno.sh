#!/usr/bin/env bash
# common.h's collision rule holds only if every errno the library returns
# goes through cr__status_from_errno (CR__ERRNO()): no code line in src/ may
# return a raw -errno. Comment lines (" * ... -errno") are prose, not code.
set -euo pipefail
src=${1:?usage: no_raw_errno.sh <src dir>}
hits=$(grep -rnE -e '-errno\b' --include='*.c' --include='*.h' "$src" |
       grep -vE '^[^:]+:[0-9]+:[[:space:]]*(\*|/\*|//)' || true)
if [ -n "$hits" ]; then
    echo "raw -errno in library code (use CR__ERRNO() from common/status.h):"
    echo "$hits"
    exit 1
fi
echo "ok: no raw -errno in $src"
