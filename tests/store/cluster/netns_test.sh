#!/usr/bin/env bash
# Store cluster across network namespaces (namespaces model hosts):
#
#   hub (crsH-<pid>): bridge br0
#   client ns (crsC-<pid>) 10.203.0.1  master + the test client
#   node ns  (crsN1/2/3-<pid>) 10.203.0.2..4  one crescent-node each
#
# each joined to the bridge by a veth pair. The driver
# (test_store_netns) runs inside the client namespace, starts the master
# there and the nodes in theirs, partitions a node by taking its bridge port
# down, and SIGKILLs one under load. Only addresses inside these namespaces
# are used; the namespaces are ALWAYS deleted (trap EXIT), and leftovers of
# crashed runs are deleted first.
#
# usage: netns_test.sh <test_store_netns> <crescent-master> <crescent-node>
# exit: 0 pass, 1 fail, 77 skip (not root / no `ip netns`).
set -u
drv=${1:?driver} master=${2:?master} node=${3:?node}
PFX=crs
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: netns tests need root"; exit 77; fi
if ! command -v ip >/dev/null 2>&1; then echo "SKIP: iproute2 (ip) not installed"; exit 77; fi

for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PFX}(H|C|N[0-9])-[0-9]+$"); do
  owner=${ns##*-}
  if ! kill -0 "$owner" 2>/dev/null; then ip netns del "$ns" 2>/dev/null; fi
done

H=${PFX}H-$$ C=${PFX}C-$$
NS=("$C" "${PFX}N1-$$" "${PFX}N2-$$" "${PFX}N3-$$")
cleanup() {
  local rc=$?
  for ns in "${NS[@]}" "$H"; do ip netns del "$ns" 2>/dev/null; done
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! ip netns add "$H" 2>/dev/null; then echo "SKIP: ip netns add failed"; exit 77; fi
set -e
ip -n "$H" link add br0 type bridge
ip -n "$H" link set br0 up
for i in 0 1 2 3; do
  ns=${NS[$i]}
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "v$i-$$" netns "$ns" type veth peer name "h$i-$$" netns "$H"
  ip -n "$H" link set "h$i-$$" master br0
  ip -n "$H" link set "h$i-$$" up
  ip -n "$ns" addr add "10.203.0.$((i + 1))/24" dev "v$i-$$"
  ip -n "$ns" link set "v$i-$$" up
done
set +e
ip netns exec "$C" "$drv" "$master" "$node" "$H" "${NS[1]}" "${NS[2]}" "${NS[3]}" "$$"
