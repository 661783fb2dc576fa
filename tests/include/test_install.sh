#!/usr/bin/env bash
# Usage: test_install.sh BUILD_DIR CONSUMER_C CC
# Installs BUILD_DIR into a fresh prefix (`cmake --install --prefix`), then
# builds a C program against it with nothing but pkg-config's answers:
# linked to libcrescent.so (run with the prefix's lib on LD_LIBRARY_PATH),
# and to the whole of libcrescent.a with `pkg-config --static` (so every
# dependency the archive needs must be in crescent.pc).
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
echo PASS
