#!/bin/bash
# gateway_pr.sh - persistent reservations shared by two gateways of one rbd
# image (issue 27; docs/gateways.md, "Persistent reservations"), on a
# throw-away single-node Ceph. Gateway 1 owns the disks, gateway 2 is the
# standby; relative ports are 257 (gateway 1) and 513 (gateway 2).
#  1. libiscsi's reservation families (iscsi-test-cu -t SCSI.Prin*,
#     SCSI.Prout*, SCSI.Reserve6) through gateway 1;
#  2. across gateways (hl_scsi_tool, one command per session): registrations
#     through one gateway, the reservation and a PREEMPT through the other
#     (the standby), the state and its conflicts the same through both,
#     READ FULL STATUS naming the other gateway's relative port;
#  3. PREEMPT AND ABORT through the standby of a nexus whose write is in
#     flight on the owner (a 1.5 s origin): answered only after that write
#     left gateway 1, which logs the abort; the preempted nexus hears
#     REGISTRATIONS PREEMPTED; the time of a PR OUT through the owner and
#     through the standby is measured;
#  4. concurrent PR OUT through both gateways (two clients, 100+ commands
#     each: REGISTER AND IGNORE, RESERVE, PREEMPT of the other): one
#     linear history (PRgeneration = the changes counted, rising as each
#     client saw it), the same answer through both gateways, no lost
#     registration;
#  5. failover: a node fenced (its key preempted under Write Exclusive,
#     Registrants Only) stays fenced after a SIGKILL of the owner, after a
#     planned handover, and through a split brain (the owner frozen, the
#     node fenced through the new owner meanwhile, the old owner thawed: it
#     never lets the node write); a restart of both gateways keeps it all
#     (APTPL).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cu_check.sh"
hl_need iscsi-test-cu rbd ceph ceph-mon ceph-osd python3
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
SESSION=$HL_BUILDDIR/tests/functional/hl_session_cmds
[ -x "$TOOL" ] && [ -x "$SESSION" ] || hl_missing "hl_scsi_tool / hl_session_cmds not built"
CTL=$HL_BUILDDIR/hotlunctl

T=$(hl_tmpdir)
hl_ceph_up "$T/ceph" origin:64M slow:16M

IQN=$HL_IQN_PREFIX:gw-pr
declare -A PORT SOCK PID
for g in 1 2; do
	hl_gw_global $g info
	cat >>"$T/gw$g/hotlund.conf" <<CONF
[disk d]
origin = rbd:rbd/origin
rbd_conf = $cluster/ceph.conf

[disk slow]
origin = rbd:rbd/slow
rbd_conf = $cluster/ceph.conf
origin_latency_ms = 1500

[target $IQN]
lun.0 = d
lun.1 = slow
allow = ALL
allow_target_reset = yes
CONF
done
U1=iscsi://127.0.0.1:${PORT[1]}/$IQN/0
U2=iscsi://127.0.0.1:${PORT[2]}/$IQN/0
S1=iscsi://127.0.0.1:${PORT[1]}/$IQN/1
S2=iscsi://127.0.0.1:${PORT[2]}/$IQN/1

start_gw() {
	hl_start_hotlund "$T/gw$1/hotlund.conf"
	PID[$1]=$HL_PID
	eval "LOG$1=\$HL_LOG"
}
stop_gw() { # stop_gw G SIGNAL
	kill "-$2" "${PID[$1]}"
	wait "${PID[$1]}" 2>/dev/null
	hl_forget "${PID[$1]}"
}
alua() { # alua G DISK
	"$CTL" --socket "${SOCK[$1]}" stats --json 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["disks"][sys.argv[1]]["ownership"]["alua"])' "$2" 2>/dev/null
}
wait_owner() { # wait_owner G SECONDS
	local i
	for i in $(seq 1 $(($2 * 10))); do
		[ "$(alua "$1" d)" = active/optimized ] && [ "$(alua "$1" slow)" = active/optimized ] && return 0
		sleep 0.1
	done
	hl_fail "gateway $1 does not own the disks after $2 s: $(alua "$1" d) $(alua "$1" slow)"
}
# pr URL ISID OP ARGS...: one hl_scsi_tool pr command; its line in OUT (" ms=N" cut, in MS)
pr() {
	OUT=$("$TOOL" pr "$1" "$2" "${@:3}" 2>"$T/tool.err") ||
		{ cat "$T/tool.err" >&2; hl_fail "hl_scsi_tool pr $*: status $?"; }
	MS=
	[[ $OUT =~ \ ms=([0-9]+)$ ]] && MS=${BASH_REMATCH[1]}
	OUT=${OUT% ms=*}
}
# expect URL ISID OP ARGS... WANT (a regular expression for the whole line)
expect() {
	local want=${*: -1}
	pr "${@:1:$(($# - 1))}"
	[[ $OUT =~ ^$want$ ]] || hl_fail "$(gw_of "$1") nexus $2 ${*:3:$(($# - 3))}: got '$OUT', want '$want'"
	hl_log "ok: $(gw_of "$1") nexus $2 ${*:3:$(($# - 3))} -> $OUT${MS:+ ($MS ms)}"
}
gw_of() { case $1 in *:${PORT[1]}/*) echo "gw1" ;; *) echo "gw2" ;; esac; }
gen_of() { sed -n 's/^gen \([0-9]*\).*/\1/p' <<<"$1"; }
clear_all() { # registrations and reservation gone, through gateway $1's URL
	expect "$1" 99 register-ignore 0x99 0 GOOD
	expect "$1" 99 clear 0x99 GOOD
}

start_gw 1
wait_owner 1 30
start_gw 2
sleep 1
[ "$(alua 2 d)" = standby ] || hl_fail "gateway 2 is not a standby: $(alua 2 d)"
grep -q "persistent reservations shared by the gateways" "$LOG1" || hl_fail "gateway 1 does not share reservations"
grep -q "persistent reservations shared by the gateways" "$LOG2" || hl_fail "gateway 2 does not share reservations"

# ---- 1. libiscsi's reservation families through gateway 1
for fam in PrinReadKeys PrinServiceactionRange PrinReportCapabilities ProutRegister ProutReserve \
	ProutClear ProutPreempt Reserve6; do
	hl_cu_run "$T/cu-$fam.out" 600 -d -t "SCSI.$fam" "$U1"
	hl_check_alive "${PID[1]}"
	hl_cu_check "$T/cu-$fam.out" "$CU_RC" 1
done
hl_log "1: libiscsi's reservation families pass through gateway 1"
clear_all "$U2"
expect "$U2" 1 caps "ptpl_c 1 ptpl_a 0 sip_c 1"

# ---- 2. across the gateways: A (isid 1) and B (isid 2)
pr "$U1" 1 read-keys
g0=$(gen_of "$OUT")
expect "$U1" 1 register 0 0xa 0 GOOD  # A through the owner
expect "$U2" 2 register 0 0xb 0 GOOD  # B through the standby
expect "$U2" 2 read-keys "gen $((g0 + 2)) keys 0xa 0xb"
expect "$U1" 2 read-keys "gen $((g0 + 2)) keys 0xa 0xb"
expect "$U2" 1 reserve 0xa 1 CONFLICT  # A through gateway 2: another I_T nexus, not registered
expect "$U1" 1 reserve 0xa 1 GOOD      # Write Exclusive
expect "$U2" 2 read-rsv "gen $((g0 + 2)) type 1 key 0xa"
expect "$U2" 2 read-full "gen $((g0 + 2)) 0xa@257\* 0xb@513"
expect "$U1" 1 write 100 GOOD
expect "$U1" 2 write 100 CONFLICT # B through the owner: not registered there
expect "$U1" 2 read 100 GOOD
expect "$U2" 2 preempt 0xb 0xa 3 GOOD # B takes it through the standby: Exclusive Access
expect "$U1" 1 write 100 CONFLICT
expect "$U1" 1 read 100 CONFLICT
expect "$U1" 1 read-rsv "gen $((g0 + 3)) type 3 key 0xb"
# B registered on every port (ALL_TG_PT) through gateway 1 may write there
expect "$U1" 2 register-all 0 0xb2 GOOD
expect "$U1" 2 write 100 CONFLICT # Exclusive Access: only the holder's nexus
expect "$U2" 2 release 0xb 3 GOOD
expect "$U1" 2 write 100 GOOD
expect "$U2" 2 read-full "gen $((g0 + 4)) 0xb@513 0xb2@0"
clear_all "$U1"
hl_log "2: one state through both gateways"

# ---- 3. PREEMPT AND ABORT through the standby, the write in flight on the owner
hl_pr_holder "$S1"
printf 'register b\npreempt-abort b a 1\n' |
	HL_INITIATOR=$HL_IQN_PREFIX:node-b "$SESSION" "$S2" >"$T/b.out" 2>&1 ||
	hl_fail "node B's session (gateway 2) failed: $(cat "$T/b.out")"
pa=$(sed -n 2p "$T/b.out")
[[ $pa =~ ^GOOD\ ms=([0-9]+)$ ]] || hl_fail "PREEMPT AND ABORT through gateway 2: $pa ($(cat "$T/b.out"))"
ms=${BASH_REMATCH[1]}
[ "$ms" -ge 700 ] || hl_fail "PREEMPT AND ABORT answered after $ms ms, before node A's write could have left gateway 1"
printf 'wait 2500\ntur\n' >&3
exec 3>&-
wait "$APID"
hl_forget "$APID"
grep -q '^WAITED pending=1$' "$T/a.out" || hl_fail "node A's aborted write was answered: $(cat "$T/a.out")"
tail -n 1 "$T/a.out" | grep -q '^CHECK 6/2a/05' ||
	hl_fail "node A's next command: $(tail -n 1 "$T/a.out") (want UNIT ATTENTION 2A/05)"
grep -q "PREEMPT AND ABORT through another gateway: aborting the tasks of 1 preempted nexus" "$LOG1" ||
	hl_fail "gateway 1 did not abort node A's tasks"
# answered because gateway 1 said its tasks were gone, not because it waited gateway 1 out
! grep "did not answer" "$LOG2" || hl_fail "gateway 1 did not answer the PREEMPT AND ABORT's notice"
clear_all "$S1"
hl_log "3: PREEMPT AND ABORT through gateway 2 answered after $ms ms (A's write had up to 1500 ms left)"
# the time of a PR OUT (REGISTER AND IGNORE EXISTING KEY) through each gateway
for g in 1 2; do
	u=$U1
	[ $g = 2 ] && u=$U2
	sum=0 max=0
	for i in $(seq 1 20); do
		pr "$u" 7 register-ignore "0x7$i" 0
		[ "$OUT" = GOOD ] || hl_fail "timing run: $OUT"
		sum=$((sum + MS))
		[ "$MS" -gt "$max" ] && max=$MS
	done
	hl_log "MEASURE PR OUT through gateway $g ($([ $g = 1 ] && echo owner || echo standby)): mean $((sum / 20)) ms, max $max ms (20 runs)"
done
clear_all "$U1"

# ---- 4. concurrent changes through both gateways
pr "$U1" 1 read-keys
g0=$(gen_of "$OUT")
"$TOOL" pr "$U1" 11 hammer 12 34 >"$T/h1.out" 2>&1 &
H1=$!
"$TOOL" pr "$U2" 12 hammer 11 34 >"$T/h2.out" 2>&1 &
H2=$!
wait $H1 || hl_fail "hammer through gateway 1: $(cat "$T/h1.out")"
wait $H2 || hl_fail "hammer through gateway 2: $(cat "$T/h2.out")"
for h in h1 h2; do
	grep -q "gen_ok=1 errors=0" "$T/$h.out" || hl_fail "$h: $(cat "$T/$h.out")"
done
good=$(($(sed -n 's/.*good=\([0-9]*\).*/\1/p' "$T/h1.out") + $(sed -n 's/.*good=\([0-9]*\).*/\1/p' "$T/h2.out")))
expect "$U1" 1 read-keys "gen $((g0 + good)) keys (0xf000b 0xf000c|0xf000c 0xf000b)"
keys1=$OUT
expect "$U2" 1 read-keys "$keys1"
hl_log "4: $(cat "$T/h1.out") / $(cat "$T/h2.out"): $good changes, one history"
clear_all "$U2"

# ---- 5. failover: node A (isid 21, key 0xa1) fenced by node B (isid 22, key 0xb2)
for u in "$U1" "$U2"; do # every path, as mpathpersist and fence_scsi do
	expect "$u" 21 register 0 0xa1 1 GOOD
	expect "$u" 22 register 0 0xb2 1 GOOD
done
expect "$U1" 21 reserve 0xa1 5 GOOD # Write Exclusive, Registrants Only
expect "$U1" 22 write 100 GOOD
expect "$U1" 22 preempt 0xb2 0xa1 5 GOOD
expect "$U1" 21 write 100 CONFLICT
expect "$U2" 21 read-rsv "gen [0-9]+ type 5 key 0xb2"
rsv=$OUT
expect "$U2" 21 read-keys "gen [0-9]+ keys 0xb2 0xb2"
keys=$OUT
# 5a. SIGKILL of the owner
stop_gw 1 KILL
wait_owner 2 30
expect "$U2" 21 read-rsv "$rsv"
expect "$U2" 21 read-keys "$keys"
expect "$U2" 21 write 100 CONFLICT
expect "$U2" 22 write 100 GOOD
start_gw 1
sleep 1
[ "$(alua 1 d)" = standby ] || hl_fail "the restarted gateway 1 is not a standby: $(alua 1 d)"
expect "$U1" 21 read-rsv "$rsv"
hl_log "5a: after SIGKILL of the owner: $rsv, $keys; node A still fenced"
# 5b. planned handover (SIGTERM of the owner)
stop_gw 2 TERM
wait_owner 1 20
expect "$U1" 21 read-keys "$keys"
expect "$U1" 21 write 100 CONFLICT
expect "$U1" 22 write 100 GOOD
start_gw 2
sleep 1
hl_log "5b: after a planned handover: node A still fenced"
# 5c. split brain: node A back in; the owner frozen; A fenced through the new owner
expect "$U1" 21 register-ignore 0xa1 1 GOOD
expect "$U2" 21 register-ignore 0xa1 1 GOOD
expect "$U1" 21 write 100 GOOD # a registrant again
kill -STOP "${PID[1]}"
wait_owner 2 40
expect "$U2" 22 preempt 0xb2 0xa1 5 GOOD
[ "$MS" -ge 2000 ] || hl_fail "the PREEMPT did not wait for the frozen gateway's copy to expire ($MS ms)"
hl_log "5c: PREEMPT through the new owner while the old one is frozen: $MS ms"
expect "$U2" 22 read-keys "gen [0-9]+ keys 0xb2 0xb2"
keys=$OUT
expect "$U2" 22 read-rsv "gen [0-9]+ type 5 key 0xb2"
rsv=$OUT
kill -CONT "${PID[1]}"
pr "$U1" 21 write 100 # the thawed old owner never lets A write
[ "$OUT" != GOOD ] || hl_fail "the thawed old owner let the fenced node write"
hl_log "5c: node A's write through the thawed old owner: $OUT"
expect "$U2" 21 write 100 CONFLICT
for i in $(seq 1 50); do
	[ "$(alua 1 d)" = standby ] && break
	sleep 0.2
done
[ "$(alua 1 d)" = standby ] || hl_fail "the thawed gateway 1 is not a standby: $(alua 1 d)"
expect "$U1" 21 read-keys "$keys"
expect "$U1" 21 read-rsv "$rsv"
# 5d. both gateways restart (APTPL was set): nothing is lost
stop_gw 1 TERM
stop_gw 2 TERM
start_gw 2
wait_owner 2 30
start_gw 1
expect "$U2" 21 read-keys "$keys"
expect "$U1" 21 read-rsv "$rsv"
expect "$U1" 21 caps "ptpl_c 1 ptpl_a 1 sip_c 1"
expect "$U2" 21 write 100 CONFLICT
expect "$U2" 22 write 100 GOOD
hl_log "5d: after a restart of both gateways: $rsv, $keys"
for g in 1 2; do
	hl_check_alive "${PID[$g]}"
	! grep -q "record is damaged" "$T"/hotlund.*.log || hl_fail "a damaged record was logged"
done
hl_log "PASS"
