#!/bin/sh
# stale_sync.sh - the cost of the sync after a big drop of stale claims
# (tests/bench/stale_sync.c), built against the library of BUILD.
#   tests/bench/stale_sync.sh [BUILD [N...]]   (N default: 100000 1000000)
#   tests/bench/stale_sync.sh BUILD --sync N     (the engine's real sync on a
#                                                 sparse device file in BUILD)
set -e
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- 100000 1000000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs=$(sed -n 's/^LIBS = //p' "$BUILD/Makefile")
cc -O2 -D_GNU_SOURCE -I "$BUILD" -I "$SRC/include" -I "$SRC/src" "$SRC/tests/bench/stale_sync.c" \
	"$BUILD/.libs/libhotlun.a" $libs -lm -pthread -o "$tmp/stale_sync"
if [ "$1" = --sync ]; then
	"$tmp/stale_sync" --sync "$BUILD/stale_sync.dev" "$2"
else
	"$tmp/stale_sync" "$@"
fi
