#!/bin/bash
# cache_twotier.sh - issue 4: the read cache in hotlund's data path, two tiers
# on loopback: a "SAN" (a first hotlund with a file LUN) and a front hotlund
# whose disk is iscsi://SAN with a [cache] on a local file.
#  1. a 16 MiB image of 64 KiB chunks with known patterns goes in through
#     the front (qemu-io) and lands on the SAN; it is read back in random
#     order twice (the second pass is served by the cache: stats over the
#     control socket), and a sequential qemu-img compare of the whole LUN
#     (which the cache bypasses by design) agrees;
#  2. a clean restart of the front keeps the warm cache: the log says blocks
#     were restored and a random-order read pass through the front reads
#     (almost) nothing from the SAN;
#  3. kill -9 serves no stale block: pattern A is written and read (admitted,
#     its record flushed), pattern B written, the front killed at once; after
#     the restart the range reads back B;
#  4. hotlun-bench --verify, 70% reads / 30% writes at 64 in flight on a hot
#     set, in invalidate and update mode: no read returns anything but the
#     last completed write (writes race fills, hits and updates);
#     without exclusive = yes in the front's [disk], a restart is cold (an
#     iscsi origin cannot prove that nobody else wrote it);
#  5. the SAN's disk swapped for another file under the same name: the
#     front must not serve the old disk's blocks;
#  6. a cache device that is also a disk's origin is refused at start-up.
. "$(dirname "$0")/lib.sh"
hl_need qemu-img qemu-io python3
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_skip "qemu-img has no iscsi driver (install qemu-block-extra)"
[ "$HL_TARGET" = tgt ] && hl_skip "the front under test is hotlund; nothing to run against tgt"

T=$(hl_tmpdir)
SIZE=$((64 * 1024 * 1024))
IMG=$((16 * 1024 * 1024))
FRONT_IQN=$HL_IQN_PREFIX:cache-twotier-front

# ---- the SAN
hl_target_start --size $SIZE
SAN_PID=$HL_PID SAN_PORT=$HL_PORT SAN_IQN=$HL_IQN SAN_LUN=$HL_LUN SAN_URL=$HL_URL SAN_DISK=$HL_DISK

FRONT_PORT=$(hl_free_port)
FRONT_URL=iscsi://127.0.0.1:$FRONT_PORT/$FRONT_IQN/0
ST=$T/front-state
mkdir -p "$ST"
hl_cache_front_conf "$T/front.conf" "$FRONT_PORT" "$ST" "$FRONT_IQN" \
	"iscsi://127.0.0.1:$SAN_PORT/$SAN_IQN/$SAN_LUN" \
	device="$T/cache.img" size=48M block_size=64K admission=always
# Only the front writes the SAN: it may keep its blocks across restarts
# (an iscsi origin cannot prove that itself; docs/cache-engine.md).
sed -i 's/^cache = ssd$/&\nexclusive = yes/' "$T/front.conf"


# stat KEY: a counter of disk "san" in cache "ssd"; cstat KEY: of the whole cache.
stat() { hl_cache_stat "$ST/ctl.sock" ssd "$1" san; }
cstat() { hl_cache_stat "$ST/ctl.sock" ssd "$1"; }

# wait_cstat KEY MIN: wait (up to 20 s) until the cache counter KEY reaches MIN.
wait_cstat() {
	local i v
	for i in $(seq 1 200); do
		v=$(cstat "$1")
		[ "$v" -ge "$2" ] && return 0
		sleep 0.1
	done
	hl_fail "cache counter $1 stayed at $v (< $2)"
}

# wait_idle_synced: no request left (fills done), then no record change left unflushed.
wait_idle_synced() {
	local i
	hl_cache_idle "$ST/ctl.sock" ssd 20 || hl_fail "requests still in flight"
	for i in $(seq 1 200); do
		[ "$(cstat meta_dirty)" = False ] && return 0
		sleep 0.1
	done
	hl_fail "slot records never flushed"
}

compare_front() {
	qemu-img compare -f raw -F raw "$T/src.img" "$FRONT_URL" >"$T/q.out" 2>&1 ||
		{ cat "$T/q.out" >&2; hl_fail "$1: qemu-img compare through the front: differs"; }
	grep -q 'Images are identical' "$T/q.out" || { cat "$T/q.out" >&2; hl_fail "$1: compare"; }
}

# io LABEL CMDS-FILE: run qemu-io with the -c commands in CMDS-FILE through the front.
io() {
	local args=()
	mapfile -t args <"$2"
	qemu-io -f raw "${args[@]}" "$FRONT_URL" >"$T/io.out" 2>&1 || { tail -5 "$T/io.out" >&2; hl_fail "$1: qemu-io failed"; }
	if grep -q "Pattern verification failed" "$T/io.out"; then
		grep -m3 "Pattern verification failed" "$T/io.out" >&2
		hl_fail "$1: wrong data"
	fi
}

# chunks OP ORDER: -c lines for 64 KiB chunk i of the 16 MiB image with pattern (i % 255) + 1.
# Reads go in random order: a sequential scan would bypass the cache (by design).
NCHUNK=$((IMG / 65536))
chunks() {
	local i
	for i in $($2); do
		printf -- '-c\n%s -P %d %d 64k\n' "$1" $((i % 255 + 1)) $((i * 65536))
	done
}
chunks write "seq 0 $((NCHUNK - 1))" >"$T/write.cmds"

# ---- 1. write through the front, read twice (random order)
hl_front_start "$T/front.conf"
grep -q "cache ssd: .*formatted" "$FRONT_LOG" || { cat "$FRONT_LOG" >&2; hl_fail "the cache was not formatted on first start"; }
io "write" "$T/write.cmds"
python3 - "$T/src.img" "$NCHUNK" <<'PY'
import sys
with open(sys.argv[1], "wb") as f:
    for i in range(int(sys.argv[2])):
        f.write(bytes([i % 255 + 1]) * 65536)
PY
cmp -s -n $IMG "$T/src.img" "$SAN_DISK" || hl_fail "the SAN's file differs from what was written through the front"
chunks read "shuf -i 0-$((NCHUNK - 1))" >"$T/read1.cmds"
io "first read" "$T/read1.cmds"
wait_cstat used_slots "$NCHUNK" # fills finish after the replies
c1=$(stat bytes_read_cache)
o1=$(stat bytes_read_origin)
chunks read "shuf -i 0-$((NCHUNK - 1))" >"$T/read2.cmds"
io "second read" "$T/read2.cmds"
c2=$(stat bytes_read_cache)
o2=$(stat bytes_read_origin)
hl_log "first pass: ${c1} B from cache, ${o1} B from the SAN; second pass: +$((c2 - c1)) from cache, +$((o2 - o1)) from the SAN"
[ $((c2 - c1)) -ge $((IMG * 9 / 10)) ] || hl_fail "second pass: only $((c2 - c1)) bytes served by the cache"
# A sequential whole-LUN compare (bypasses admission) still reads the right data.
compare_front "sequential compare"

# ---- 2. clean restart keeps the cache
hl_stop "$FRONT_PID"
grep -q "cache ssd: .* reads" "$FRONT_LOG" || hl_fail "no cache summary at shutdown"
hl_front_start "$T/front.conf"
grep -q "cache ssd: .*warm restart" "$FRONT_LOG" || { cat "$FRONT_LOG" >&2; hl_fail "no warm restart"; }
hl_wait_restored "$FRONT_LOG" ssd # (restored in the background)
restored=$(sed -n 's/.*cache ssd: \([0-9]*\) block(s) restored.*/\1/p' "$FRONT_LOG")
[ "${restored:-0}" -ge $((IMG / 65536 * 9 / 10)) ] || { cat "$FRONT_LOG" >&2; hl_fail "only ${restored:-0} blocks restored"; }
chunks read "shuf -i 0-$((NCHUNK - 1))" >"$T/read3.cmds"
io "after a clean restart" "$T/read3.cmds"
c3=$(stat bytes_read_cache)
o3=$(stat bytes_read_origin)
hl_log "after restart ($restored blocks restored): $c3 B from cache, $o3 B from the SAN"
[ "$c3" -ge $((IMG * 9 / 10)) ] || hl_fail "after a clean restart only $c3 bytes came from the cache"
[ "$o3" -le $((IMG / 10)) ] || hl_fail "after a clean restart $o3 bytes were read from the SAN"

# ---- 3. kill -9 right after a write: no stale block
# kill9 LABEL A B: write pattern A at OFF, read it (admitted; the record that
# claims it is flushed within a second), write B, kill -9 at once, restart:
# the range must read back B.
OFF=$((4 * 1024 * 1024))
kill9() {
	qemu-io -f raw -c "write -P $2 $OFF 1M" "$FRONT_URL" >"$T/io.out" 2>&1 || { cat "$T/io.out" >&2; hl_fail "$1: write A"; }
	qemu-io -f raw -c "read -P $2 $OFF 1M" "$FRONT_URL" >"$T/io.out" 2>&1 || { cat "$T/io.out" >&2; hl_fail "$1: read A"; }
	# Fills done, then their records flushed: the device now claims A.
	wait_idle_synced
	local ca
	ca=$(stat bytes_read_cache)
	qemu-io -f raw -c "read -P $2 $OFF 1M" "$FRONT_URL" >"$T/io.out" 2>&1 || { cat "$T/io.out" >&2; hl_fail "$1: read A again"; }
	[ "$(stat bytes_read_cache)" -ge $((ca + 1048576)) ] || hl_fail "$1: A was not served by the cache"
	qemu-io -f raw -c "write -P $3 $OFF 1M" "$FRONT_URL" >"$T/io.out" 2>&1 || { cat "$T/io.out" >&2; hl_fail "$1: write B"; }
	kill -KILL "$FRONT_PID"
	wait "$FRONT_PID" 2>/dev/null
	hl_forget "$FRONT_PID"
	hl_log "$1: front killed (-9) right after writing B"
	hl_front_start "$T/front.conf"
	qemu-io -f raw -c "read -P $3 $OFF 1M" "$FRONT_URL" >"$T/io.out" 2>&1 ||
		{ cat "$T/io.out" >&2; hl_fail "$1: after kill -9 the range does not read back B"; }
	grep -q "Pattern verification failed" "$T/io.out" && { cat "$T/io.out" >&2; hl_fail "$1: stale data after kill -9"; }
}
kill9 "update mode" 0xa1 0xb2
# Invalidate mode: B is never written into the slot, so only the record
# barrier before the origin write keeps A from coming back.
hl_stop "$FRONT_PID"
sed -i 's/^admission = always$/admission = always\nwrite_policy = invalidate/' "$T/front.conf"
hl_front_start "$T/front.conf"
kill9 "invalidate mode" 0xc3 0xb2
# The rest of the image is still right (and still cached: the unclean stop kept the records).
cp "$T/src.img" "$T/src2.img"
python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); f.write(b"\xb2" * (1 << 20))' "$T/src2.img" "$OFF"
qemu-img compare -f raw -F raw "$T/src2.img" "$FRONT_URL" >"$T/q.out" 2>&1 ||
	{ cat "$T/q.out" >&2; hl_fail "after kill -9: the LUN differs"; }
c4=$(stat bytes_read_cache)
hl_log "after kill -9: B reads back; $c4 B served from the cache"
[ "$c4" -ge $((IMG / 2)) ] || hl_fail "after kill -9 the warm cache was lost ($c4 bytes from cache)"
hl_stop "$FRONT_PID"

# ---- 3b. without exclusive = yes an iscsi origin cannot prove itself
# unchanged: the restart drops the disk's blocks (cold, never stale)
sed -i '/^exclusive = yes$/d' "$T/front.conf"
hl_front_start "$T/front.conf"
ws=$(stat warm_start)
hl_log "without exclusive = yes: warm_start: $ws"
[ "$(stat warm_kept)" = 0 ] && [ "$(stat warm_dropped)" -gt 0 ] ||
	hl_fail "an iscsi origin without exclusive = yes restarted warm: $ws"
grep -q "exclusive = yes was removed" <<<"$ws" || hl_fail "warm_start gives no reason: $ws"
hl_stop "$FRONT_PID"
grep -q "disk san: the origin cannot prove itself unchanged" "$FRONT_LOG" ||
	hl_fail "no notice at stop that the next start drops the blocks"
sed -i 's/^cache = ssd$/&\nexclusive = yes/' "$T/front.conf"

# ---- 4. mixed load with verification: 64 in flight, 70% reads / 30% writes on
# a hot set, in update mode and in invalidate mode (writes race fills and hits;
# every read is checked against the last completed write of its block)
BENCH=$HL_BUILDDIR/hotlun-bench
for mode in invalidate update; do
	sed -i '/^write_policy = /d' "$T/front.conf"
	sed -i "s/^admission = always\$/admission = always\nwrite_policy = $mode/" "$T/front.conf"
	hl_front_start "$T/front.conf"
	"$BENCH" --workload hotset:90/10 --range 32M --offset 16M --bs 4K:60,64K:30,8K:10 --read 70 \
		--qd 64 --time 8 --verify --quiet --seed 3 "$FRONT_URL" >"$T/bench.out" 2>&1 ||
		{ tail -20 "$T/bench.out" >&2; hl_fail "$mode mode: hotlun-bench --verify failed"; }
	grep -q "verify_errors=0" "$T/bench.out" || { tail -5 "$T/bench.out" >&2; hl_fail "$mode mode: verify errors"; }
	hl_log "$mode mode: $(tail -1 "$T/bench.out" | grep -o 'iops=[0-9]*') with --verify, $(stat bytes_read_cache) B from cache"
	[ "$(stat bytes_read_cache)" -gt 0 ] || hl_fail "$mode mode: the cache served nothing under the mixed load"
	hl_stop "$FRONT_PID"
done

# ---- 5. another disk behind the same name: no old block
hl_stop "$SAN_PID"
head -c $SIZE /dev/urandom >"$T/other.img"
hl_target_start --disk "$T/other.img"
sed -i "s|^origin = iscsi://.*|origin = iscsi://127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN|" "$T/front.conf"
hl_front_start "$T/front.conf"
grep -q "disk san: origin or quota changed" "$FRONT_LOG" || { cat "$FRONT_LOG" >&2; hl_fail "origin change not noticed"; }
qemu-img compare -f raw -F raw "$T/other.img" "$FRONT_URL" >"$T/q.out" 2>&1 ||
	{ cat "$T/q.out" >&2; hl_fail "another origin: the front served the old disk's blocks"; }
hl_stop "$FRONT_PID"
hl_target_stop

# ---- 6. a cache device that is a disk's origin is refused with a clear error
BAD_PORT=$(hl_free_port)
truncate -s 32M "$T/shared.img"
cat >"$T/bad.conf" <<EOF
[global]
portal = 127.0.0.1:$BAD_PORT
state_dir = $T/bad-state
control_socket = $T/bad-state/ctl.sock

[cache ssd]
device = $T/shared.img
size = 32M

[disk d]
origin = file:$T/shared.img
cache = ssd

[target $FRONT_IQN]
lun.0 = d
allow = ALL
EOF
if timeout 20 "$HL_HOTLUND" --config "$T/bad.conf" >"$T/bad.log" 2>&1; then
	hl_fail "hotlund started with its cache device on a disk's origin"
fi
grep -q "cache ssd: device .* is disk d's origin" "$T/bad.log" || { cat "$T/bad.log" >&2; hl_fail "no clear error for a cache device shared with an origin"; }
hl_log "PASS"
