#!/usr/bin/env bash
# One small Transfer Engine request (cr_xfer_transfer_sync) over tcp against a
# bare tcp round trip in the same run; see sync_latency.py.
# Usage: bench/te/sync_latency.sh [--build build] [--base DIR] [--reps 5] [--size 4096]
#                                 [--seconds 2] [--out FILE]
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/sync_latency.py" "$@"
