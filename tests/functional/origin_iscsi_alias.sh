#!/bin/bash
# origin_iscsi_alias.sh - one SAN LUN under two spellings of its iscsi://
# URL, one disk cached and the other writable (ARCHITECTURE invariant 1): a
# write through the other disk never drops the cached disk's blocks, so the
# cached disk would serve the old bytes. The SAN is a first hotlund with two
# portals (hl_target_start --portal2). Each case, if the front took it,
# reads block 0 through the cached disk (a fill), writes it through the
# other and reads it through the cached disk again: on main the URL text
# differed, the front started, and the second read returned the old zeroes.
#  1. the same portal, target and LUN with query options (?qd=64&timeout=30)
#     and another case of the scheme: refused at start, by the normalised
#     URL (no login needed to see it);
#  2. the same LUN through the SAN's second portal (no text rule can tell):
#     refused at open by the LUN's VPD 83h designator;
#  3. the front started with the cached disk alone, the alias added live
#     (hotlunctl /disks create) through the second portal: refused, the
#     cached disk still served.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-io

T=$(hl_tmpdir)
hl_target_start --size 64M --portal2
SAN_PID=$HL_PID SAN_IQN=$HL_IQN SAN_LUN=$HL_LUN
SAN1=iscsi://127.0.0.1:$HL_PORT/$SAN_IQN/$SAN_LUN
SAN2=iscsi://127.0.0.1:$HL_PORT2/$SAN_IQN/$SAN_LUN
N=0

# conf ALIAS_ORIGIN: a front config of disk san (cached, on SAN1) and, when
# ALIAS_ORIGIN is set, disk alias on it as LUN 1
conf() {
	N=$((N + 1))
	PORT=$(hl_free_port)
	ST=$T/state$N
	IQN=$HL_IQN_PREFIX:iscsi-alias$N
	mkdir -p "$ST"
	truncate -s 16M "$T/cache$N.img"
	hl_cache_front_conf "$T/front$N.conf" "$PORT" "$ST" "$IQN" "$SAN1" \
		device="$T/cache$N.img" size=16M block_size=64K admission=always
	[ -n "$1" ] || return 0
	sed -i "s|^\[target |[disk alias]\norigin = $1\n\n&|" "$T/front$N.conf"
	sed -i "s|^lun.0 = san$|&\nlun.1 = alias|" "$T/front$N.conf"
}

# stale_check: the read-write-read above on the running front; fails either way
stale_check() {
	local cached=iscsi://127.0.0.1:$PORT/$IQN/0 other=iscsi://127.0.0.1:$PORT/$IQN/1
	qemu-io -f raw -c "read 0 64k" "$cached" >"$T/q.out" 2>&1 || hl_fail "read: $(cat "$T/q.out")"
	hl_cache_settle "$ST/ctl.sock" ssd
	qemu-io -f raw -c "write -P 0x5a 0 64k" "$other" >"$T/q.out" 2>&1 ||
		hl_fail "write through the alias: $(cat "$T/q.out")"
	qemu-io -f raw -c "read -P 0x5a 0 64k" "$cached" >"$T/q.out" 2>&1 ||
		hl_fail "stale read: the cached disk did not return what its alias wrote: $(head -3 "$T/q.out")"
	grep -q "Pattern verification failed" "$T/q.out" &&
		hl_fail "stale read: the cached disk did not return what its alias wrote"
	hl_fail "the front took two disks on one SAN LUN, one cached (no stale read this time)"
}

# refused_at_start CONF PATTERN: the front exits at start with PATTERN in its output
refused_at_start() {
	local log=$T/refused$N.log
	if timeout 30 "$HL_HOTLUND" --config "$1" >"$log" 2>&1; then
		hl_fail "hotlund ran and exited 0 with $1"
	fi
	if ! grep -q "$2" "$log"; then
		cat "$log" >&2
		# it did not refuse for that reason: show what that costs
		hl_front_start "$1"
		stale_check
	fi
}

# ---- 1. options and the scheme's case: the normalised URL
conf "ISCSI://127.0.0.1:$HL_PORT/$SAN_IQN/$SAN_LUN?qd=64\&timeout=30"
refused_at_start "$T/front$N.conf" "disk alias: origin .* is also disk san's origin"
hl_log "1: the same LUN with query options: refused at start"

# ---- 2. the SAN's second portal: the LUN's own designator
conf "$SAN2"
refused_at_start "$T/front$N.conf" "disk alias: origin .* is disk san's origin under another name"
grep -h "is disk san's origin under another name" "$T/refused$N.log" | head -1 >&2
hl_log "2: the same LUN through a second portal: refused at open"

# ---- 3. added live through the second portal
conf ""
hl_front_start "$T/front$N.conf"
out=$("$HL_BUILDDIR/hotlunctl" --socket "$ST/ctl.sock" /disks create alias origin="$SAN2" 2>&1)
rc=$?
if [ $rc = 0 ]; then
	"$HL_BUILDDIR/hotlunctl" --socket "$ST/ctl.sock" "/iscsi/$IQN/tpg1/luns" create /disks/alias lun=1 \
		>"$T/ctl.out" 2>&1 || hl_fail "adding LUN 1: $(cat "$T/ctl.out")"
	stale_check
fi
echo "$out" | grep -q "is disk san's origin under another name" || hl_fail "refused, but not for the alias: $out"
qemu-io -f raw -c "read 0 64k" "iscsi://127.0.0.1:$PORT/$IQN/0" >"$T/q.out" 2>&1 ||
	hl_fail "disk san after the refused change: $(cat "$T/q.out")"
hl_check_alive "$FRONT_PID"
hl_log "3: added live: refused ($out); disk san still served"
hl_stop "$FRONT_PID"
hl_stop "$SAN_PID"
exit 0
