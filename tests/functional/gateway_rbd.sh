#!/bin/bash
# gateway_rbd.sh - two hotlund gateways serve one rbd image under ALUA
# (issue 17; docs/gateways.md), on a throw-away single-node Ceph:
#  0. both gateways show one LU (same NAA); one owns it (active/optimized),
#     the other is standby; REPORT TARGET PORT GROUPS lists both groups;
#     a standby answers media commands with NOT READY 04h/0Bh;
#  1. kill: hotlun-bench --verify through both paths while the owner is
#     killed (SIGKILL): the standby takes over (the old owner's lock broken
#     and blocklisted); 0 errors, 0 verify mismatches;
#  2. planned: the new owner is stopped (SIGTERM) under the same load: it
#     hands the image to the peer first; 0 errors, 0 mismatches, and the
#     longest I/O is short;
#  3. split brain: the owner is frozen (SIGSTOP) under load; the peer takes
#     over; data written through the new owner; the frozen gateway is
#     thawed and read at once through its own path: never the old data;
#     it ends up a standby by itself;
#  4. failback: the gateway that owned the image before gets it back by a
#     planned handover after 1% of the image was rewritten through the
#     peer: it keeps its cached blocks but drops exactly those (0 stale
#     blocks over the whole LUN).
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-img qemu-io iscsi-inq bc rbd ceph ceph-mon ceph-osd
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"
CTL=$HL_BUILDDIR/hotlunctl

T=$(hl_tmpdir)
hl_ceph_up "$T/ceph" origin:64M

IQN=$HL_IQN_PREFIX:gw-rbd
GW_ORIGIN=rbd:rbd/origin
# scenario 3: the frozen owner's MONOTONIC and BOOTTIME stand still, REALTIME is stepped (a synced VM)
GW_FREEZE_CLOCKS=all
# shadow_rate = 0: scenario 4 checks the failback's own diff (exactly the ten writes since the
# released gateway's mark); a warm standby would move that gateway's proof onto the new
# owner's marks meanwhile (gateway_shadow.sh tests that)
GW_DISK_EXTRA="rbd_conf = $cluster/ceph.conf\nshadow_rate = 0"
. "$HL_SRCDIR/tests/functional/gateway_lib.sh"
gw_setup
gw_scenarios
ws=$GW_WARM
kept=$(sed -n 's/^kept \([0-9]*\), dropped \([0-9]*\).*/\1/p' <<<"$ws")
dropped=$(sed -n 's/^kept \([0-9]*\), dropped \([0-9]*\).*/\2/p' <<<"$ws")
[ -n "$kept" ] && [ "$kept" -ge 700 ] || hl_fail "failback kept too little: $ws"
# the ten writes, found exactly (partly rewritten blocks lose only the sectors written)
grep -q "10 extent(s)" <<<"$ws" || hl_fail "failback did not find exactly the ten writes: $ws"
[ -n "$dropped" ] && [ "$dropped" -le 80 ] || hl_fail "failback dropped too much: $ws"
gw_no_stale
exit 0
