#!/usr/bin/env bash
# Multi-host tests of the transfer engine: two network namespaces model two
# hosts, joined by TWO veth pairs (two NICs per host, two subnets):
#
#   host A (crnsA-<pid>)                      host B (crnsB-<pid>)
#   vA1-<pid> 10.201.1.1/24  <--- veth --->   vB1-<pid> 10.201.1.2/24
#   vA2-<pid> 10.201.2.1/24  <--- veth --->   vB2-<pid> 10.201.2.2/24
#
# A runs `netns_driver target` (p2p metadata, both NICs); the cases run
# drivers against it:
#   paths     : from B the transport is tcp, from a second engine in A it is
#               shm; READ/WRITE data correct both ways (1 B .. 16 MiB, batches)
#   aggregate : a transfer from B uses both NICs
#   failover  : 1 GiB of 4 MiB READs+WRITEs from B; vB1 is taken down while
#               it runs; every request completes with correct data; then vB1
#               comes back and carries data again (re-probe)
# Only addresses inside the namespaces are used. The namespaces (and with
# them the veths) are ALWAYS deleted (trap EXIT), and leftovers of a crashed
# earlier run (namespaces named after a pid that no longer exists) are
# deleted first.
#
#   partition : both of B's links go down while 1 GiB of WRITEs run: every
#               request fails within the timeout, none hangs; links back up =>
#               transfers work again
#   peerdeath : the target process is SIGKILLed mid-transfer: requests fail,
#               no hang, the initiator survives; new requests fail
# usage: netns_test.sh paths|aggregate|failover|partition|peerdeath <netns_driver>
# exit: 0 pass, 1 fail, 77 skip (not root / no `ip netns`).
set -u
case_=${1:?case}
drv=${2:?driver}
PFX=crns

if [ "$(id -u)" -ne 0 ]; then echo "SKIP: netns tests need root"; exit 77; fi
if ! command -v ip >/dev/null 2>&1; then echo "SKIP: iproute2 (ip) not installed"; exit 77; fi
[ -x "$drv" ] || { echo "FAIL: driver $drv missing"; exit 1; }

# leftovers of crashed runs: crnsA-<pid>/crnsB-<pid> whose pid is gone
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PFX}[AB]-[0-9]+$"); do
  owner=${ns##*-}
  if ! kill -0 "$owner" 2>/dev/null; then
    echo "deleting leftover namespace $ns"
    ip netns del "$ns" 2>/dev/null
  fi
done

A=${PFX}A-$$
B=${PFX}B-$$
A1=vA1-$$ A2=vA2-$$ B1=vB1-$$ B2=vB2-$$
tmp=$(mktemp -d /tmp/crns.XXXXXX)
pids=()

cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  ip netns del "$A" 2>/dev/null
  ip netns del "$B" 2>/dev/null
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    for f in "$tmp"/*.out; do [ -f "$f" ] && { echo "---- $(basename "$f")"; cat "$f"; }; done
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! ip netns add "$A" 2>"$tmp/err"; then echo "SKIP: ip netns add failed: $(cat "$tmp/err")"; exit 77; fi
ip netns add "$B" || exit 1
if ! ip netns exec "$A" true 2>"$tmp/err"; then echo "SKIP: ip netns exec failed: $(cat "$tmp/err")"; exit 77; fi
if ! ip link add "$A1" netns "$A" type veth peer name "$B1" netns "$B" 2>"$tmp/err"; then
  echo "SKIP: cannot create veth pairs: $(cat "$tmp/err")"; exit 77
fi
set -e
ip -n "$A" link set lo up
ip -n "$B" link set lo up
ip link add "$A2" netns "$A" type veth peer name "$B2" netns "$B"
ip -n "$A" addr add 10.201.1.1/24 dev "$A1"
ip -n "$A" addr add 10.201.2.1/24 dev "$A2"
ip -n "$B" addr add 10.201.1.2/24 dev "$B1"
ip -n "$B" addr add 10.201.2.2/24 dev "$B2"
for l in "$A1" "$A2"; do ip -n "$A" link set "$l" up; done
for l in "$B1" "$B2"; do ip -n "$B" link set "$l" up; done
set +e

NICS_A=10.201.1.1,10.201.2.1
NICS_B=10.201.1.2,10.201.2.2
PORT=17777
size=160M
[ "$case_" = failover ] && size=1G
[ "$case_" = partition ] || [ "$case_" = peerdeath ] && size=1G

# waits up to $4 seconds (default 30) until file $1 has a line matching $2
# (or process $3 exits); 0 if seen. Polls every 10 ms: the failover case must
# take the link down while the transfer is still running.
wait_line() {
  local f=$1 re=$2 p=$3 secs=${4:-30}
  for _ in $(seq $((secs * 100))); do
    grep -qE "$re" "$f" 2>/dev/null && return 0
    kill -0 "$p" 2>/dev/null || { grep -qE "$re" "$f" 2>/dev/null; return $?; }
    sleep 0.01
  done
  return 1
}

ip netns exec "$A" "$drv" target --nics "$NICS_A" --port $PORT --size $size >"$tmp/target.out" 2>&1 &
tpid=$!
pids+=("$tpid")
if ! wait_line "$tmp/target.out" '^READY ' "$tpid" 60; then
  echo "FAIL: target did not start"; exit 1
fi
name=$(awk '/^READY /{print $2; exit}' "$tmp/target.out")
echo "target segment $name in $A"

case "$case_" in
paths)
  echo "== from $B (another host): expect tcp"
  ip netns exec "$B" "$drv" check --nics "$NICS_B" --target "$name" --expect tcp >"$tmp/remote.out" 2>&1
  r1=$?; cat "$tmp/remote.out"
  echo "== from $A (same host): expect shm"
  ip netns exec "$A" "$drv" check --nics "$NICS_A" --target "$name" --expect shm >"$tmp/local.out" 2>&1
  r2=$?; cat "$tmp/local.out"
  echo "== from $A with transports=tcp only: expect tcp"
  ip netns exec "$A" "$drv" check --nics "$NICS_A" --transports tcp --target "$name" --expect tcp \
    >"$tmp/local-tcp.out" 2>&1
  r3=$?; cat "$tmp/local-tcp.out"
  [ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ $r3 -eq 0 ] || { echo "FAIL: remote=$r1 shm=$r2 local-tcp=$r3"; exit 1; }
  ;;
aggregate)
  ip netns exec "$B" "$drv" aggregate --nics "$NICS_B" --target "$name" --link "$B1" --link2 "$B2" \
    >"$tmp/aggregate.out" 2>&1
  r=$?; cat "$tmp/aggregate.out"
  [ $r -eq 0 ] || { echo "FAIL: aggregate rc=$r"; exit 1; }
  ;;
failover)
  ip netns exec "$B" "$drv" failover --nics "$NICS_B" --target "$name" --link "$B1" --link2 "$B2" \
    >"$tmp/failover.out" 2>&1 &
  dpid=$!
  pids+=("$dpid")
  if wait_line "$tmp/failover.out" '^started' "$dpid" 60; then
    ip -n "$B" link set "$B1" down
    echo "took $B1 down"
    # bring it back once the driver finished phase 1 (or gave up)
    wait_line "$tmp/failover.out" '^phase1-ok' "$dpid" 200
    ip -n "$B" link set "$B1" up
    echo "brought $B1 up"
  fi
  wait "$dpid"
  r=$?
  cat "$tmp/failover.out"
  [ $r -eq 0 ] || { echo "FAIL: failover rc=$r"; exit 1; }
  ;;
partition)
  # both links of B go down while 1 GiB of WRITEs run: every request must
  # fail within the engine timeout (5 s here), none hang; links back => works
  ip netns exec "$B" "$drv" outage --nics "$NICS_B" --target "$name" --link "$B1" --link2 "$B2" \
    --timeout_ms 5000 >"$tmp/partition.out" 2>&1 &
  dpid=$!
  pids+=("$dpid")
  if wait_line "$tmp/partition.out" '^started' "$dpid" 60; then
    ip -n "$B" link set "$B1" down
    ip -n "$B" link set "$B2" down
    echo "took $B1 and $B2 down"
    wait_line "$tmp/partition.out" '^phase1-ok' "$dpid" 120
    ip -n "$B" link set "$B1" up
    ip -n "$B" link set "$B2" up
    echo "brought them up"
  fi
  wait "$dpid"
  r=$?
  cat "$tmp/partition.out"
  [ $r -eq 0 ] || { echo "FAIL: partition rc=$r"; exit 1; }
  ;;
peerdeath)
  # the target host's process is SIGKILLed while 1 GiB of WRITEs to it run
  ip netns exec "$B" "$drv" outage --nics "$NICS_B" --target "$name" --expect-dead \
    --timeout_ms 5000 >"$tmp/peerdeath.out" 2>&1 &
  dpid=$!
  pids+=("$dpid")
  if wait_line "$tmp/peerdeath.out" '^started' "$dpid" 60; then
    { kill -KILL "$tpid"; wait "$tpid"; } 2>/dev/null
    echo "killed the target (pid $tpid)"
  fi
  wait "$dpid"
  r=$?
  cat "$tmp/peerdeath.out"
  [ $r -eq 0 ] || { echo "FAIL: peerdeath rc=$r$([ $r -eq 141 ] && echo ' (SIGPIPE)')"; exit 1; }
  ;;
*)
  echo "unknown case $case_"; exit 1 ;;
esac
echo "PASS: $case_"
exit 0
