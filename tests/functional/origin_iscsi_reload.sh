#!/bin/bash
# origin_iscsi_reload.sh - a reload that reopens an iscsi:// disk after I/O
# ran through it. The front's disk has origin iscsi://SAN (a first hotlund
# with a file LUN); each step runs a read/write load through the front (its
# origin sessions stay up on both reactors), edits the front's config,
# reloads it, then writes a random image through the front within a bound
# and checks it in the SAN's file and read back through the front:
#  1. cached -> uncached (the cached origin is closed, a new one opened);
#  2. uncached -> cached;
#  3. cached -> uncached again, then 4. only origin_iops changes (the
#     uncached disk is reopened all the same; on a cached disk any such
#     change is refused while it is attached to its cache).
# The old origin's close used to free its sessions (one per reactor) from
# the background close thread while their socket events and timers were
# still registered on the running reactors: the next write hung or the
# front crashed (ASan: heap-use-after-free in the reactor loop).
# Ends with a stop (SIGTERM) of the front that must stay within its bound.
. "$(dirname "$0")/lib.sh"
hl_need python3 qemu-img
hl_cache_front_prereqs
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_skip "qemu-img has no iscsi driver (install qemu-block-extra)"
CTL=$HL_BUILDDIR/hotlunctl
T=$(hl_tmpdir)
SIZE=$((32 * 1024 * 1024))
IO_BOUND=30 # seconds a post-reload write or read may take (a hang fails the test)

hl_target_start --size $SIZE
SAN_PID=$HL_PID SAN_DISK=$HL_DISK
ORIGIN="iscsi://127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN?timeout=5"

IQN=$HL_IQN_PREFIX:iscsi-reload-front
PORT=$(hl_free_port)
ST=$T/st
SOCK=$ST/ctl.sock
URL=iscsi://127.0.0.1:$PORT/$IQN/0
mkdir -p "$ST"
truncate -s 64M "$T/cache.img"

# conf FILE cached|uncached [KEY=VALUE]: the front's config, KEY in [disk].
conf() {
	hl_cache_front_conf "$1" "$PORT" "$ST" "$IQN" "$ORIGIN" \
		device="$T/cache.img" size=64M block_size=4K admission=always
	if [ -n "${3:-}" ]; then
		sed -i "s/^cache = ssd$/cache = ssd\n${3%%=*} = ${3#*=}/" "$1"
	fi
	[ "$2" = uncached ] && sed -i '/^cache = ssd$/d' "$1"
	# the [cache] section stays: only the disk's link to it goes
	return 0
}

# load SECONDS: mixed reads and writes through the front (both reactors).
load() {
	"$BENCH" --quiet --read 50 --qd 16 --sessions 2 --range 16M --time "$1" "$URL" >"$T/load.out" 2>&1 ||
		hl_fail "the load through the front failed: $(tail -n 3 "$T/load.out")"
}

# check STEP: a random image written through the front lands in the SAN's
# file and reads back through the front, each within IO_BOUND.
check() {
	head -c $SIZE /dev/urandom >"$T/src.img"
	timeout $IO_BOUND qemu-img convert -n -f raw -O raw "$T/src.img" "$URL" >"$T/q.out" 2>&1 ||
		{ hl_check_alive "$FRONT_PID"; cat "$T/q.out" >&2; hl_fail "$1: the write through the front failed or hung ($IO_BOUND s)"; }
	cmp -s "$T/src.img" "$SAN_DISK" || hl_fail "$1: the SAN's file differs from what was written through the front"
	timeout $IO_BOUND qemu-img compare -q -f raw -F raw "$T/src.img" "$URL" >"$T/q.out" 2>&1 ||
		{ hl_check_alive "$FRONT_PID"; cat "$T/q.out" >&2; hl_fail "$1: reading back through the front differs, failed or hung"; }
	hl_check_alive "$FRONT_PID"
}

# step NAME CONF: a load, then a reload to CONF, then check. The reload
# cannot run under the load (hotlunctl reload has no force, and a disk in
# use by a session may not change), but the origin's sessions to the SAN
# (one per reactor that submitted) stay up with their events and timers.
step() {
	local out t0 n0 n1
	load 3
	n0=$(grep -c 'disk san: previous origin closing' "$FRONT_LOG")
	cp "$2" "$T/live.conf"
	t0=$(date +%s%N)
	out=$(timeout $IO_BOUND "$CTL" --socket "$SOCK" reload 2>&1) || hl_fail "$1: reload: $out"
	hl_log "$1: reload answered in $((($(date +%s%N) - t0) / 1000000)) ms"
	sleep 1 # the old sessions' timers (250 ms ticks) would fire now
	hl_check_alive "$FRONT_PID"
	n1=$(grep -c 'disk san: previous origin closing' "$FRONT_LOG")
	[ "$n1" = $((n0 + 1)) ] || hl_fail "$1: the reload did not close the old origin"
	check "$1"
	hl_log "$1: writes and reads through the front complete and correct"
}

conf "$T/cached.conf" cached
conf "$T/uncached.conf" uncached
conf "$T/iops.conf" uncached origin_iops=100000
grep -q '^origin_iops = 100000$' "$T/iops.conf" || hl_error "origin_iops config not written"
cp "$T/cached.conf" "$T/live.conf"
hl_front_start "$T/live.conf"
check "start"

step "1. cached -> uncached" "$T/uncached.conf"
step "2. uncached -> cached" "$T/cached.conf"
step "3. cached -> uncached" "$T/uncached.conf"
step "4. origin_iops only" "$T/iops.conf"
grep -q 'heap-use-after-free\|AddressSanitizer' "$FRONT_LOG" && hl_fail "ASan report in the front's log"

t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$((($(date +%s%N) - t0) / 1000000))
hl_log "front stopped in $ms ms"
[ "$ms" -lt 20000 ] || hl_fail "the stop took $ms ms"
hl_stop "$SAN_PID"
hl_log PASS
