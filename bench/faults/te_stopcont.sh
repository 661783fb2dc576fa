#!/usr/bin/env bash
# Stress check (not a CI test; issue 11, "tcp sender may read a finished task
# when the watchdog fails a slice that is then resent"): a Transfer Engine
# target SIGSTOPped/SIGCONTed at random (0.2-0.7 s stopped, 0.1-0.4 s running)
# while initiators of an ASan build write and read 1-4 MiB blocks with a
# 200 ms stall time: every freeze cuts connections (slices resent) and the
# no-progress abort fails what is in flight; each initiator frees its batch
# after every wait, so a sender touching a finished task is a
# heap-use-after-free report. Prints the counts; exits 1 on any ASan report.
# Usage: bench/faults/te_stopcont.sh [asan build dir (default build-asan)] [seconds (default 25)]
set -uo pipefail
b=${1:-build-asan}; secs=${2:-25}
bench=$b/tools/crescent-bench/crescent-bench
d=$(mktemp -d /tmp/crescent-stopcont-XXXXXX)
ASAN_OPTIONS=detect_leaks=0 "$bench" te --mode target --buffer_size 64MiB \
  --ready_file "$d/ready" > "$d/target.log" 2>&1 &
tp=$!
trap 'kill -CONT $tp 2>/dev/null; kill $tp 2>/dev/null; wait $tp 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$d/ready" ] && break; sleep 0.2; done
seg=$(cat "$d/ready")
(
  end=$((SECONDS + secs))
  while [ $SECONDS -lt $end ]; do
    op=$([ $((RANDOM % 2)) = 0 ] && echo write || echo read)
    bs=$([ $((RANDOM % 2)) = 0 ] && echo 4MiB || echo 1MiB)
    ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 CRESCENT_XFER_STALL_MS=200 timeout 60 \
      "$bench" te --segment "$seg" --operation "$op" --block_size "$bs" --batch_size 4 \
      --threads 2 --duration 5 --wait block >> "$d/init.log" 2>&1
    echo "initiator rc=$?" >> "$d/init.log"
  done
) &
ip=$!
end=$((SECONDS + secs))
while [ $SECONDS -lt $end ]; do
  kill -STOP $tp; sleep 0.$((RANDOM % 6 + 2)); kill -CONT $tp; sleep 0.$((RANDOM % 4 + 1))
done
wait $ip
runs=$(grep -c "initiator rc" "$d/init.log"); cuts=$(grep -c "cutting it" "$d/init.log")
aborts=$(grep -c "failing them" "$d/init.log"); asan=$(grep -c "AddressSanitizer" "$d/init.log")
echo "initiator runs $runs, connections cut $cuts, no-progress aborts $aborts, ASan reports $asan"
[ "$asan" = 0 ] && rm -rf "$d" || echo "logs in $d"
[ "$asan" = 0 ]
