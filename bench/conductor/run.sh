#!/usr/bin/env bash
# Conductor benchmarks: scheduling decisions/s, index memory, trace replay
# time. Builds cond_bench from the conductor sources with -O2 (no CMake
# target: bench/ is not part of the main build) and crescent-sim via CMake.
# Usage: bench/conductor/run.sh [build-dir]   (default build-cond-bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-cond-bench}
mkdir -p "$out"
srcs=$(ls src/conductor/*.c | grep -v '/fuzz_')
cc -std=gnu11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Isrc \
   bench/conductor/cond_bench.c $srcs -o "$out/cond_bench" -lxxhash -ljansson -lm
echo "== scheduling decisions/s (64 instances, 128k-token prompts, one core)"
taskset -c 0 "$out/cond_bench" sched --instances 64 --prompt 131072 --decisions 200000
echo "== index memory (10 M blocks)"
"$out/cond_bench" index --blocks 10000000
trace=data/traces/conversation_trace.jsonl
if [ -r "$trace" ]; then
  cmake -S . -B "$out/cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$out/cmake" --target crescent-sim -j2 >/dev/null
  echo "== whole-trace replay, one policy (global_cache), 8P+8D"
  /usr/bin/time -f "wall %e s, max RSS %M KiB" "$out/cmake/tools/crescent-sim/crescent-sim" \
     --trace="$trace" --policies=global_cache --progress=false
else
  echo "== trace $trace absent: replay benchmark skipped"
fi
