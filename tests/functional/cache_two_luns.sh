#!/bin/bash
# cache_two_luns.sh - two disks share one cache and its RAM window
# (docs/cache-policy.md, rule 5 and "Several LUNs"), through the real
# daemon: a front hotlund with two file disks ("a", LUN 0, and "b", LUN 1)
# on one cache of 256 SSD slots of 64 KiB and a window of as many.
#  1. a read of disk a promotes a window block of disk b: a fills the SSD;
#     b reads a hot set H (into the window); a pushes H out of the window
#     (into its ghost); b reads H again (it returns); a pushes it out again,
#     and its reads promote H to the SSD. b's next read of those is served
#     by the cache (32 of 32; at least 3/4 required). H's blocks sit in
#     pairs in the window's CLOCK: while a one-block read could plan only
#     one promotion the second of each pair was dropped (16 of 32, which
#     fails here); before the cross-LUN fix a promotion planned by another
#     disk's read was always dropped: 0, and b read all of H from its
#     origin again;
#  2. never stale with both disks under load: hotlun-bench --verify on
#     both LUNs at once (70% reads on a hot set, 64 KiB and 4 KiB), so that
#     each disk's reads promote the other's blocks while its writes race
#     them: 0 verify errors on either.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-io
qemu-io --help 2>/dev/null | grep -q . || hl_missing "qemu-io does not run"

T=$(hl_tmpdir)
PORT=$(hl_free_port)
ST=$T/state
mkdir -p "$ST"
IQN=$HL_IQN_PREFIX:two-luns
hl_make_disk "$T/a.img" 256M
hl_make_disk "$T/b.img" 96M
truncate -s 32M "$T/cache.img"
hl_cache_front_conf "$T/hotlund.conf" "$PORT" "$ST" "$IQN" "file:$T/a.img" \
	device="$T/cache.img" size=16M block_size=64K admission=frequency
# disk "san" is a; disk b beside it on the same cache, LUN 1
sed -i "s|^\[target |[disk b]\norigin = file:$T/b.img\ncache = ssd\n\n&|" "$T/hotlund.conf"
sed -i "s|^lun.0 = san$|&\nlun.1 = b|" "$T/hotlund.conf"
hl_front_start "$T/hotlund.conf"
URL_A=iscsi://127.0.0.1:$PORT/$IQN/0
URL_B=iscsi://127.0.0.1:$PORT/$IQN/1
stat() { hl_cache_stat "$ST/ctl.sock" ssd "$1" "$2"; }
NSLOTS=$(stat nslots "")
WIN=$(stat window_slots "")
[ "$WIN" -gt 0 ] || hl_fail "no RAM window (window_slots $WIN)"

# reads DISK_URL FIRST COUNT: one qemu-io session reading 64 KiB blocks
# FIRST, FIRST+3, ... (never contiguous: no sequential bypass)
reads() {
	local args=() i
	for ((i = 0; i < $3; i++)); do
		args+=(-c "read $((($2 + 3 * i) * 65536)) 65536")
	done
	qemu-io -f raw "${args[@]}" "$1" >"$T/qemu-io.out" 2>&1 ||
		hl_fail "qemu-io reads of $1 failed: $(tail -3 "$T/qemu-io.out")"
}
# settle: the fills and promotions that follow the replies are done
settle() { hl_cache_idle "$ST/ctl.sock" ssd 5 || hl_fail "the cache still has requests in flight"; }

# ---- 1. a promotes b's returning blocks
H=32
reads "$URL_A" 0 $((NSLOTS + 16)) # a fills the SSD
settle
reads "$URL_B" 1 $H # H: b's blocks 1, 4, ... into the window
settle
next=$((3 * (NSLOTS + 16)))
reads "$URL_A" $next $((WIN + H)) # out of the window, into its ghost
next=$((next + 3 * (WIN + H)))
settle
reads "$URL_B" 1 $H # back: they return to the window
settle
p0=$(stat promotions b)
reads "$URL_A" $next $((WIN + H)) # pushed out again: promoted by a's reads
settle
p1=$(stat promotions b)
c0=$(stat bytes_read_cache b)
o0=$(stat bytes_read_origin b)
reads "$URL_B" 1 $H
settle
c1=$(stat bytes_read_cache b)
o1=$(stat bytes_read_origin b)
hl_log "1: disk b: $((p1 - p0)) of its $H returning blocks promoted by disk a's reads; reading them again: $(((c1 - c0) / 65536)) from the cache, $(((o1 - o0) / 65536)) from the origin (cache: $NSLOTS slots, window $WIN)"
[ $((p1 - p0)) -ge $((H * 3 / 4)) ] || hl_fail "only $((p1 - p0)) of disk b's $H blocks were promoted"
[ $((c1 - c0)) -ge $((H * 3 / 4 * 65536)) ] ||
	hl_fail "disk b read only $(((c1 - c0) / 65536)) of its $H promoted blocks from the cache"

# ---- 2. never stale: both disks under verified load at once
"$BENCH" --workload hotset:90/10 --range 48M --bs 64K:60,4K:40 --read 70 --qd 32 --time 8 \
	--verify --quiet --seed 5 "$URL_A" >"$T/bench-a.out" 2>&1 &
ba=$!
"$BENCH" --workload hotset:90/10 --range 48M --bs 64K:60,4K:40 --read 70 --qd 32 --time 8 \
	--verify --quiet --seed 6 "$URL_B" >"$T/bench-b.out" 2>&1 &
bb=$!
wait $ba || { tail -5 "$T/bench-a.out" >&2; hl_fail "hotlun-bench --verify on disk a failed"; }
wait $bb || { tail -5 "$T/bench-b.out" >&2; hl_fail "hotlun-bench --verify on disk b failed"; }
for d in a b; do
	grep -q "verify_errors=0" "$T/bench-$d.out" ||
		{ tail -5 "$T/bench-$d.out" >&2; hl_fail "disk $d: verify errors"; }
done
settle
hl_log "2: verified load on both disks: 0 errors; promotions a $(stat promotions san), b $(stat promotions b), cache $(stat promotions "")"
exit 0
