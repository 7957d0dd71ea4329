#!/bin/bash
# cache_dead_fail.sh - the cache device fails (an I/O error on a data read:
# HOTLUN_TEST_CACHE_DEV_READ_FAIL=1) while the metadata thread is stuck in a
# record sync holding sync_lock (HOTLUN_TEST_CACHE_META_HOLD: a device write
# that does not return). Writes of the cache's two disks ("san", cached
# blocks: it needs the failure durable before its origin write; "san2": a
# pass-through write waits for that too) must still complete, to the origin,
# within a bound: the kill of the on-device metadata waited for sync_lock, so
# they hung for ever. Then:
#  1. both writes done within 5 s (the one to san on a cached block), the
#     map says "failed", the writes are in the origins;
#  2. the stop ends within its bounds (the metadata thread abandoned);
#  3. the restart formats the device and no block of either disk differs
#     from its origin (read whole through iSCSI).
. "$(dirname "$0")/lib.sh"

hl_need python3 qemu-img qemu-io
hl_cache_front_prereqs
. "$(dirname "$0")/cache_dead_lib.sh"
T=$(hl_tmpdir)
dead_setup deadfail "$T/f.conf"
head -c 16M /dev/urandom >"$T/o2.img" || hl_error "cannot write $T/o2.img"
sed -i "s|^lun.0 = san$|&\nlun.1 = san2|" "$T/f.conf"
printf '\n[disk san2]\norigin = file:%s\ncache = ssd\n' "$T/o2.img" >>"$T/f.conf"
# shellcheck disable=SC2154 # url, sock: dead_setup's (cache_dead_lib.sh)
url2=${url%/0}/1

# io URL CMD...: qemu-io commands on URL (20 s at most)
io() {
	local u=$1 c a=()
	shift
	for c in "$@"; do a+=(-c "$c"); done
	timeout 20 qemu-io -f raw "${a[@]}" "$u" >"$T/io.out" 2>&1 ||
		hl_fail "qemu-io $* failed: $(tail -n 3 "$T/io.out")"
}

# scattered FROM: 16 reads of 64 KiB, 1 MiB apart from byte FROM (small and
# apart: each a miss filled into SSD slots, not a sequential bypass)
scattered() {
	local i c=()
	for i in $(seq 0 15); do c+=("read $(($1 + (i << 20))) 64k"); done
	io "$url" "${c[@]}"
}

# ---- set-up: 16 blocks of san on the SSD and recorded, then a record sync held
start_held "$T/f.conf" HOTLUN_TEST_CACHE_DEV_READ_FAIL=1
scattered 0
hl_cache_settle "$sock" ssd
[ "$(hl_cache_stat "$sock" ssd used_slots)" -gt 0 ] || hl_fail "nothing was cached on the SSD"
touch "$T/hold"
scattered $((512 << 10)) # new fills: changes, the next record sync is held
hl_wait_grep "$FRONT_LOG" 'test knob: a metadata write is held' 10 ||
	hl_fail "no record sync was held: $(tail -n 5 "$FRONT_LOG")"

# ---- 1. the device fails (a hit's read); then a write to each disk
io "$url" 'read 0 64k' # the first device read (a hit): it fails, served from the origin
hl_wait_grep "$FRONT_LOG" 'I/O error.*switching to pass-through' 5 ||
	hl_fail "the device did not fail: $(tail -n 5 "$FRONT_LOG")"
t0=$(date +%s%N)
io "$url" 'write -P 0x6b 1M 64k' # cached (scattered 0)
io "$url2" 'write -P 0x6c 2M 64k'
ms=$(ms_since "$t0")
hl_log "1. two writes after the failure, a record sync held: $ms ms"
[ "$ms" -lt 5000 ] || hl_fail "1. the writes took $ms ms"
grep -qx 'state failed' "$T/st/cache-ssd.map" ||
	hl_fail "1. the map does not say failed: $(head -n 3 "$T/st/cache-ssd.map")"
python3 - "$T/o.img" "$T/o2.img" <<'PY' || hl_fail "1. a write is not in its origin"
import sys
a, b = open(sys.argv[1], 'rb'), open(sys.argv[2], 'rb')
a.seek(1 << 20)
b.seek(2 << 20)
sys.exit(a.read(65536) != b'\x6b' * 65536 or b.read(65536) != b'\x6c' * 65536)
PY

# ---- 2. the stop, the record sync still held
t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$(ms_since "$t0")
hl_log "2. the stop took $ms ms"
[ "$ms" -lt $((4 * BOUND)) ] || hl_fail "2. the stop took $ms ms with bounds of $BOUND ms"
grep -qx 'state failed' "$T/st/cache-ssd.map" ||
	hl_fail "2. the map does not say failed after the stop: $(head -n 3 "$T/st/cache-ssd.map")"

# ---- 3. the restart formats; both disks read as their origins
rm -f "$T/hold"
restart_formats 3 "$T/f.conf"
n=$(hl_stale_blocks "$url2" "$T/o2.img" 4096)
[ "$n" = 0 ] || hl_fail "3. $n block(s) of san2 differ from its origin after the restart"
hl_stop "$FRONT_PID"
exit 0
