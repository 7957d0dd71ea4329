#!/bin/bash
# snmp_traps.sh - hotlun-snmp's notifications (origin loss and recovery, cache
# device failure), received for real by a private snmptrapd.
#
# A SAN hotlund serves a LUN; a front hotlund exports it as disk e0 through
# the iscsi origin (retry limit 2 s). A private snmpd sends notifications
# to a private snmptrapd. The SAN is frozen (SIGSTOP): reads through the
# front fail, e0's error counter grows, and hlOriginLoss must arrive with
# e0's name, origin and state, and hlDiskOriginState must say
# failing(2). The SAN resumes: after 10 s without errors hlOriginRecovered
# must arrive and the state return to ok(1).
#
# The front also has a cache c0 whose device lives on a 6 MiB tmpfs (when
# the test may mount one, i.e. runs as root): reads through its disk f0
# fill the tmpfs, the device write fails with ENOSPC, the cache goes to
# pass-through (reads still succeed), and hlCacheDeviceFailure must arrive
# with c0's name, device and state, and hlCacheState read passthrough(2).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/snmp_lib.sh"
hl_need snmptrapd
SAN_RETRY_S=2

# A small tmpfs for the cache device, outside the scratch folder (rm -rf
# cannot remove a mount point); unmounted at exit.
MNT=
if [ "$(id -u)" = 0 ]; then
	MNT=$(mktemp -d "${TMPDIR:-/tmp}/hotlun-snmp-tmpfs.XXXXXX") || hl_error "mktemp failed"
	if mount -t tmpfs -o size=6m hotlun-snmp-test "$MNT" 2>"$T/mount.err"; then
		hl_log "cache device tmpfs (6 MiB) on $MNT"
	else
		hl_log "cannot mount a tmpfs ($(cat "$T/mount.err")): cache failure part skipped"
		rmdir "$MNT"
		MNT=
	fi
else
	hl_log "not root: cannot mount a tmpfs, the cache failure part is skipped"
fi
unmount_tmpfs() {
	[ -n "$MNT" ] || return 0
	umount "$MNT" 2>/dev/null && rmdir "$MNT"
}
# A failing test must not leave the SAN stopped (lib.sh's cleanup sends
# SIGTERM) nor the tmpfs mounted (after cleanup: hotlund holds the device).
SAN_PID=
trap 'rc=$?; [ -n "$SAN_PID" ] && kill -CONT "$SAN_PID" 2>/dev/null; (exit $rc); hl_cleanup; rc=$?; unmount_tmpfs; exit $rc' EXIT

# ---- the SAN (disk0 on a sparse file) and the front
hl_target_start --size 64M
SAN_PID=$HL_PID SAN_URL=$HL_URL
FRONT_IQN=$HL_IQN_PREFIX:snmp-traps-front
FRONT_PORT=$(hl_free_port)
mkdir -p "$T/front-state"
cat >"$T/front.conf" <<EOF
[global]
portal = 127.0.0.1:$FRONT_PORT
state_dir = $T/front-state
control_socket = $T/ctl.sock
[disk e0]
origin = $SAN_URL?timeout=$SAN_RETRY_S
[target $FRONT_IQN]
lun.0 = e0
allow = ALL
EOF
if [ -n "$MNT" ]; then
	hl_make_disk "$T/f0.img" 64M
	# made at its size (sparse) beforehand: the start-up check refuses a new
	# cache file that cannot fit, and only warns about one an earlier run made
	truncate -s 64M "$MNT/c0.cache" || hl_error "cannot create $MNT/c0.cache"
	cat >>"$T/front.conf" <<EOF
lun.1 = f0
[cache c0]
device = $MNT/c0.cache
size = 64M
block_size = 64K
[disk f0]
origin = file:$T/f0.img
cache = c0
EOF
fi
hl_start_hotlund "$T/front.conf"
FRONT_PID=$HL_PID
FRONT_URL=iscsi://127.0.0.1:$FRONT_PORT/$FRONT_IQN/0

# ---- snmptrapd, snmpd sending to it, the subagent
TRAP_PORT=$(udp_free_port) || hl_error "no free UDP port"
cat >"$T/snmptrapd.conf" <<EOF
disableAuthorization yes
EOF
hl_spawn snmptrapd "$T/traps.log" env MIBS= snmptrapd -f -Lo -C -c "$T/snmptrapd.conf" -On \
	-p "$T/snmptrapd.pid" "udp:127.0.0.1:$TRAP_PORT"
TRAPD_PID=$HL_LAST_PID
SNMPD_EXTRA="trap2sink 127.0.0.1:$TRAP_PORT public"
start_snmpd
start_subagent
sleep 1 # let snmptrapd bind before anything is sent

E0=$(disk_index e0)
[ -n "$E0" ] || hl_fail "e0 missing from hlDiskTable"
bench --workload uniform --read 100 --count 100 "$FRONT_URL"
wait_for "e0 ok(1)" sis hlDiskOriginState "$E0" 1

LOSS=$(oid hlOriginLoss)
RECOVERED=$(oid hlOriginRecovered)
# trap_seen NOTIFICATION-OID: snmptrapd logged it (with -On, numeric).
trap_seen() {
	grep -Eq -- "${1//./\\.}([[:space:]]|\$)" "$T/traps.log"
}
trap_seen "$LOSS" && hl_fail "hlOriginLoss before any failure"

# ---- freeze the SAN: reads fail after the retry limit
kill -STOP "$SAN_PID"
# SIGSTOP is asynchronous: wait until every thread of the SAN is stopped.
for i in $(seq 1 100); do
	awk '{ print $3 }' /proc/"$SAN_PID"/task/*/stat 2>/dev/null | grep -qv '^[Tt]$' || break
	sleep 0.05
done
"$HL_BENCH" --quiet --initiator "$INITIATOR" --workload uniform --read 100 --qd 1 --count 3 \
	"$FRONT_URL" >"$T/fail.out" 2>&1 && {
	kill -CONT "$SAN_PID"
	hl_fail "reads succeeded while the SAN was frozen"
}
wait_for "hlOriginLoss at snmptrapd" trap_seen "$LOSS"
kill -CONT "$SAN_PID"
ERR=$(sget hlDiskErrors "$E0")
[ "${ERR:-0}" -gt 0 ] || hl_fail "hlDiskErrors is '$ERR' after failed reads"
[ "$(sget hlDiskOriginState "$E0")" = 2 ] || hl_fail "hlDiskOriginState is not failing(2)"
# The notification carries e0's name, origin and state (snmptrapd prints a
# notification's varbinds on one line).
LINE=$(grep -E -- "${LOSS//./\\.}([[:space:]]|\$)" "$T/traps.log")
case $LINE in
*"$(oid hlDiskName).$E0 = STRING: \"e0\""*) ;;
*) hl_fail "hlOriginLoss without hlDiskName e0: $LINE" ;;
esac
case $LINE in
*"$(oid hlDiskOrigin).$E0 = STRING: \"$SAN_URL?timeout=$SAN_RETRY_S\""*) ;;
*) hl_fail "hlOriginLoss without hlDiskOrigin: $LINE" ;;
esac
case $LINE in
*"$(oid hlDiskOriginState).$E0 = INTEGER: 2"*) ;;
*) hl_fail "hlOriginLoss without hlDiskOriginState failing(2): $LINE" ;;
esac
hl_log "ok: hlOriginLoss received (errors $ERR), state failing(2)"

# ---- the SAN is back: reads work; 10 s without errors -> recovered
ok=0
for i in $(seq 1 40); do
	if "$HL_BENCH" --quiet --initiator "$INITIATOR" --workload uniform --read 100 --qd 1 \
		--count 5 "$FRONT_URL" >"$T/up.out" 2>&1; then
		ok=1
		break
	fi
	sleep 0.5
done
[ $ok = 1 ] || { cat "$T/up.out" >&2; hl_fail "reads through the front did not recover"; }
ERR2=$(sget hlDiskErrors "$E0")
for i in $(seq 1 120); do
	trap_seen "$RECOVERED" && break
	sleep 0.25
done
trap_seen "$RECOVERED" || { cat "$T/traps.log" >&2; hl_fail "no hlOriginRecovered within 30 s"; }
[ "$(sget hlDiskOriginState "$E0")" = 1 ] || hl_fail "hlDiskOriginState not ok(1) after recovery"
[ "$(sget hlDiskErrors "$E0")" = "$ERR2" ] || hl_fail "errors grew after recovery"
N_LOSS=$(grep -cE -- "${LOSS//./\\.}([[:space:]]|\$)" "$T/traps.log")
[ "$N_LOSS" = 1 ] || hl_fail "$N_LOSS hlOriginLoss notifications for one outage (want 1)"
hl_log "ok: hlOriginRecovered received, state ok(1)"

# ---- the cache device fills up: pass-through and hlCacheDeviceFailure
if [ -n "$MNT" ]; then
	C0=$(swalk hlCacheName | awk '$2 == "c0" { print $1 }')
	[ -n "$C0" ] || hl_fail "c0 missing from hlCacheTable"
	[ "$(sget hlCacheState "$C0")" = 1 ] || hl_fail "hlCacheState must start active(1)"
	FAILED=$(oid hlCacheDeviceFailure)
	trap_seen "$FAILED" && hl_fail "hlCacheDeviceFailure before any failure"
	# 400 random 64 KiB reads admit far more than 6 MiB: ENOSPC.
	bench --workload uniform --bs 64K --qd 1 --read 100 --count 400 \
		"iscsi://127.0.0.1:$FRONT_PORT/$FRONT_IQN/1"
	wait_for "hlCacheDeviceFailure at snmptrapd" trap_seen "$FAILED"
	[ "$(sget hlCacheState "$C0")" = 2 ] || hl_fail "hlCacheState is not passthrough(2)"
	[ "$(sget hlCacheDeviceErrors "$C0")" -gt 0 ] || hl_fail "hlCacheDeviceErrors is 0"
	LINE=$(grep -E -- "${FAILED//./\\.}([[:space:]]|\$)" "$T/traps.log")
	case $LINE in
	*"$(oid hlCacheName).$C0 = STRING: \"c0\""*"$(oid hlCacheDevice).$C0 = STRING: \"$MNT/c0.cache\""*"$(oid hlCacheState).$C0 = INTEGER: 2"*) ;;
	*) hl_fail "hlCacheDeviceFailure without c0's name, device and state: $LINE" ;;
	esac
	# Pass-through serves reads from the origin: no errors for the initiator.
	F0=$(disk_index f0)
	[ "$(sget hlDiskErrors "$F0")" = 0 ] || hl_fail "f0 reads failed while the cache went to pass-through"
	N_FAILED=$(grep -cE -- "${FAILED//./\\.}([[:space:]]|\$)" "$T/traps.log")
	[ "$N_FAILED" = 1 ] || hl_fail "$N_FAILED hlCacheDeviceFailure notifications (want 1)"
	hl_log "ok: hlCacheDeviceFailure received, c0 passthrough(2), f0 reads without errors"
fi

hl_stop "$SUB_PID"
hl_stop "$SNMPD_PID"
hl_stop "$TRAPD_PID"
hl_stop "$FRONT_PID"
hl_stop "$SAN_PID"
hl_log "PASS"
