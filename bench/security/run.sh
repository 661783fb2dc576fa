#!/usr/bin/env bash
# Security on vs off in one run (TE tcp, store put/get); see run.py.
# Usage: bench/security/run.sh [--build build] [--reps 3] [--seconds 3] [--out FILE]
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/run.py" "$@"
