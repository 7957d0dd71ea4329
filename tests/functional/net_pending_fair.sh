#!/bin/bash
# net_pending_fair.sh - the pending-login cap cannot lock everyone out
# (issue 24 item 4). With max_pending_logins = 64 and
# max_pending_logins_per_addr = 4:
# 1. 17 addresses x 4 silent TCP connections, each reopened as soon as the
#    target closes it (net_attack.py idleflood), keep the portal's pending
#    logins at the cap;
# 2. 8 logins from a clean address (127.0.0.2, one every 1.5 s) all get in:
#    a full portal closes the connection that stayed silent longest, not the
#    new one (hotlund before the fix refused the new one: 0 of 8);
# 3. the evictions are logged once per episode, with how many when it ends
#    (10 s after the last one).
# The per-address cap counting an IPv6 /64 as one address is proved by
# tests/unit/iscsi/source_ut (loopback has one IPv6 address only).
. "$(dirname "$0")/lib.sh"
hl_need python3
[ "$HL_TARGET" = tgt ] && hl_skip "hotlund's pending-login caps; nothing to check on tgt"

T=$(hl_tmpdir)
PY=(python3 "$HL_SRCDIR/tests/functional/pdu_client.py")
HL_GLOBAL_EXTRA=$'max_pending_logins = 64\nmax_pending_logins_per_addr = 4' hl_target_start --size 16M

hl_spawn idleflood "$T/flood.out" python3 "$HL_SRCDIR/tests/functional/net_attack.py" idleflood \
	--portal "$HL_PORTAL" --sources 17 --per-source 4 --seconds 90 --base 50
FPID=$HL_LAST_PID
for _ in $(seq 1 100); do
	grep -q 'ready' "$T/flood.out" && break
	hl_alive "$FPID" || { cat "$T/flood.out" >&2; hl_error "idleflood failed"; }
	sleep 0.1
done
sleep 1

ok=0
for i in $(seq 1 8); do
	"${PY[@]}" login --portal "$HL_PORTAL" --target "$HL_IQN" --lun "$HL_LUN" \
		--source 127.0.0.2 >"$T/login.$i.out" 2>&1
	# (its TEST UNIT READY may report the power-on unit attention)
	if grep -q '^login ok' "$T/login.$i.out"; then
		ok=$((ok + 1))
	else
		hl_log "login $i: $(tail -1 "$T/login.$i.out")"
	fi
	sleep 1.5
done
hl_alive "$FPID" || { cat "$T/flood.out" >&2; hl_error "idleflood ended before the logins"; }
kill -TERM "$FPID" # it churned for as long as the logins took (90 s at most); its counts now
wait "$FPID"
hl_forget "$FPID"
cat "$T/flood.out"
closed=$(sed -n 's/.*closed_by_target=\([0-9]*\).*/\1/p' "$T/flood.out")
hl_log "$ok of 8 logins from a clean address while 17 x 4 silent connections churned ($closed closed by the target)"
[ "$ok" = 8 ] || hl_fail "$ok of 8 logins from a clean address got in while the pending-login cap was full"
[ "${closed:-0}" -ge 8 ] || hl_fail "the target closed only ${closed:-0} silent connections"

grep -E 'have not finished login|silent' "$HL_LOG" >&2
n=$(grep -c 'closing the one silent longest' "$HL_LOG")
[ "$n" -ge 1 ] || hl_fail "the evictions were not logged"
[ "$n" -le 3 ] || hl_fail "$n log lines about evictions: one per episode expected"
for _ in $(seq 1 150); do # the end is logged once none was evicted for 10 s
	grep -q 'no connection evicted for' "$HL_LOG" && break
	sleep 0.1
done
grep 'no connection evicted for' "$HL_LOG" >&2 ||
	hl_fail "no line saying how many were evicted when the episode ended"
hl_check_alive
hl_target_stop
hl_log "PASS"
