#!/usr/bin/env bash
# Transfer Engine benchmarks vs references measured in the same run; see run.py.
# Usage: bench/te/run.sh [--build build] [--reps 5] [--seconds 3] [--cases abcde] [--out FILE]
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/run.py" "$@"
