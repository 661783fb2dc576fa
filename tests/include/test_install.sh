#!/usr/bin/env bash
# Usage: test_install.sh BUILD_DIR CONSUMER_C CC
# Installs BUILD_DIR into a fresh prefix (`cmake --install --prefix`), then
# builds a C program against it with nothing but pkg-config's answers:
# linked to libcrescent.so (run with the prefix's lib on LD_LIBRARY_PATH),
# and to the whole of libcrescent.a with `pkg-config --static` (so every
# dependency the archive needs must be in crescent.pc). When the Python
# package is installed too, the prefix's mooncake_master runs with an empty
# environment, and crescent.find_executable finds the prefix's daemons
# without PATH.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 BUILD_DIR CONSUMER_C CC" >&2; exit 2; }
build=$1 src=$2 cc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
pc=$(find "$tmp/prefix" -name crescent.pc -path '*/pkgconfig/*')
[ -n "$pc" ] || { echo "FAIL: no crescent.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
[ "$(pkg-config --modversion crescent)" != "" ] || { echo "FAIL: pkg-config --modversion"; exit 1; }
libdir=$(realpath "$(pkg-config --variable=libdir crescent)")
[ -e "$libdir/libcrescent.so" ] && [ -e "$libdir/libcrescent.a" ] || { echo "FAIL: libdir $libdir lacks the libraries"; exit 1; }

# shared
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Werror -o "$tmp/shared" "$src" $(pkg-config --cflags --libs crescent)
LD_LIBRARY_PATH=$libdir "$tmp/shared" | grep -q "^libcrescent $(pkg-config --modversion crescent);" \
    || { echo "FAIL: the shared consumer's output"; exit 1; }
LD_LIBRARY_PATH=$libdir ldd "$tmp/shared" | grep -q "libcrescent.so.0 => $libdir/" || { echo "FAIL: not linked to the installed .so"; ldd "$tmp/shared"; exit 1; }

# static: every member of the archive, so a missing dependency fails the link
privs=$(pkg-config --static --libs-only-l crescent | sed 's/-lcrescent//')
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Werror -o "$tmp/static" "$src" $(pkg-config --cflags crescent) \
    -Wl,--whole-archive "$libdir/libcrescent.a" -Wl,--no-whole-archive $privs
"$tmp/static" | grep -q "^libcrescent " || { echo "FAIL: the static consumer's output"; exit 1; }
ldd "$tmp/static" | grep -q libcrescent && { echo "FAIL: the static consumer loads libcrescent.so"; exit 1; }

# Python: installed wrappers and package, nothing from the source or build tree
# (the installed prefix lives in a temp dir, far from both)
mm="$tmp/prefix/bin/mooncake_master"
if [ -e "$mm" ]; then
  out=$(cd "$tmp" && env -i HOME="$tmp" "$mm" --help 2>&1) \
      || { echo "FAIL: installed mooncake_master --help:"; echo "$out"; exit 1; }
  echo "$out" | grep -q -- "--rpc_port" || { echo "FAIL: installed mooncake_master --help printed:"; echo "$out"; exit 1; }
  py=$(head -1 "$mm" | sed 's/^#!//')
  site=$(dirname "$(dirname "$(find "$tmp/prefix" -path '*/crescent/_paths.py')")")
  got=$(cd "$tmp" && env -i HOME="$tmp" "$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import crescent
print(crescent.find_executable("crescent-master"))' "$site")
  [ "$got" = "$tmp/prefix/bin/crescent-master" ] \
      || { echo "FAIL: installed crescent.find_executable('crescent-master') = $got, not $tmp/prefix/bin/crescent-master"; exit 1; }
fi
echo PASS
