#!/usr/bin/env bash
# Usage: test_cli.sh MASTER MASTER_BENCH NODE BENCH DEMO METADATA CONDUCTOR SIM
# For every tool (and subcommand): --help and -h print "usage:" and the
# options on stdout and exit 0 without starting anything; an unknown option
# exits 2 with "unknown option 'NAME'" on stderr, said once.
set -u
[ $# -eq 8 ] || { echo "usage: $0 MASTER MASTER_BENCH NODE BENCH DEMO METADATA CONDUCTOR SIM" >&2; exit 2; }
master=$1 mbench=$2 node=$3 bench=$4 demo=$5 meta=$6 cond=$7 sim=$8
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

check() { # check LABEL CMD...
    local label=$1; shift
    for h in --help -h; do
        timeout 10 "$@" "$h" >"$out" 2>"$err"
        local rc=$?
        [ $rc -eq 0 ] || fail "$label $h exited $rc: $(head -c 300 "$err")"
        head -1 "$out" | grep -q '^usage: ' || fail "$label $h: no usage line on stdout"
        [ "$(grep -c '^  --' "$out")" -ge 1 ] || fail "$label $h: no options listed"
    done
    timeout 10 "$@" --no_such_option >"$out" 2>"$err"
    local rc=$?
    [ $rc -eq 2 ] || fail "$label --no_such_option exited $rc, not 2"
    grep -q "unknown option 'no_such_option'" "$err" || fail "$label: no 'unknown option' message: $(head -c 300 "$err")"
    [ "$(grep -o 'see --help' "$err" | wc -l)" -le 1 ] || fail "$label: message repeated: $(head -1 "$err")"
}

check crescent-master "$master"
check crescent-master-bench "$mbench"
check crescent-node "$node"
check "crescent-bench" "$bench"
check "crescent-bench te" "$bench" te
check "crescent-bench store" "$bench" store
check "crescent-bench tier" "$bench" tier
check "crescent-demo" "$demo"
check "crescent-demo store" "$demo" store
check "crescent-demo te" "$demo" te
check crescent-metadata "$meta"
check crescent-conductor "$cond"
check crescent-sim "$sim"
[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo PASS
