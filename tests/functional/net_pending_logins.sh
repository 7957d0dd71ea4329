#!/bin/bash
# net_pending_logins.sh - connections that have not finished login are
# capped per portal and per source address (issue 19, item 1), so idle or
# slow connections cannot take every descriptor: with
# max_pending_logins = 8 and max_pending_logins_per_addr = 4,
# 1. 6 idle connections from 127.0.0.1: 4 stay, the target closes 2;
# 2. a login from 127.0.0.2 still works;
# 3. 6 more from 127.0.0.3: 4 stay (8 pending: the portal is full), 2 closed;
#    a login from 127.0.0.2 still gets in: the full portal closes its
#    longest silent connection instead (issue 24 item 4; it was refused);
# 4. `hotlunctl / set max_pending_logins=16` applies at once;
# 5. each episode is logged once, not once per refused connection.
# hotlund before the fix had no cap (and no such keys).
. "$(dirname "$0")/lib.sh"
hl_need python3
[ "$HL_TARGET" = tgt ] && hl_skip "hotlund's pending-login caps; nothing to check on tgt"

T=$(hl_tmpdir)
PY=(python3 "$HL_SRCDIR/tests/functional/pdu_client.py")
CTL=$HL_BUILDDIR/hotlunctl
HL_GLOBAL_EXTRA=$'max_pending_logins = 8\nmax_pending_logins_per_addr = 4' hl_target_start --size 64M
SOCK=$(hl_tmpdir)/state/ctl.sock

# idle NAME SOURCE COUNT: start idle connections; wait for the client's report
idle() {
	hl_spawn "idle-$1" "$T/idle.$1.out" "${PY[@]}" idle --portal "$HL_PORTAL" --source "$2" \
		--count "$3" --hold 60
	local pid=$HL_LAST_PID i
	for i in $(seq 1 100); do
		grep -q '^idle:' "$T/idle.$1.out" && break
		hl_alive "$pid" || { cat "$T/idle.$1.out" >&2; hl_error "idle client $1 failed"; }
		sleep 0.1
	done
	cat "$T/idle.$1.out"
	eval "IDLE_$1=$pid"
}

# login_from ADDR: true when a login from ADDR reaches the full feature phase
# (its TEST UNIT READY may report the power-on unit attention)
login_from() {
	"${PY[@]}" login --portal "$HL_PORTAL" --target "$HL_IQN" --lun "$HL_LUN" --source "$1" \
		>"$T/login.out" 2>&1
	grep -q '^login ok' "$T/login.out"
}

idle a 127.0.0.1 6
grep -q 'opened 6, closed by the target 2$' "$T/idle.a.out" ||
	hl_fail "per-address cap: 2 of 6 idle connections from one address must be closed"
login_from 127.0.0.2 || { cat "$T/login.out" >&2; hl_fail "a login from another address was refused"; }
hl_log "ok: login from 127.0.0.2 while 127.0.0.1 is at its cap"

idle b 127.0.0.3 6
grep -q 'opened 6, closed by the target 2$' "$T/idle.b.out" ||
	hl_fail "per-address cap from a second address: 2 of 6 must be closed"
login_from 127.0.0.2 || { cat "$T/login.out" >&2; hl_fail "a login was refused while the full portal had silent connections to close"; }
grep -q 'closing the one silent longest' "$HL_LOG" || hl_fail "the eviction was not logged"
hl_log "ok: a login gets in while the portal has 8 pending: the longest silent one was closed"

"$CTL" --socket "$SOCK" / set max_pending_logins=16 || hl_fail "set max_pending_logins=16"
"$CTL" --socket "$SOCK" / get max_pending_logins | grep -qx 'max_pending_logins=16' ||
	hl_fail "max_pending_logins not 16 after set"
login_from 127.0.0.2 || { cat "$T/login.out" >&2; hl_fail "login refused after raising max_pending_logins"; }
hl_log "ok: the raised cap applies"

grep 'have not finished login' "$HL_LOG" >&2
n=$(grep -c 'have not finished login' "$HL_LOG")
[ "$n" -ge 2 ] || hl_fail "refusals not logged"
[ "$n" -le 4 ] || hl_fail "$n log lines for 3 refusal episodes: one per episode expected"
hl_check_alive
hl_stop "$IDLE_a"
hl_stop "$IDLE_b"
hl_target_stop
hl_log "PASS"
