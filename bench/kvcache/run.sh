#!/usr/bin/env bash
# vLLM-like KV-cache save/load through the store vs the raw Transfer Engine
# moving the same bytes in the same run; see run.py.
# Usage: bench/kvcache/run.sh [--build build] [--reps 5] [--objects 8192] [--sizes 64KiB,16KiB]
#                             [--batch 256] [--protocols tcp,shm] [--out FILE]
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/run.py" "$@"
