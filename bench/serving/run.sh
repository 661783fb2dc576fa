#!/usr/bin/env bash
# Serving benchmark (docs/benchmarks.md, "Serving"): a real transformer's KV
# through crescent on a multi-turn conversation workload. Needs a build in
# build/ (or $CRESCENT_BUILD_DIR). Arguments go to crescent_serving.bench
# (--requests, --prefill, --decode, --rounds, --netns, --json, --skip).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${CRESCENT_BUILD_DIR:-$root/build}
export PYTHONPATH="$build/python:$root/python/compat:$root/serving${PYTHONPATH:+:$PYTHONPATH}"
exec /usr/bin/python3 -m crescent_serving.bench "$@"
