#!/usr/bin/env bash
# Master HA cost and failover time, measured in one run (docs/benchmarks.md, "Master HA").
#   1. put latency/throughput with HA off (one master) vs on (three masters on a
#      real etcd, semi-synchronous replication to two standbys), interleaved
#      off/on for --reps repetitions: 4 KiB put p50/p99 (1 thread) and 1 MiB put GB/s
#      (4 threads), same three nodes, same etcd TE metadata for both.
#      Reference in the same run: redis-benchmark SET 4 KiB, one client (-c 1 -P 1),
#      against a private redis-server (issue 16: 4 KiB put p50 <= Redis SET p50).
#   2. failover: tests/store/ha's failover scenario with --kills leader SIGKILLs
#      (kill -> first completed put), p50/max.
# Usage: bench/ha/run.sh [--build build] [--reps 3] [--kills 10]
#   MASTER_ARGS="..." adds flags to every crescent-master (both modes).
#   MASTER_REF=/path/to/another/crescent-master adds a third mode, "ref": HA on
#   with that binary (e.g. a build of an older commit), interleaved with the
#   others, so a change's effect is measured in the same run.
#   HA_MASTERS=N: masters in the HA modes (default 3: a leader, two standbys);
#   1 measures what HA costs without replication (election, etcd, epochs).
#   REF_MASTERS=N: the same for the "ref" mode (default HA_MASTERS).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build reps=3 kills=10
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --kills) kills=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
M=$build/tools/crescent-master/crescent-master
N=$build/tools/crescent-node/crescent-node
B=$build/tools/crescent-bench/crescent-bench
T=$build/tests/store/ha/test_store_ha
dir=$(mktemp -d /tmp/i10-bench-ha-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ep=$(port); pp=$(port)
etcd --name i10-bench --data-dir "$dir/etcd" --listen-client-urls "http://127.0.0.1:$ep" \
  --advertise-client-urls "http://127.0.0.1:$ep" --listen-peer-urls "http://127.0.0.1:$pp" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pp" --initial-cluster "i10-bench=http://127.0.0.1:$pp" \
  >"$dir/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do etcdctl --endpoints "127.0.0.1:$ep" put /i10-bench/up 1 >/dev/null 2>&1 && break; sleep 0.1; done
meta="etcd://127.0.0.1:$ep"
rp=""
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
  rp=$(port)
  redis-server --port "$rp" --bind 127.0.0.1 --save "" --appendonly no --protected-mode no \
    >"$dir/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$rp" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
fi

wait_file() { for _ in $(seq 200); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "no $1" >&2; return 1; }

# starts a cluster; $1 = off|on|ref; sets addr and cpids
start_cluster() {
  cpids=()
  local M=$M nm=${HA_MASTERS:-3}
  if [ "$1" = ref ]; then M=$MASTER_REF nm=${REF_MASTERS:-$nm}; fi
  if [ "$1" = off ]; then
    "$M" --rpc_address 127.0.0.1 --rpc_port 0 --metrics_port -1 --port_file "$dir/m.port" ${MASTER_ARGS:-} >"$dir/m-off.log" 2>&1 &
    cpids+=($!)
    wait_file "$dir/m.port"
    addr="127.0.0.1:$(sed -n 's/listening rpc=\([0-9]*\).*/\1/p' "$dir/m.port")"
    rm -f "$dir/m.port"
  else
    etcdctl --endpoints "127.0.0.1:$ep" del --prefix /crescent/bench >/dev/null
    for i in $(seq 0 $((nm - 1))); do
      "$M" --enable_ha --etcd_endpoints "127.0.0.1:$ep" --cluster_id bench --rpc_address 127.0.0.1 \
        --rpc_port 0 --metrics_port -1 --port_file "$dir/m$i.port" ${MASTER_ARGS:-} >"$dir/m-on$i.log" 2>&1 &
      cpids+=($!)
    done
    for i in $(seq 0 $((nm - 1))); do wait_file "$dir/m$i.port"; rm -f "$dir/m$i.port"; done
    addr="etcd://127.0.0.1:$ep/bench"
  fi
  for i in 0 1 2; do
    "$N" --master_server_address "$addr" --metadata_server "$meta" --global_segment_size 512MB \
      --ready_file "$dir/n$i.ready" >"$dir/n-$1$i.log" 2>&1 &
    cpids+=($!)
  done
  for i in 0 1 2; do wait_file "$dir/n$i.ready"; rm -f "$dir/n$i.ready"; done
  if [ "$1" != off ]; then sleep 2; fi # standbys receive their snapshot: in sync
}
stop_cluster() { for p in "${cpids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${cpids[@]}"; do wait "$p" 2>/dev/null || true; done; }

bench() { # $1 size $2 threads $3 ops
  "$B" store --master_server_address "$addr" --metadata_server "$meta" --op put --value_size "$1" \
    --threads "$2" --ops "$3" --slots 4 2>&1
}

echo "# machine shared with other work: compare only within this run"
for r in $(seq "$reps"); do
  for mode in off on ${MASTER_REF:+ref}; do
    start_cluster $mode
    small=$(bench 4KB 1 3000 | grep -E "put" | head -3 | tr '\n' ' ')
    big=$(bench 1MB 4 100 | grep -E "put" | head -3 | tr '\n' ' ')
    echo "rep $r ha=$mode 4KiB: $small"
    echo "rep $r ha=$mode 1MiB: $big"
    stop_cluster
  done
  if [ -n "$rp" ]; then
    echo "rep $r redis SET 4KiB -c 1: $(redis-benchmark -p "$rp" -t set -d 4096 -c 1 -n 20000 -P 1 --csv | grep -i '"SET"')"
  fi
done

echo "# failover: $kills leader SIGKILLs under load (lease 2 s)"
CRESCENT_HA_KILLS=$kills CRESCENT_LOG=error "$T" failover "$M" "$N" 2>&1 | grep -E "failover|completed objects|passed|FAIL"
