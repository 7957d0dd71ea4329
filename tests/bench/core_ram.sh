#!/bin/sh
# core_ram.sh [BUILD [SIZE[:BS] ...]] - RSS of the cache's core per cached
# block (tests/bench/core_ram.c), built against BUILD's libhotlun.a.
# Default sizes: 16 GiB and 64 GiB at 4 KiB blocks, 16 GiB at 64 KiB.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- 17179869184:4096 68719476736:4096 17179869184:65536
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs=$(sed -n 's/^\(LIBISCSI_LIBS\|URING_LIBS\|CRYPTO_LIBS\|JANSSON_LIBS\|RBD_LIBS\) = //p' \
	"$BUILD/Makefile" | tr '\n' ' ')
# shellcheck disable=SC2086
cc -O2 -D_GNU_SOURCE -I "$BUILD" -I "$SRC/include" -I "$SRC/src" "$SRC/tests/bench/core_ram.c" \
	"$BUILD/.libs/libhotlun.a" $libs -lm -pthread -o "$tmp/core_ram"
for arg; do
	"$tmp/core_ram" "${arg%%:*}" "${arg#*:}"
done
