#!/bin/bash
# cache_warm_proof.sh - a warm restart never serves what another client
# wrote to the origin while hotlund was down (issue 17 item 4; ARCHITECTURE
# invariant 5). A 64 MiB file origin behind a cache of 64 KiB blocks:
#  1. warm the cache (random 64K reads), stop hotlund (SIGTERM), rewrite the
#     origin file with other data (dd conv=notrunc: same inode, same size),
#     restart, read the whole LUN back: 0 blocks may differ from the file
#     (before the proofs every cached block came back stale), and the stats
#     say the start dropped the blocks because the file changed;
#  2. nothing changed while down: the restart is warm (blocks kept, reads
#     served by the cache device) and the data is right;
#  3. hotlund killed (SIGKILL) after the cache settled, the origin rewritten,
#     restart: not stale; killed again with the origin untouched: warm;
#  4. the map copied at a clean stop and put back after one more clean run
#     (state_dir restored from a backup): older than the cache device, cold
#     (rev20 #5; warm on the copy before the map named its device).
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-img dd
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"

T=$(hl_tmpdir)
BS=65536
NBLK=1024
dd if=/dev/urandom of="$T/origin.img" bs=$BS count=$NBLK status=none || hl_error "dd"
hl_cache_front_one warm-proof "file:$T/origin.img" 80M 64K

# warm: random 64K reads over the whole LUN (most blocks get cached)
warm() {
	"$BENCH" --workload uniform --bs 64K --count 6000 --qd 8 --seed "$1" --quiet \
		"$URL" >"$T/bench.out" 2>&1 || { cat "$T/bench.out" >&2; hl_fail "warm-up reads failed"; }
	USED=$(stat_of used_slots)
	hl_log "cached blocks after warm-up: $USED (+$(stat_of window_used_slots) in RAM)"
	[ "$USED" -gt 500 ] || hl_fail "only $USED blocks cached: the test would prove little"
}

# settle: records written and the origin's proof recorded (quiet for one interval)
settle() { hl_cache_settle "$SOCK" ssd 3; }

stale_blocks() { hl_stale_blocks "$URL" "$T/origin.img" $BS; } # 64K blocks that differ

rewrite_origin() {
	dd if=/dev/urandom of="$T/origin.img" bs=$BS count=$NBLK conv=notrunc status=none ||
		hl_error "dd rewrite"
}

# ---- 1. clean stop, origin rewritten while down
hl_front_start "$T/hotlund.conf"
warm 1
settle
hl_stop "$FRONT_PID"
rewrite_origin
hl_front_start "$T/hotlund.conf"
stale=$(stale_blocks)
hl_log "1. clean stop + rewrite: $stale stale block(s); warm_start: $(stat_of warm_start san)"
[ "$stale" = 0 ] || hl_fail "$stale of $NBLK blocks read back stale after the origin was rewritten while hotlund was down"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "blocks kept although the file changed"
[ "$(stat_of warm_dropped san)" -ge "$USED" ] || hl_fail "the blocks were not counted as dropped"
stat_of warm_start san | grep -q "file changed: ctime" || hl_fail "warm_start gives no reason: $(stat_of warm_start san)"
grep -q "warm start: kept 0 block(s), dropped .*file changed: ctime" "$FRONT_LOG" ||
	hl_fail "no notice about the dropped blocks in the log"
"$HL_BUILDDIR/hotlunctl" --socket "$SOCK" stats >"$T/stats.txt" 2>&1 || hl_fail "hotlunctl stats"
grep -q "^  start    disk san: kept 0, dropped [0-9]* (file changed: ctime)$" "$T/stats.txt" ||
	{ cat "$T/stats.txt" >&2; hl_fail "hotlunctl stats does not show what the start dropped"; }

# ---- 2. clean stop, nothing changed: warm
warm 2
settle
hl_stop "$FRONT_PID"
hl_front_start "$T/hotlund.conf"
kept=$(stat_of warm_kept san)
hl_log "2. clean stop, origin untouched: warm_start: $(stat_of warm_start san)"
[ "$kept" -ge "$USED" ] || hl_fail "a clean restart with the origin untouched kept only $kept of $USED blocks"
[ "$(stat_of warm_dropped san)" = 0 ] || hl_fail "blocks dropped although nothing changed"
stale=$(stale_blocks)
[ "$stale" = 0 ] || hl_fail "$stale stale block(s) after a warm restart"
from_cache=$(stat_of bytes_read_cache san)
total=$(stat_of bytes_read san)
hl_log "2. read after the warm restart: $from_cache of $total bytes from the cache device"
[ "$from_cache" -gt $((total / 2)) ] || hl_fail "the warm restart did not serve reads from the cache"

# ---- 3. SIGKILL after the cache settled, origin rewritten: not stale
warm 3
settle
kill -KILL "$FRONT_PID"
wait "$FRONT_PID" 2>/dev/null
hl_forget "$FRONT_PID"
rewrite_origin
hl_front_start "$T/hotlund.conf"
stale=$(stale_blocks)
hl_log "3. SIGKILL + rewrite: $stale stale block(s); warm_start: $(stat_of warm_start san)"
[ "$stale" = 0 ] || hl_fail "$stale stale block(s) after a crash and a rewrite of the origin"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "blocks kept although the file changed"

# SIGKILL with the origin untouched: the proof recorded while running keeps it warm
warm 4
settle
kill -KILL "$FRONT_PID"
wait "$FRONT_PID" 2>/dev/null
hl_forget "$FRONT_PID"
hl_front_start "$T/hotlund.conf"
kept=$(stat_of warm_kept san)
hl_log "3. SIGKILL, origin untouched: warm_start: $(stat_of warm_start san)"
[ "$kept" -ge $((USED * 9 / 10)) ] || hl_fail "a crash with the origin untouched kept only $kept of $USED blocks"
stale=$(stale_blocks)
[ "$stale" = 0 ] || hl_fail "$stale stale block(s) after a warm restart from a crash"
hl_check_alive "$FRONT_PID"

# ---- 4. state_dir put back from a backup: the map copied at a clean stop,
# one more run (a clean stop and start), the copy put back: it is older
# than the cache device (its superblock seq), so the start is cold (the
# origin is untouched and its proof holds: before the device line the
# start was warm on the copy).
hl_stop "$FRONT_PID"
MAP=$T/state/cache-ssd.map
grep -q '^device [0-9a-f]\{32\} [0-9][0-9]*$' "$MAP" || hl_fail "the map names no device: $(cat "$MAP")"
cp "$MAP" "$T/map.bak" || hl_error "cp"
hl_front_start "$T/hotlund.conf"
kept=$(stat_of warm_kept san)
hl_log "4. clean restart before the copy is put back: warm_start: $(stat_of warm_start san)"
[ "$kept" -gt 0 ] || hl_fail "a clean restart kept no block"
hl_stop "$FRONT_PID"
cp "$T/map.bak" "$MAP" || hl_error "cp"
hl_front_start "$T/hotlund.conf"
hl_log "4. the map's backup put back: warm_start: $(stat_of warm_start san)"
grep -q "a map older than the device (restored from a backup?)" "$FRONT_LOG" ||
	hl_fail "no warning about the map older than the cache device in the log"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "blocks kept from a map put back from a backup"
stale=$(stale_blocks)
[ "$stale" = 0 ] || hl_fail "$stale stale block(s) after the map's backup was put back"
hl_check_alive "$FRONT_PID"
hl_stop "$FRONT_PID"
hl_log "PASS"
