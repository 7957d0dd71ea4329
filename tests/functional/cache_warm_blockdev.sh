#!/bin/bash
# cache_warm_blockdev.sh - a block device origin cannot prove that nobody
# wrote it while hotlund was down (it records no change time), so a restart
# drops its cached blocks (cold, never stale) unless the admin declares the
# disk `exclusive = yes`; then the restart is warm (issue 17 item 4). But
# not after hotlund itself wrote the disk while it ran without the cache
# (step 3; the live case, a reload: engine_proof_ut "disown: ..."), nor when the
# path names another device at the next start (step 4).
# Origin: a 64 MiB loop device; skipped where no loop device can be made.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need losetup

T=$(hl_tmpdir)
truncate -s 64M "$T/origin.backing" "$T/other.backing"
LOOP=$(losetup -f --show "$T/origin.backing" 2>/dev/null) || hl_skip "no loop device (not root?)"
LOOP2=$(losetup -f --show "$T/other.backing" 2>/dev/null) || { losetup -d "$LOOP"; hl_skip "no second loop device"; }
# hotlund goes first (hl_cleanup), then the devices
trap 'hl_cleanup; rc=$?; losetup -d "$LOOP" "$LOOP2" 2>/dev/null; exit $rc' EXIT
# the origin through a symbolic link, as /dev/disk/by-*/ names are (step 4 moves it)
ln -s "$LOOP" "$T/dev"
hl_cache_front_one warm-blockdev "file:$T/dev" 80M 64K
warm() {
	"$BENCH" --workload uniform --bs 64K --range 16M --count 1500 --qd 8 --seed "$1" --quiet \
		"$URL" >"$T/bench.out" 2>&1 || { cat "$T/bench.out" >&2; hl_fail "warm-up reads failed"; }
	USED=$(stat_of used_slots)
	[ "$USED" -gt 100 ] || hl_fail "only $USED blocks cached: the test would prove little"
	hl_cache_settle "$SOCK" ssd
}

# 1. no exclusive: cold after a clean restart, with the reason
hl_front_start "$T/hotlund.conf"
warm 1
hl_stop "$FRONT_PID"
grep -q "disk san: the origin cannot prove itself unchanged" "$FRONT_LOG" ||
	hl_fail "no notice at stop that the next start drops the blocks"
hl_front_start "$T/hotlund.conf"
ws=$(stat_of warm_start san)
hl_log "1. block device, $USED blocks cached, clean restart: warm_start: $ws"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "a block device without exclusive = yes restarted warm: $ws"
[ "$(stat_of warm_dropped san)" -ge "$USED" ] || hl_fail "dropped blocks not counted: $ws"
grep -q "no proof recorded" <<<"$ws" || hl_fail "warm_start gives no reason: $ws"

# 2. exclusive = yes: warm
warm 2
hl_stop "$FRONT_PID"
sed -i 's/^cache = ssd$/&\nexclusive = yes/' "$T/hotlund.conf"
hl_front_start "$T/hotlund.conf"
hl_log "2. exclusive = yes, first start: warm_start: $(stat_of warm_start san)"
warm 3
hl_stop "$FRONT_PID"
hl_front_start "$T/hotlund.conf"
ws=$(stat_of warm_start san)
hl_log "2. exclusive = yes, $USED blocks cached, clean restart: warm_start: $ws"
[ "$(stat_of warm_kept san)" -ge "$USED" ] || hl_fail "exclusive = yes did not keep the blocks: $ws"
[ "$(stat_of warm_dropped san)" = 0 ] || hl_fail "exclusive = yes dropped blocks: $ws"
grep -q "exclusive = yes" <<<"$ws" || hl_fail "warm_start gives no reason: $ws"
hl_check_alive "$FRONT_PID"
hl_stop "$FRONT_PID"

# 3. exclusive = yes, and hotlund itself writes the disk while it runs without
# the cache: the next start with the cache must not serve what was cached
# before (the admin's word covers other writers, not this one). Before the
# fix it kept every block and read back stale all the blocks that had been
# cached and were rewritten.
sed -i '/^cache = ssd$/d' "$T/hotlund.conf"
hl_front_start "$T/hotlund.conf"
qemu-io -f raw -c "write -P 0xab 0 16M" "$URL" >"$T/q.out" 2>&1 ||
	hl_fail "write through the uncached disk: $(cat "$T/q.out")"
hl_stop "$FRONT_PID"
sed -i 's/^exclusive = yes$/cache = ssd\n&/' "$T/hotlund.conf"
hl_front_start "$T/hotlund.conf"
ws=$(stat_of warm_start san)
stale=$(hl_stale_blocks "$URL" "$T/origin.backing" 65536)
hl_log "3. exclusive = yes, the disk written while uncached, restart with the cache: warm_start: $ws; $stale stale block(s)"
[ "$stale" = 0 ] || hl_fail "$stale stale block(s) after the disk was written without its cache"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "blocks kept after the disk was written without its cache: $ws"

# 4. exclusive = yes, and at the next start the path names another device of
# the same size (a /dev/sdX renumbered, a by-path link moved): its proof names
# the device, so the start is cold. Before, "excl:SIZE" held: all 256 cached
# blocks of the first device were served as the second's.
warm 5
hl_stop "$FRONT_PID"
python3 -c "open('$T/other.backing', 'r+b').write(b'\xee' * (16 << 20))"
ln -sfn "$LOOP2" "$T/dev"
hl_front_start "$T/hotlund.conf"
ws=$(stat_of warm_start san)
stale=$(hl_stale_blocks "$URL" "$T/other.backing" 65536)
hl_log "4. exclusive = yes, $USED blocks cached, the path names another device: warm_start: $ws; $stale stale block(s)"
[ "$stale" = 0 ] || hl_fail "$stale block(s) of the first device served as the second's"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "blocks kept for another device: $ws"

hl_check_alive "$FRONT_PID"
hl_stop "$FRONT_PID"
hl_log "PASS"
