#!/usr/bin/env bash
# Smoke test of `crescent-bench store` (not a benchmark: tiny sizes, no
# timing assertions): a master + one crescent-node on loopback, then every
# op with --verify, threads and processes; each RESULT must say errors=0 and
# verify=ok|off. usage: bench_smoke.sh <crescent-master> <crescent-node> <crescent-bench>
set -u
master=${1:?} node=${2:?} bench=${3:?}
tmp=$(mktemp -d /tmp/crescent-bench-smoke.XXXXXX)
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ $rc -ne 0 ] && for f in "$tmp"/*.log; do echo "---- $f"; cat "$f"; done
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM
"$master" --rpc_address 127.0.0.1 --rpc_port 0 --metrics_port -1 --port_file "$tmp/port" >"$tmp/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(sed -n 's/.*rpc=\([0-9]*\).*/\1/p' "$tmp/port")
[ -n "$port" ] || { echo "FAIL: master did not start"; exit 1; }
"$node" --master_server_address "127.0.0.1:$port" --global_segment_size 320MB --ready_file "$tmp/ready" >"$tmp/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [ -s "$tmp/ready" ] && break; sleep 0.05; done
[ -s "$tmp/ready" ] || { echo "FAIL: node did not start"; exit 1; }
fail=0
run() {
  local out
  out=$("$bench" store --master_server_address "127.0.0.1:$port" "$@" 2>"$tmp/bench.log")
  local rc=$?
  echo "$out"
  local n
  n=$(echo "$out" | grep -c '^RESULT ')
  if [ $rc -ne 0 ] || [ "$n" -eq 0 ] || echo "$out" | grep '^RESULT ' | grep -qv 'errors=0 verify=\(ok\|off\) '; then
    echo "FAIL: crescent-bench store $* (rc $rc)"; cat "$tmp/bench.log"; fail=1
  fi
}
run --op putget --value_size 64KB --threads 2 --ops 20 --verify
run --op putget --value_size 4KB --threads 1 --processes 2 --ops 50 --verify
run --op batch_putget --value_size 16KB --batch 8 --threads 2 --ops 4 --verify
# the vLLM-like shape of bench/kvcache: calls of 256 keys (pipelined
# chunks, reserved puts) over shm, whose workers hash what they move for
# the end-to-end checksum; every key must come back (a wrong checksum at
# put is a miss at get, i.e. errors > 0)
run --op batch_putget --value_size 16KB --batch 256 --threads 1 --ops 24 --slots 6144 --protocol tcp,shm --verify
run --op batch_putget --value_size 64KB --batch 256 --threads 1 --ops 6 --slots 1536 --protocol tcp,shm --verify
# an in-process A/B (two clients, calls alternating between them) after
# warm-up calls: both clients' calls must succeed, and the AB line appear
out=$("$bench" store --master_server_address "127.0.0.1:$port" --op batch_putget --value_size 16KB \
  --batch 256 --threads 1 --ops 8 --slots 2048 --protocol tcp,shm --verify --warmup 2 \
  --ab_env CRESCENT_PUT_PIPE=0 --ab_block 2 2>"$tmp/bench.log")
echo "$out"
if [ "$(echo "$out" | grep -c '^RESULT .*errors=0 verify=ok ')" -ne 2 ] ||
   [ "$(echo "$out" | grep -c '^AB .*a_calls=4 b_calls=4 ')" -ne 2 ]; then
  echo "FAIL: crescent-bench store --ab_env --warmup"; cat "$tmp/bench.log"; fail=1
fi
# --te_ref: raw TE batches to a crescent-bench target interleaved with the
# store calls (tcp, then shm): both sides' calls must all run, every key
# verified, and a TEREF line per phase name both counts
"$bench" --mode target --protocol auto --buffer_size 64MiB --ready_file "$tmp/tgt" >"$tmp/target.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [ -s "$tmp/tgt" ] && break; sleep 0.05; done
seg=$(cat "$tmp/tgt" 2>/dev/null)
[ -n "$seg" ] || { echo "FAIL: crescent-bench target did not start"; fail=1; }
for proto in tcp tcp,shm; do
  out=$("$bench" store --master_server_address "127.0.0.1:$port" --op batch_putget --value_size 16KB \
    --batch 64 --threads 1 --ops 6 --slots 256 --protocol "$proto" --verify --te_ref "$seg" \
    --ab_block 2 2>"$tmp/bench.log")
  echo "$out"
  if [ "$(echo "$out" | grep -c '^RESULT .*errors=0 verify=ok ')" -ne 2 ] ||
     [ "$(echo "$out" | grep -c '^TEREF .*store_calls=6 te_calls=6 te_errors=0 ')" -ne 2 ]; then
    echo "FAIL: crescent-bench store --te_ref ($proto)"; cat "$tmp/bench.log"; fail=1
  fi
done
"$bench" store --master_server_address "127.0.0.1:$port" --op put --te_ref "$seg" >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --te_ref with a non-batch op must exit 2"; fail=1; }
# --te_ref_rpc: a third arm, each TE batch followed by one master call; all
# three arms run their calls, and a TERPC line per phase counts them
out=$("$bench" store --master_server_address "127.0.0.1:$port" --op batch_put --value_size 16KB \
  --batch 64 --threads 1 --ops 5 --slots 256 --protocol tcp,shm --verify --te_ref "$seg" \
  --te_ref_rpc 64 --ab_block 2 2>"$tmp/bench.log")
echo "$out"
if [ "$(echo "$out" | grep -c '^RESULT .*errors=0 ')" -ne 1 ] ||
   [ "$(echo "$out" | grep -c '^TEREF .*store_calls=5 te_calls=5 te_errors=0 ')" -ne 1 ] ||
   [ "$(echo "$out" | grep -c '^TERPC .*keys=64 crc=0 calls=5 te_rpc_us_per_call=[0-9]')" -ne 1 ]; then
  echo "FAIL: crescent-bench store --te_ref_rpc"; cat "$tmp/bench.log"; fail=1
fi
# --te_ref_crc: that arm also hashes its bytes (tcp: READs in the
# transport, WRITEs in the calling thread), in both phases
out=$("$bench" store --master_server_address "127.0.0.1:$port" --op batch_putget --value_size 16KB \
  --batch 64 --threads 1 --ops 4 --slots 256 --protocol tcp --te_ref "$seg" \
  --te_ref_rpc 1 --te_ref_crc --ab_block 2 2>"$tmp/bench.log")
echo "$out"
if [ "$(echo "$out" | grep -c '^TERPC .*keys=1 crc=1 calls=4 te_rpc_us_per_call=[0-9]')" -ne 2 ] ||
   [ "$(echo "$out" | grep -c '^TEREF .*te_errors=0 ')" -ne 2 ]; then
  echo "FAIL: crescent-bench store --te_ref_crc"; cat "$tmp/bench.log"; fail=1
fi
"$bench" store --master_server_address "127.0.0.1:$port" --op batch_put --te_ref "$seg" \
  --te_ref_crc >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --te_ref_crc without --te_ref_rpc must exit 2"; fail=1; }
for bad in "--te_ref_rpc 65" "--te_ref_rpc -1"; do
  # shellcheck disable=SC2086
  "$bench" store --master_server_address "127.0.0.1:$port" --op batch_put --batch 64 \
    --te_ref "$seg" $bad >/dev/null 2>&1
  [ $? -eq 2 ] || { echo "FAIL: $bad must exit 2"; fail=1; }
done
"$bench" store --master_server_address "127.0.0.1:$port" --op batch_put --te_ref_rpc 1 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --te_ref_rpc without --te_ref must exit 2"; fail=1; }
run --op get --value_size 1MB --threads 2 --keys 4 --ops 8 --verify
run --op exist --batch 128 --threads 1 --ops 20 --keys 64 --value_size 4KB
exit $fail
