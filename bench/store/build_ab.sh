#!/bin/bash
# Two builds' store clients against each other, alternating, each round on
# a fresh crescent-master + crescent-node of its own build (loopback, tcp).
#
# usage: bench/store/build_ab.sh OLD_BUILD NEW_BUILD ROUNDS -- CRESCENT-BENCH-STORE-ARGS...
# e.g.:  bench/store/build_ab.sh /tmp/old build 7 -- --op exist --value_size 4096 \
#            --threads 1 --ops 20000 --keys 64 --protocol tcp
# Prints one line per round: the build's tag and crescent-bench's RESULT fields.
set -euo pipefail
[ $# -ge 4 ] && [ "$4" = "--" ] || { sed -n 2,9p "$0" >&2; exit 2; }
OLD=$1 NEW=$2 ROUNDS=$3
shift 4
round() { # build tag args...
    local b=$1 t=$2 d
    shift 2
    d=$(mktemp -d)
    "$b/tools/crescent-master/crescent-master" --rpc_address 127.0.0.1 --rpc_port 0 \
        --metrics_port 0 --port_file "$d/port" >"$d/master.log" 2>&1 &
    local mp=$!
    for _ in $(seq 100); do [ -s "$d/port" ] && break; sleep 0.1; done
    local rpc
    rpc=$(grep -o 'rpc=[0-9]*' "$d/port" | cut -d= -f2)
    "$b/tools/crescent-node/crescent-node" --master_server_address "127.0.0.1:$rpc" \
        --global_segment_size 256MB --local_hostname 127.0.0.1 --protocol tcp \
        --ready_file "$d/ready" >"$d/node.log" 2>&1 &
    local np=$!
    for _ in $(seq 200); do [ -e "$d/ready" ] && break; sleep 0.1; done
    echo "$t $("$b/tools/crescent-bench/crescent-bench" store \
        --master_server_address "127.0.0.1:$rpc" "$@" 2>&1 | grep '^RESULT' || echo FAILED)"
    kill "$np" "$mp" 2>/dev/null || true
    wait "$np" "$mp" 2>/dev/null || true
    rm -rf "$d"
}
for _ in $(seq "$ROUNDS"); do
    round "$OLD" old "$@"
    round "$NEW" new "$@"
done
