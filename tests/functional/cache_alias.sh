#!/bin/bash
# cache_alias.sh - two disks on one origin file, one of them cached
# (ARCHITECTURE invariant 1): the cache keys blocks by the disk, so a write
# through the other disk never reaches it and the cached disk would serve
# the old bytes. hotlund refuses such a configuration at start and on a
# live change (docs/cache-engine.md, "Disk names, LUN ids and origin
# identity"). Each case below, if hotlund took it, reads block 0 through
# the cached disk (a fill), writes it through the other, and reads it
# through the cached disk again: before the check, case 1 read back the
# zeroes of the first read instead of the 0xab written (1 stale block).
#  1. disk "san" cached, disk "alias" uncached, both on a.img: refused at start;
#  2. the same through a symbolic link to a.img: refused at start;
#  3. a front started with "san" alone, "alias" added live (hotlunctl
#     /disks create alias origin=file:a.img): refused, "san" still served;
#  4. the alias read-only: allowed (it cannot write), and served.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-io

T=$(hl_tmpdir)
hl_make_disk "$T/a.img" 64M
ln -s "$T/a.img" "$T/link.img"
N=0

# conf ALIAS_ORIGIN: a front config of disk san (cached) and, when
# ALIAS_ORIGIN is set, disk alias on it as LUN 1
conf() {
	N=$((N + 1))
	PORT=$(hl_free_port)
	ST=$T/state$N
	IQN=$HL_IQN_PREFIX:alias$N
	mkdir -p "$ST"
	truncate -s 16M "$T/cache$N.img"
	hl_cache_front_conf "$T/hotlund$N.conf" "$PORT" "$ST" "$IQN" "file:$T/a.img" \
		device="$T/cache$N.img" size=16M block_size=64K admission=always
	[ -n "$1" ] || return 0
	sed -i "s|^\[target |[disk alias]\norigin = $1\n\n&|" "$T/hotlund$N.conf"
	sed -i "s|^lun.0 = san$|&\nlun.1 = alias|" "$T/hotlund$N.conf"
}

# stale_check: the read-write-read above on the running front; fails on a stale read
stale_check() {
	local cached=iscsi://127.0.0.1:$PORT/$IQN/0 other=iscsi://127.0.0.1:$PORT/$IQN/1
	qemu-io -f raw -c "read 0 64k" "$cached" >"$T/q.out" 2>&1 || hl_fail "read: $(cat "$T/q.out")"
	hl_cache_settle "$ST/ctl.sock" ssd
	qemu-io -f raw -c "write -P 0xab 0 64k" "$other" >"$T/q.out" 2>&1 ||
		hl_fail "write through the alias: $(cat "$T/q.out")"
	qemu-io -f raw -c "read -P 0xab 0 64k" "$cached" >"$T/q.out" 2>&1 ||
		hl_fail "stale read: the cached disk did not return what its alias wrote: $(head -3 "$T/q.out")"
	hl_fail "hotlund took two disks on one origin, one cached (no stale read this time)"
}

# refused_at_start CONF: hotlund exits at start, naming both disks
refused_at_start() {
	local log=$T/refused$N.log
	if timeout 20 "$HL_HOTLUND" --config "$1" >"$log" 2>&1; then
		hl_fail "hotlund ran and exited 0 with $1"
	fi
	if ! grep -q "disk alias: origin .* is also disk san's origin" "$log" &&
		! grep -q "disk san: origin .* is also disk alias's origin" "$log"; then
		# it did not refuse: show what that costs
		hl_front_start "$1"
		stale_check
	fi
}

# ---- 1. the same path
conf "file:$T/a.img"
refused_at_start "$T/hotlund$N.conf"
hl_log "1: two disks on one file, one cached: refused at start"

# ---- 2. a symbolic link to it
conf "$T/link.img"
refused_at_start "$T/hotlund$N.conf"
hl_log "2: the same through a symbolic link: refused at start"

# ---- 3. added live
conf ""
hl_front_start "$T/hotlund$N.conf"
out=$("$HL_BUILDDIR/hotlunctl" --socket "$ST/ctl.sock" /disks create alias origin="file:$T/a.img" 2>&1)
rc=$?
if [ $rc = 0 ]; then
	"$HL_BUILDDIR/hotlunctl" --socket "$ST/ctl.sock" "/iscsi/$IQN/tpg1/luns" create /disks/alias lun=1 \
		>"$T/ctl.out" 2>&1 || hl_fail "adding LUN 1: $(cat "$T/ctl.out")"
	stale_check
fi
echo "$out" | grep -q "is also disk san's origin" || hl_fail "refused, but not for the alias: $out"
qemu-io -f raw -c "read 0 64k" "iscsi://127.0.0.1:$PORT/$IQN/0" >"$T/q.out" 2>&1 ||
	hl_fail "disk san after the refused change: $(cat "$T/q.out")"
hl_log "3: added live: refused ($out); disk san still served"

# ---- 4. a read-only alias
hl_stop "$FRONT_PID" # (it holds a.img's lock)
conf "file:$T/a.img"
sed -i "/^\[disk alias\]/a read_only = yes" "$T/hotlund$N.conf"
hl_front_start "$T/hotlund$N.conf"
qemu-io -r -f raw -c "read 0 64k" "iscsi://127.0.0.1:$PORT/$IQN/1" >"$T/q.out" 2>&1 ||
	hl_fail "the read-only alias: $(cat "$T/q.out")"
hl_log "4: a read-only alias of the cached disk: started and served"
exit 0
