#!/usr/bin/env bash
# Store benchmark vs Redis measured in the same run; see run.py.
# Usage: bench/store/run.sh [--build build] [--reps 5] [--clients 4] [--cases abcd] [--out FILE]
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/run.py" "$@"
