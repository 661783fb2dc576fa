#!/usr/bin/env bash
# Master HA across network namespaces (namespaces model hosts), two bridges
# in a hub namespace: data (10.211.0.0/24) and etcd (10.211.1.0/24).
#
#   client ns (i10-haC-<pid>)  data .1, etcd .5  the test: nodes + clients
#   etcd ns   (i10-haE-<pid>)  etcd .1           etcd
#   master ns (i10-haM<i>-<pid>) data .2+i, etcd .2+i  one crescent-master each
#
# The driver (test_store_ha netns) takes the leader's port on the etcd
# bridge down (partitioned from etcd, still reachable by clients). Only
# addresses inside these namespaces are used; the namespaces are ALWAYS
# deleted (trap EXIT), and leftovers of crashed runs are deleted first.
#
# usage: netns_test.sh <test_store_ha> <crescent-master> <crescent-node>
# exit: 0 pass, 1 fail, 77 skip (not root / no `ip netns` / no etcd).
set -u
drv=${1:?driver} master=${2:?master} node=${3:?node}
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: netns tests need root"; exit 77; fi
if ! command -v ip >/dev/null 2>&1; then echo "SKIP: iproute2 (ip) not installed"; exit 77; fi
if [ ! -x /usr/bin/etcd ]; then echo "SKIP: no etcd binary (apt-get install etcd-server)"; exit 77; fi

for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^i10-ha(H|C|E|M[0-9])-[0-9]+$'); do
  owner=${ns##*-}
  if ! kill -0 "$owner" 2>/dev/null; then ip netns del "$ns" 2>/dev/null; fi
done

t=$$
H=i10-haH-$t C=i10-haC-$t E=i10-haE-$t
M=(i10-haM0-$t i10-haM1-$t i10-haM2-$t)
cleanup() {
  local rc=$?
  set +e
  for ns in "$C" "$E" "${M[@]}" "$H"; do ip netns del "$ns" 2>/dev/null; done
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! ip netns add "$H" 2>/dev/null; then echo "SKIP: ip netns add failed"; exit 77; fi
set -e
for br in i10bd i10be; do
  ip -n "$H" link add $br type bridge
  ip -n "$H" link set $br up
done
# port <ns> <bridge> <hub-side name> <address>
port() {
  ip link add "i10v-$t" netns "$1" type veth peer name "$3" netns "$H"
  ip -n "$H" link set "$3" master "$2"
  ip -n "$H" link set "$3" up
  ip -n "$1" link set "i10v-$t" name "$3"
  ip -n "$1" addr add "$4/24" dev "$3"
  ip -n "$1" link set "$3" up
}
for ns in "$C" "$E" "${M[@]}"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
port "$C" i10bd "i10dC-$t" 10.211.0.1
port "$C" i10be "i10eC-$t" 10.211.1.5
port "$E" i10be "i10eE-$t" 10.211.1.1
for i in 0 1 2; do
  port "${M[$i]}" i10bd "i10d$i-$t" "10.211.0.$((i + 2))"
  port "${M[$i]}" i10be "i10e$i-$t" "10.211.1.$((i + 2))"
done
set +e
ip netns exec "$C" "$drv" netns "$master" "$node" "$H" "$E" "${M[0]}" "${M[1]}" "${M[2]}" "$t"
