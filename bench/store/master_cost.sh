#!/usr/bin/env bash
# Builds bench/store/master_cost.c against the master's sources (the list
# test_store_master builds with) and a configured build's libcrescent.a, and
# runs it. Usage: bench/store/master_cost.sh [--build build] [--batch 128]
#                                            [--passes 40]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build
if [ "${1:-}" = "--build" ]; then build=$2; shift 2; fi
lib=$build/libcrescent.a
[ -f "$lib" ] || { echo "master_cost: no $lib (build first: scripts/build.sh)" >&2; exit 2; }
srcs=$(ls "$root"/src/store/master/*.c | grep -v '/admin\.c$')
out=$(mktemp /tmp/master_cost.XXXXXX)
trap 'rm -f "$out"' EXIT
cc -O2 -D_GNU_SOURCE -I"$root/include" -I"$root/src" -I"$build/include" -I"$build/src" \
   "$root/bench/store/master_cost.c" $srcs \
   "$root/src/store/master/ha/record.c" "$root/src/store/master/ha/shadow.c" \
   "$root/src/store/allocator/offset_alloc.c" "$root/src/store/eviction/policy.c" \
   "$root/src/store/rpc/protocol.c" "$root/src/store/tier/ssd/ssd.c" "$root/src/store/tier/fs/name.c" \
   "$lib" -lxxhash -luring -lssl -lcrypto -lpthread -lm -o "$out"
"$out" "$@"
