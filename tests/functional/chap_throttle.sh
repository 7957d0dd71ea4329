#!/bin/bash
# chap_throttle.sh - online CHAP guessing is throttled (issue 19 item 7).
# A target with CHAP; a raw-PDU client (pdu_client.py) from 127.0.0.2:
#  1. three wrong secrets are answered (0x0201); the right secret sent
#     right after them is refused too (0x0201, unchecked: a back-off), and
#     accepted once the back-off is over; after that success, the count
#     starts afresh (two wrong + the right one: accepted at once);
#  2. 50 wrong secrets in a row: only a few are checked, the rest refused
#     unchecked; meanwhile another host (127.0.0.3) logs in at once;
#  3. stats --json (iscsi.auth_failures / auth_throttled) and SNMP
#     (hlAuthFailures / hlAuthThrottled) count them; a warning names the
#     initiator and the address;
# (A host counts as known once it logged in: after step 1, 127.0.0.2 has a
# budget of its own, so step 2's guesses do not touch 127.0.0.3's login.
# chap_spread.sh covers guessing from many addresses.)
#  4. a CHAP secret under 12 bytes set through the control plane is warned about.
. "$(dirname "$0")/lib.sh"
[ "$HL_TARGET" = tgt ] && hl_skip "the throttle under test is hotlund's"
. "$(dirname "$0")/snmp_lib.sh"

SECRET=r1ght-s3cret-4-chap
hl_target_start --size 16M --chap alice "$SECRET"
ln -sf "$T/state/ctl.sock" "$T/ctl.sock" # where snmp_lib's helpers look
NAME=iqn.2026-11.io.hotlun:guesser

# tries SOURCE SECRET...: one login per secret from SOURCE as initiator
# $NAME (the environment may change it); prints each
# status (0x0000 = logged in), one per line, and the seconds they took.
tries() {
	python3 - "$HL_SRCDIR/tests/functional" 127.0.0.1 "$HL_PORT" "$HL_IQN" "$NAME" "$@" <<'EOF'
import re, sys, time
sys.path.insert(0, sys.argv[1])
import pdu_client as p
host, port, target, name, source = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
t0 = time.monotonic()
for secret in sys.argv[7:]:
    c = p.Conn(host, port, source=source)
    try:
        c.login(target, initiator=name, chap=("alice", secret))
        print("0x0000")
    except AssertionError as e:
        m = re.search(r"status (0x[0-9a-f]{4})", str(e))
        print(m.group(1) if m else "error: %s" % e)
    finally:
        c.close()
print("took %.1f" % (time.monotonic() - t0))
EOF
}

# stat KEY: a counter of stats --json's "iscsi" object.
stat() {
	"$HL_CTL" --socket "$T/ctl.sock" stats --json >"$T/stats.json" || hl_fail "hotlunctl stats failed"
	python3 -c "import json; print(json.load(open('$T/stats.json'))['iscsi']['$1'])" ||
		hl_fail "stats --json has no iscsi.$1: $(cat "$T/stats.json")"
}

# ---- 1. three wrong, then the right one: refused until the back-off ends
out=$(tries 127.0.0.2 wrong1 wrong2 wrong3 "$SECRET")
[ "$(echo "$out" | head -4 | tr '\n' ' ')" = "0x0201 0x0201 0x0201 0x0201 " ] ||
	hl_fail "three wrong secrets, then the right one: want four 0x0201, got: $out"
[ "$(stat auth_failures)" = 3 ] || hl_fail "auth_failures is $(stat auth_failures), want 3"
[ "$(stat auth_throttled)" = 1 ] || hl_fail "auth_throttled is $(stat auth_throttled), want 1"
grep -q "127.0.0.2:[0-9]*: CHAP of '$NAME' to '$HL_IQN' failed (3 in a row from hosts not known to this secret): the next [0-9]* ms" "$HL_LOG" ||
	{ grep CHAP "$HL_LOG" >&2; hl_fail "no warning naming the initiator and the address"; }
grep -q "127.0.0.2:[0-9]*: CHAP response of '$NAME' refused unchecked" "$HL_LOG" ||
	hl_fail "no warning for the refused attempt"
ok=0
for i in $(seq 1 40); do
	[ "$(tries 127.0.0.2 "$SECRET" | head -1)" = 0x0000 ] && { ok=1; break; }
	sleep 0.25
done
[ $ok = 1 ] || hl_fail "the right secret is still refused long after the back-off"
out=$(tries 127.0.0.2 wrong4 wrong5 "$SECRET")
[ "$(echo "$out" | head -3 | tr '\n' ' ')" = "0x0201 0x0201 0x0000 " ] ||
	hl_fail "after a success the count must start afresh: got $out"
hl_log "ok: 3 wrong then right: refused in the back-off, accepted after it (attempt $i); reset by a success"

# ---- 2. 50 wrong secrets in a row; another host is not affected
f0=$(stat auth_failures) t0=$(stat auth_throttled)
hl_spawn guesser "$T/guess.out" tries 127.0.0.2 $(seq -f 'guess-%g' 1 50)
GPID=$HL_LAST_PID
sleep 0.5
out=$(NAME=iqn.2026-11.io.hotlun:bystander tries 127.0.0.3 "$SECRET")
[ "$(echo "$out" | head -1)" = 0x0000 ] || hl_fail "another host was refused while one guessed: $out"
wait "$GPID"
hl_forget "$GPID"
checked=$(($(stat auth_failures) - f0)) refused=$(($(stat auth_throttled) - t0))
[ "$(grep -c '^0x0201$' "$T/guess.out")" = 50 ] || { cat "$T/guess.out" >&2; hl_fail "a guess got another answer than 0x0201"; }
took=$(sed -n 's/^took //p' "$T/guess.out")
# Without the throttle all 50 are checked. With it: 3 free, then one per
# back-off (1, 2, 4, 8, 16, 30 s): <= 9 even if the 50 took a minute.
[ "$checked" -le 9 ] && [ $((checked + refused)) = 50 ] ||
	hl_fail "50 wrong secrets in $took s: $checked checked, $refused refused unchecked"
# The first few events of an episode are logged one by one, the rest summarized, not one notice each.
n=$(grep -c "refused unchecked" "$HL_LOG")
[ "$(grep -c 'failed: 0x0201 (CHAP throttled' "$HL_LOG")" = 0 ] && [ "$n" -le 15 ] ||
	hl_fail "the refused guesses flooded the log ($n warnings)"
hl_log "ok: 50 wrong secrets in $took s: $checked checked, $refused refused unchecked ($n warnings logged); another host logged in meanwhile"

# ---- 3. SNMP
start_snmpd
start_subagent
wait_for "hlAuthFailures = auth_failures" sis hlAuthFailures 0 "$(stat auth_failures)"
[ "$(sget hlAuthThrottled 0)" = "$(stat auth_throttled)" ] ||
	hl_fail "hlAuthThrottled $(sget hlAuthThrottled 0), stats $(stat auth_throttled)"
hl_log "ok: SNMP hlAuthFailures $(sget hlAuthFailures 0), hlAuthThrottled $(sget hlAuthThrottled 0)"

# ---- 4. a short secret set through the control plane is warned about
"$HL_CTL" --socket "$T/ctl.sock" "/iscsi/$HL_IQN" set chap_secret=tiny-9 >/dev/null ||
	hl_fail "set chap_secret failed"
grep -q "chap_secret is 6 bytes: RFC 7143 asks for at least 12" "$HL_LOG" ||
	hl_fail "no warning about a 6-byte CHAP secret set through the control plane"
hl_log "ok: a 6-byte secret set through the control plane: $(grep -o 'chap_secret is 6 bytes.*' "$HL_LOG" | head -1)"
hl_target_stop
hl_log "PASS"
