#!/bin/bash
# cache_warm_rbd.sh - a warm restart of a cached rbd disk drops exactly the
# blocks another client wrote while hotlund was down and keeps the rest
# (issue 17 item 4): at a clean stop the cache leaves a mark snapshot on the
# image (hotlun-TAG-TIME); at the next start rbd_diff_iterate2 from it lists
# what changed since. On a throw-away single-node Ceph (mini_ceph.sh):
#  1. 64 MiB of random data written through hotlund, the cache warmed with
#     random 64K reads, hotlund stopped: one mark snapshot on the image;
#  2. another client (qemu-io, rbd driver) writes 1 MiB at 8 MiB and 8 KiB
#     at 40 MiB + 4 KiB; restart: the blocks of those objects are dropped,
#     the rest kept; the whole LUN reads back identical to what the image
#     holds (0 stale blocks), and most reads come from the cache;
#  3. while running, the mark of the earlier run is replaced by a new one
#     (one mark per disk on the image); the mark snapshot removed by the
#     admin while hotlund is down -> the next start is cold;
#  4. hotlund killed (-9) once its running mark is recorded, another client
#     writes 64 KiB: the restart drops that object's blocks, keeps the rest,
#     0 stale blocks.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-img qemu-io rbd ceph ceph-mon ceph-osd
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"
qemu-img --help 2>/dev/null | grep -qw rbd || hl_missing "qemu-img has no rbd driver (install qemu-block-extra)"

T=$(hl_tmpdir)
hl_ceph_up "$T/ceph" origin:64M
RBD_URL="rbd:rbd/origin:conf=$cluster/ceph.conf"

BS=65536
hl_cache_front_one warm-rbd rbd:rbd/origin 96M 64K
sed -i "s|^cache = ssd$|&\nrbd_conf = $cluster/ceph.conf|" "$T/hotlund.conf"
marks() { rbd snap ls rbd/origin 2>/dev/null | awk '$2 ~ /^hotlun-/ {print $2}'; }
settle() { hl_cache_settle "$SOCK" ssd; }
stale_blocks() { hl_stale_blocks "$URL" "$T/want.img" $BS; } # 64K blocks that differ from want.img

# ---- 1. data in, cache warm, clean stop: one mark
head -c $((64 * 1024 * 1024)) /dev/urandom >"$T/want.img"
hl_front_start "$T/hotlund.conf"
timeout 120 qemu-img convert -n -f raw -O raw "$T/want.img" "$URL" >"$T/q.out" 2>&1 ||
	{ cat "$T/q.out" >&2; hl_fail "qemu-img convert to the LUN failed"; }
"$BENCH" --workload uniform --bs 64K --count 6000 --qd 8 --seed 1 --quiet "$URL" \
	>"$T/bench.out" 2>&1 || { cat "$T/bench.out" >&2; hl_fail "warm-up reads failed"; }
settle
USED=$(stat_of used_slots)
hl_log "1. cached blocks: $USED"
[ "$USED" -gt 500 ] || hl_fail "only $USED blocks cached: the test would prove little"
hl_stop "$FRONT_PID"
m1=$(marks)
hl_log "1. marks after the stop: $m1"
[ "$(wc -w <<<"$m1")" = 1 ] || hl_fail "expected one mark snapshot, found: $m1"

# ---- 2. another client writes while hotlund is down
qemu-io -f raw -c "write -P 0x5a 8M 1M" -c "write -P 0x6b 41988K 8K" "$RBD_URL" >"$T/io.out" 2>&1 ||
	{ cat "$T/io.out" >&2; hl_fail "qemu-io write to the image failed"; }
python3 - "$T/want.img" <<'PY'
import sys
f = open(sys.argv[1], 'r+b')
f.seek(8 << 20); f.write(b'\x5a' * (1 << 20))
f.seek(41988 << 10); f.write(b'\x6b' * 8192)
PY
hl_front_start "$T/hotlund.conf"
stale=$(stale_blocks)
hl_log "2. stale blocks: $stale"
[ "$stale" = 0 ] || hl_fail "$stale block(s) read back stale after another client wrote the image while hotlund was down"
ws=$(stat_of warm_start san)
kept=$(stat_of warm_kept san)
dropped=$(stat_of warm_dropped san)
hl_log "2. restart after another client wrote: warm_start: $ws"
grep -q "rbd diff since the mark" <<<"$ws" || hl_fail "no diff: $ws"
[ "$dropped" -ge 1 ] && [ "$dropped" -le 128 ] || hl_fail "expected the blocks of 2 objects dropped (<= 128), got $dropped"
[ "$kept" -ge $((USED - 128)) ] || hl_fail "kept only $kept of $USED blocks"
from_cache=$(stat_of bytes_read_cache san)
total=$(stat_of bytes_read san)
hl_log "2. $from_cache of $total bytes read from the cache device"
[ "$from_cache" -gt $((total / 2)) ] || hl_fail "the warm restart did not serve reads from the cache"

# ---- 3. while running the old mark is replaced; a mark removed while down: cold
m2=
for i in $(seq 1 100); do
	m2=$(marks)
	[ "$(wc -w <<<"$m2")" = 1 ] && [ "$m2" != "$m1" ] && break
	sleep 0.1
done
hl_log "3. marks while running: $m2"
[ "$(wc -w <<<"$m2")" = 1 ] && [ "$m2" != "$m1" ] || hl_fail "the old mark was not replaced while running: $m2"
hl_stop "$FRONT_PID"
for m in $(marks); do rbd snap rm "rbd/origin@$m" >/dev/null 2>&1 || hl_fail "rbd snap rm $m"; done
hl_front_start "$T/hotlund.conf"
ws=$(stat_of warm_start san)
hl_log "3. mark removed while down: warm_start: $ws"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "blocks kept without a mark: $ws"
grep -q "mark snapshot gone" <<<"$ws" || hl_fail "warm_start gives no reason: $ws"
stale=$(stale_blocks)
[ "$stale" = 0 ] || hl_fail "$stale stale block(s) after a cold start"

# ---- 4. killed (-9) once the running mark is recorded, another client writes:
# the changed objects are dropped, the rest kept, nothing stale
"$BENCH" --workload uniform --bs 64K --count 6000 --qd 8 --seed 4 --quiet "$URL" \
	>"$T/bench.out" 2>&1 || { cat "$T/bench.out" >&2; hl_fail "warm-up reads failed"; }
settle
for i in $(seq 1 100); do
	grep -q "^proof [0-9]* rbd:" "$ST/cache-ssd.map" && break
	sleep 0.1
done
grep -q "^proof [0-9]* rbd:" "$ST/cache-ssd.map" || hl_fail "no mark recorded while running: $(cat "$ST/cache-ssd.map")"
USED=$(stat_of used_slots)
kill -KILL "$FRONT_PID"
wait "$FRONT_PID" 2>/dev/null
hl_forget "$FRONT_PID"
# the dead gateway's lock goes when its watch times out (5 s in mini_ceph)
timeout 60 qemu-io -f raw -c "write -P 0x7e 24M 64K" "$RBD_URL" >"$T/io.out" 2>&1 ||
	{ cat "$T/io.out" >&2; hl_fail "qemu-io write after the kill failed"; }
python3 - "$T/want.img" <<'PY'
import sys
f = open(sys.argv[1], 'r+b')
f.seek(24 << 20); f.write(b'\x7e' * 65536)
PY
hl_front_start "$T/hotlund.conf"
stale=$(stale_blocks)
ws=$(stat_of warm_start san)
hl_log "4. kill -9 ($USED blocks cached), another client wrote: $stale stale block(s); warm_start: $ws"
[ "$stale" = 0 ] || hl_fail "$stale block(s) read back stale after a crash and another client's write"
grep -q "rbd diff since the mark" <<<"$ws" || hl_fail "no diff after the crash: $ws"
[ "$(stat_of warm_kept san)" -ge $((USED - 128)) ] || hl_fail "a crash kept only $(stat_of warm_kept san) of $USED blocks"
hl_check_alive "$FRONT_PID"
hl_stop "$FRONT_PID"
hl_log "PASS"
