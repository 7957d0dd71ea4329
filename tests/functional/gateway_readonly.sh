#!/bin/bash
# gateway_readonly.sh - a read-only disk shared by two gateways (issue 24
# item 13; docs/gateways.md, "Read-only disks"). read_only = yes says this
# gateway does not write the LUN, not that nobody does: a gateway that
# served it active/optimized on every path would serve its cached blocks
# after another initiator (or a gateway with the disk writable) changed the
# LUN. So a read-only SAN LUN takes part in ownership like a writable one:
# one gateway owns it (active/optimized), the other is a standby (NOT READY,
# 04h/0Bh); a planned handover moves it. Only an origin that cannot change
# (an rbd snapshot, rbd:POOL/IMAGE@SNAP) is served by every gateway (see
# tests/unit/origin/rbd_own_ut.c).
. "$(dirname "$0")/lib.sh"
hl_need iscsi-inq python3
[ "$HL_TARGET" = tgt ] && hl_skip "the gateways under test are hotlund; nothing to run against tgt"
CTL=$HL_BUILDDIR/hotlunctl

T=$(hl_tmpdir)
HL_IQN=$HL_IQN_PREFIX:gwro-san hl_target_start --size 16M
SAN_URL=$HL_URL
IQN=$HL_IQN_PREFIX:gwro
declare -A PORT SOCK PID
for g in 1 2; do
	hl_gw_global $g info
	cat >>"$T/gw$g/hotlund.conf" <<CONF
[disk ro]
origin = $SAN_URL
read_only = yes
serial = gwro0001
naa = 6001405aa000000000000000000c0c0b

[target $IQN]
lun.0 = ro
allow = ALL
CONF
done
url() { echo "iscsi://127.0.0.1:${PORT[$1]}/$IQN/0"; }
own() {
	local out
	out=$("$CTL" --socket "${SOCK[$1]}" stats --json 2>/dev/null) || { echo "?"; return; }
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])["disks"]["ro"].get("ownership", {}).get(sys.argv[2], "none"))' \
		"$out" "$2" 2>/dev/null || echo "?"
}
wait_state() { # G STATE SECONDS
	local i
	for i in $(seq 1 $(($3 * 10))); do
		[ "$(own "$1" state)" = "$2" ] && return 0
		sleep 0.1
	done
	hl_fail "gateway $1 is not $2 after $3 s: $(own "$1" state) ($(own "$1" last))"
}

hl_start_hotlund "$T/gw1/hotlund.conf"
PID[1]=$HL_PID
wait_state 1 owner 10
hl_start_hotlund "$T/gw2/hotlund.conf"
PID[2]=$HL_PID
sleep 1
[ "$(own 2 state)" = standby ] && [ "$(own 2 owner)" = 1 ] ||
	hl_fail "a read-only shared disk: gateway 2 is '$(own 2 state)' (owner '$(own 2 owner)'), not a standby of gateway 1"
out=$(iscsi-inq -e 1 -c 128 "$(url 2)" 2>&1) && hl_fail "the standby of a read-only disk answered TEST UNIT READY: $out"
grep -q "NOT READY.*0x040b" <<<"$out" || hl_fail "the standby did not answer 04h/0Bh: $out"
iscsi-inq -e 1 -c 128 "$(url 1)" >/dev/null 2>&1 || hl_fail "the owner of the read-only disk does not answer"
hl_log "gateway 1 owns the read-only disk, gateway 2 is a standby ($out)"

# a planned handover moves it like any shared disk
"$CTL" --socket "${SOCK[1]}" handover /disks/ro >"$T/ho.out" 2>&1 || hl_fail "handover: $(cat "$T/ho.out")"
wait_state 2 owner 10
[ "$(own 1 state)" = standby ] || hl_fail "gateway 1 is $(own 1 state) after handing the disk over"
iscsi-inq -e 1 -c 128 "$(url 2)" >/dev/null 2>&1 || hl_fail "the new owner of the read-only disk does not answer"
hl_log "handed over: gateway 2 owns it"
for g in 1 2; do hl_stop "${PID[$g]}"; done
exit 0
