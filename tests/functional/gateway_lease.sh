#!/bin/bash
# gateway_lease.sh - two hotlund gateways on one rbd image (a throw-away
# single-node Ceph) with different leases (docs/gateways.md, "same timers
# everywhere"): gateway 1 gateway_lease_ms 4000, gateway 2 1000. A taker
# waits the longer of its lease and the owner's (rbd's record carries it),
# so the implicit transition time REPORT TARGET PORT GROUPS reports follows
# the longest lease among the gateway and the peers it has seen own the disk:
#  0. gateway 2 starts alone and owns the image: it reports 5 s (its own
#     lease: dead 2000 + a look 250 + lease 1000 + margin 500, rounded up,
#     + 1 s); gateway 1 starts as its standby and reports 11 s (4500 + 250 +
#     4000 + 500, rounded up, + 1 s); gateway 2 has not seen gateway 1's
#     lease (it never owned the disk): still 5 s;
#  1. gateway 2 hands the image over: gateway 1 owns it, and gateway 2, now
#     its standby, has read gateway 1's lease in the record: 11 s, read
#     through gateway 2's own path (RTPG, extended header), and logged.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need rbd ceph ceph-mon ceph-osd
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
CTL=$HL_BUILDDIR/hotlunctl
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
[ -x "$TOOL" ] || hl_error "hl_scsi_tool not built (make check builds it)"

T=$(hl_tmpdir)
hl_ceph_up "$T/ceph" origin:64M

IQN=$HL_IQN_PREFIX:gw-lease
GW_ORIGIN=rbd:rbd/origin
GW_DISK_EXTRA="rbd_conf = $cluster/ceph.conf\nshadow_rate = 0"
. "$HL_SRCDIR/tests/functional/gateway_lib.sh"
gw_setup
sed -i "s|^gateways = 1,2$|&\ngateway_lease_ms = 4000\ngateway_dead_ms = 4500|" "$T/gw1/hotlund.conf"
sed -i "s|^gateways = 1,2$|&\ngateway_lease_ms = 1000\ngateway_dead_ms = 2000|" "$T/gw2/hotlund.conf"
grep -q "^gateway_lease_ms = 4000$" "$T/gw1/hotlund.conf" || hl_error "could not set gateway 1's lease"

# transition G: the implicit transition time gateway G reports (RTPG through its own portal)
transition() {
	local out
	out=$("$TOOL" pr "$(url "$1")" "$1" rtpg 2>&1)
	sed -n 's/^format 1 transition \([0-9]*\) .*/\1/p' <<<"$out" | grep . || echo "? ($out)"
}

# ---- 0. gateway 2 owns, gateway 1 its standby
start_gw 2
wait_owner 2 20
t2=$(transition 2)
[ "$t2" = 5 ] || hl_fail "gateway 2 (lease 1000 ms, alone) reports $t2 s, not 5"
start_gw 1
for i in $(seq 1 50); do [ "$(own 1 state)" = standby ] && [ "$(own 1 owner)" = 2 ] && break; sleep 0.1; done
[ "$(own 1 state)" = standby ] || hl_fail "gateway 1 is not a standby of gateway 2: $(own 1 state)"
t1=$(transition 1)
[ "$t1" = 11 ] || hl_fail "gateway 1 (lease 4000 ms) reports $t1 s, not 11"
t2=$(transition 2)
[ "$t2" = 5 ] || hl_fail "gateway 2 reports $t2 s before it saw gateway 1 own the disk, not 5"
hl_log "0: gateway 2 (lease 1000 ms) owns and reports $t2 s; gateway 1 (lease 4000 ms) standby, $t1 s"

# ---- 1. handed over: gateway 2 is the standby of a gateway with the longer lease
"$CTL" --socket "${SOCK[2]}" handover /disks/san >"$T/ho.out" 2>&1 || hl_fail "handover: $(cat "$T/ho.out")"
wait_owner 1 20
for i in $(seq 1 50); do [ "$(transition 2)" = 11 ] && break; sleep 0.1; done
t2=$(transition 2)
[ "$t2" = 11 ] || hl_fail "gateway 2, standby of gateway 1 (lease 4000 ms), reports $t2 s, not 11"
grep -q "implicit transition time 11 s" "$LOG2" ||
	hl_fail "gateway 2 did not log its new transition time: $(grep -i transition "$LOG2" | tail -3)"
[ "$(transition 1)" = 11 ] || hl_fail "gateway 1 (owner) reports $(transition 1) s, not 11"
hl_log "1: after the handover gateway 2 (standby) reports $t2 s, as gateway 1"
exit 0
