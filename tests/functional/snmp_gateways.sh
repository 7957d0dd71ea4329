#!/bin/bash
# snmp_gateways.sh - hlDiskTable's ownership columns and hlDiskAluaStateChanged
# for a disk shared by two gateways (docs/gateways.md), read through a real
# snmpd and received by a real snmptrapd.
#
# A third hotlund plays the SAN; gateways 1 and 2 serve its LUN as disk
# "san" (iscsi:// origin, the same serial and naa). hotlun-snmp watches
# gateway 1: it must read activeOptimized(0), owner 1, and the control
# socket's epoch; gateway 2's control socket must say standby at the same
# time. Then `hotlunctl handover /disks/san` on gateway 1: gateway 2 takes
# the disk, and gateway 1's row must read standby(2), owner 2, a newer
# epoch and one more move, and hlDiskAluaStateChanged must arrive with the
# disk's name and standby(2).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/snmp_lib.sh"
hl_cache_front_prereqs
hl_need snmptrapd

# ---- the SAN and two gateways
HL_IQN=$HL_IQN_PREFIX:snmp-gw-backend hl_target_start --size 32M
SAN_PID=$HL_PID
SAN_URL=$HL_URL
IQN=$HL_IQN_PREFIX:snmp-gw
declare -A PORT SOCK
PORT[1]=$(hl_free_port)
PORT[2]=$(hl_free_port)
while [ "${PORT[2]}" = "${PORT[1]}" ]; do PORT[2]=$(hl_free_port); done
for g in 1 2; do
	st=$T/gw$g
	mkdir -p "$st"
	truncate -s 32M "$st/cache.img"
	hl_cache_front_conf "$st/hotlund.conf" "${PORT[$g]}" "$st" "$IQN" "$SAN_URL" \
		device="$st/cache.img" size=32M block_size=64K
	sed -i "s|^cache = ssd$|&\nserial = snmpgw0001\nnaa = 6001405aa00000000000000000005e1f|" "$st/hotlund.conf"
	sed -i "s|^threads = 2$|&\ngateway = $g\ngateways = 1,2|" "$st/hotlund.conf"
	SOCK[$g]=$st/ctl.sock
done
# the subagent (snmp_lib.sh) reads $T/ctl.sock: gateway 1's
sed -i "s|^control_socket = .*|control_socket = $T/ctl.sock|" "$T/gw1/hotlund.conf"
SOCK[1]=$T/ctl.sock

# own G KEY: a field of gateway G's view of disk san's ownership
own() {
	"$HL_CTL" --socket "${SOCK[$1]}" stats --json 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["disks"]["san"]["ownership"][sys.argv[1]])' "$2" 2>/dev/null ||
		echo "?"
}
owns() { [ "$(own "$1" state)" = owner ] && [ "$(own "$1" alua)" = active/optimized ]; }

hl_start_hotlund "$T/gw1/hotlund.conf"
GW1_PID=$HL_PID
wait_for "gateway 1 owns san" owns 1
hl_start_hotlund "$T/gw2/hotlund.conf"
GW2_PID=$HL_PID
wait_for "gateway 2 a standby of gateway 1" eval '[ "$(own 2 alua)" = standby ] && [ "$(own 2 owner)" = 1 ]'

# ---- snmptrapd, snmpd sending to it, the subagent on gateway 1
TRAP_PORT=$(udp_free_port) || hl_error "no free UDP port"
echo "disableAuthorization yes" >"$T/snmptrapd.conf"
hl_spawn snmptrapd "$T/traps.log" env MIBS= snmptrapd -f -Lo -C -c "$T/snmptrapd.conf" -On \
	-p "$T/snmptrapd.pid" "udp:127.0.0.1:$TRAP_PORT"
TRAPD_PID=$HL_LAST_PID
SNMPD_EXTRA="trap2sink 127.0.0.1:$TRAP_PORT public"
start_snmpd
start_subagent
sleep 1 # let snmptrapd bind before anything is sent

D=$(disk_index san)
[ -n "$D" ] || hl_fail "san missing from hlDiskTable"
wait_for "hlDiskAluaState activeOptimized(0) on the owner" sis hlDiskAluaState "$D" 0
[ "$(sget hlDiskOwnerGateway "$D")" = 1 ] || hl_fail "hlDiskOwnerGateway on the owner: $(sget hlDiskOwnerGateway "$D")"
EPOCH1=$(wait_equal "epoch" hlDiskOwnerEpoch "$D" "s['disks']['san']['ownership']['epoch']")
[ "$EPOCH1" -ge 1 ] || hl_fail "hlDiskOwnerEpoch is $EPOCH1 on the owner"
MOVES1=$(wait_equal "moves" hlDiskOwnerMoves "$D" "s['disks']['san']['ownership']['transitions']")
wait_equal "takeovers" hlDiskTakeovers "$D" "s['disks']['san']['ownership']['takeovers']" >/dev/null
[ "$(own 2 alua)" = standby ] || hl_fail "gateway 2 is no longer a standby: $(own 2 alua)"
hl_log "ok: gateway 1 activeOptimized(0), owner 1, epoch $EPOCH1, moves $MOVES1; gateway 2 standby"

CHANGED=$(oid hlDiskAluaStateChanged)
trap_seen() {
	grep -Eq -- "${CHANGED//./\\.}([[:space:]]|\$)" "$T/traps.log"
}
trap_seen && hl_fail "hlDiskAluaStateChanged before any move"

# ---- a planned handover: gateway 2 owns the disk, gateway 1 is its standby
out=$("$HL_CTL" --socket "${SOCK[1]}" handover /disks/san 2>&1) || hl_fail "handover failed: $out"
wait_for "gateway 2 owns san" owns 2
wait_for "hlDiskAluaState standby(2) on gateway 1" sis hlDiskAluaState "$D" 2
wait_for "hlDiskOwnerGateway 2" sis hlDiskOwnerGateway "$D" 2
EPOCH2=$(wait_equal "epoch after the handover" hlDiskOwnerEpoch "$D" "s['disks']['san']['ownership']['epoch']")
[ "$EPOCH2" -gt "$EPOCH1" ] || hl_fail "hlDiskOwnerEpoch did not grow across the handover: $EPOCH1 -> $EPOCH2"
MOVES2=$(wait_equal "moves after the handover" hlDiskOwnerMoves "$D" "s['disks']['san']['ownership']['transitions']")
[ "$MOVES2" -gt "$MOVES1" ] || hl_fail "hlDiskOwnerMoves did not grow: $MOVES1 -> $MOVES2"
wait_for "hlDiskAluaStateChanged at snmptrapd" trap_seen
# the last notification carries the new state (an earlier one may show transitioning(15))
LINE=$(grep -E -- "${CHANGED//./\\.}([[:space:]]|\$)" "$T/traps.log" | tail -n 1)
for want in "$(oid hlDiskName).$D = STRING: \"san\"" "$(oid hlDiskAluaState).$D = INTEGER: 2"; do
	case $LINE in
	*"$want"*) ;;
	*) hl_fail "hlDiskAluaStateChanged without '$want': $LINE" ;;
	esac
done
# the owner as gateway 1 saw it then: 2, or 0 when it polled between its
# release and its first look at the new owner
case $LINE in
*"$(oid hlDiskOwnerGateway).$D = Gauge32: "[02]*) ;;
*) hl_fail "hlDiskAluaStateChanged: hlDiskOwnerGateway not 2 (or 0): $LINE" ;;
esac
hl_log "ok: handover: gateway 1 standby(2), owner 2, epoch $EPOCH2, moves $MOVES2; hlDiskAluaStateChanged received ($(grep -cE -- "${CHANGED//./\\.}([[:space:]]|\$)" "$T/traps.log") of them)"

# ---- the warm standby: a SAN origin cannot say what the owner changed, so gateway 1, now a
# standby, stays cold and says so; its shadow columns read 0
stats
[ "$(ctl "s['disks']['san']['shadow']['supported']")" = False ] ||
	hl_fail "a SAN origin claims a warm standby: $(ctl "s['disks']['san']['shadow']")"
ctl "s['disks']['san']['shadow']['state']" | grep -q "^cold: the origin cannot prove what changed" ||
	hl_fail "the SAN standby does not say it stays cold: $(ctl "s['disks']['san']['shadow']")"
"$HL_CTL" --socket "${SOCK[1]}" stats | grep -q "shadow:.*cold: the origin cannot prove" ||
	hl_fail "hotlunctl stats does not show the cold standby"
for o in hlDiskShadowHotBlocks hlDiskShadowed hlDiskShadowBehind hlDiskShadowOriginReads \
	hlDiskShadowOriginBytes; do
	[ "$(sget "$o" "$D")" = 0 ] || hl_fail "$o on a SAN standby: $(sget "$o" "$D")"
done
hl_log "ok: SAN standby stays cold: $(ctl "s['disks']['san']['shadow']['state']")"

hl_stop "$SUB_PID"
hl_stop "$SNMPD_PID"
hl_stop "$TRAPD_PID"
hl_stop "$GW1_PID"
hl_stop "$GW2_PID"
hl_stop "$SAN_PID"
hl_log "PASS"
