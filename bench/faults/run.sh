#!/usr/bin/env bash
# A storage node frozen (SIGSTOP) under load: the other clients' get latency
# before and during the freeze, in one run, with the Transfer Engine's stall
# abort at its default (1 s) and, as the reference for the old behaviour,
# with it set to the 30 s request timeout (CRESCENT_XFER_STALL_MS=30000).
# Runs tests/store/faults/test_faults.c (3 nodes, 2 replicas, readers + a
# writer, self-verifying values; it also checks correctness).
# Usage: bench/faults/run.sh [build] [freeze seconds (default 8)] [off|on]
set -euo pipefail
b=${1:-build}; fz=${2:-8}; mode=${3:-off}
t=$b/tests/store/faults/test_store_faults
m=$b/tools/crescent-master/crescent-master
n=$b/tools/crescent-node/crescent-node
for stall in default 30000; do
  if [ "$stall" = default ]; then unset CRESCENT_XFER_STALL_MS; else export CRESCENT_XFER_STALL_MS=$stall; fi
  echo "== security $mode, TE stall abort: $stall ms, node frozen ${fz} s"
  FROZEN_FREEZE_S=$fz "$t" "$mode" "$m" "$n" 2>/dev/null | sed 's/^/   /'
done
