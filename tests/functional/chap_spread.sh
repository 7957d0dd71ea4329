#!/bin/bash
# chap_spread.sh - CHAP guessing spread over many source addresses and
# initiator names (issue 24 item 1). A target with CHAP; attackers from
# net_attack.py bind their sockets to 127.x.y.z (every address of
# 127.0.0.0/8 reaches the portal):
#  1. 8 s of wrong answers from 2,048 addresses, a new initiator name each
#     time, 4 at once: at most 7 are checked (3 free, then back-offs of 1,
#     2 and 4 s for the secret, whoever asks); hotlund before the fix checked
#     them all (thousands), because its tables forgot the oldest of 1,024
#     addresses and names;
#  2. a host that logged in before all this (127.0.0.2, initiator "victim")
#     and then mistyped once logs in 8 times out of 8 while an attacker guesses
#     under its name, twice a second, each time from a fresh address (before:
#     0 of 8, the name's back-off bound the host once its address had failed;
#     a faster attacker flushed the host's failure out of the address table);
#  3. the log holds a handful of CHAP lines and a summary of the rest, not a
#     line per guess (before: one notice per wrong answer).
. "$(dirname "$0")/lib.sh"
hl_need python3
[ "$HL_TARGET" = tgt ] && hl_skip "the throttle under test is hotlund's"

T=$(hl_tmpdir)
SECRET=r1ght-s3cret-4-chap
hl_target_start --size 16M --chap alice "$SECRET"
ATT=(python3 "$HL_SRCDIR/tests/functional/net_attack.py")
CTL=("$HL_BUILDDIR/hotlunctl" --socket "$T/state/ctl.sock")
VICTIM=iqn.2026-11.io.hotlun:victim

# stat KEY: a counter of stats --json's "iscsi" object.
stat() {
	"${CTL[@]}" stats --json >"$T/stats.json" || hl_fail "hotlunctl stats failed"
	python3 -c "import json; print(json.load(open('$T/stats.json'))['iscsi']['$1'])" ||
		hl_fail "stats --json has no iscsi.$1"
}

# login SECRET: one login from 127.0.0.2 as $VICTIM; prints its status (0x0000: in).
login() {
	python3 - "$HL_SRCDIR/tests/functional" "$HL_PORT" "$HL_IQN" "$VICTIM" "$1" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import pdu_client as p
c = p.Conn("127.0.0.1", int(sys.argv[2]), timeout=10, source="127.0.0.2")
try:
    c.login(sys.argv[3], initiator=sys.argv[4], chap=("alice", sys.argv[5]))
    print("0x0000")
except AssertionError as e:
    s = str(e)
    print(s[s.find("status 0x") + 7:][:6] if "status 0x" in s else "error: " + s)
except Exception as e:
    print("error: %s" % e)
finally:
    c.close()
EOF
}

# the victim host logs in once before anything happens (from then on it is known)
[ "$(login "$SECRET")" = 0x0000 ] || hl_fail "the victim's first login failed"

# ---- 1. 2,048 addresses and as many names: the secret's budget holds
f0=$(stat auth_failures)
"${ATT[@]}" chapflood --portal "$HL_PORTAL" --target "$HL_IQN" --user alice --name random \
	--sources 2048 --seconds 8 --workers 4 >"$T/flood1.out" 2>&1 || { cat "$T/flood1.out" >&2; hl_error "chapflood failed"; }
cat "$T/flood1.out"
attempts=$(sed -n 's/.*attempts=\([0-9]*\).*/\1/p' "$T/flood1.out")
checked=$(($(stat auth_failures) - f0))
hl_log "8 s from 2,048 addresses: $attempts wrong answers sent, $checked checked"
[ "${attempts:-0}" -ge 100 ] || hl_error "the attacker sent only ${attempts:-0} answers"
[ "$checked" -le 7 ] || hl_fail "$checked of $attempts guesses from 2,048 addresses were checked in 8 s (at most 7: 3 free, then 1, 2, 4 s back-offs)"
hl_log "ok: the secret's budget holds whatever the number of addresses and names"

# ---- 2. a host that logged in before keeps its own budget
[ "$(login "$SECRET")" = 0x0000 ] || hl_fail "the victim (known) could not log in after the flood"
[ "$(login wrong-once)" = 0x0201 ] || hl_fail "a wrong secret was not refused"
"${ATT[@]}" chapflood --portal "$HL_PORTAL" --target "$HL_IQN" --user alice --name "$VICTIM" \
	--sources 2048 --base 40 --seconds 16 --workers 1 --rate 2 >"$T/flood2.out" 2>&1 &
APID=$!
sleep 2
ok=0
for i in $(seq 1 8); do
	st=$(login "$SECRET")
	hl_log "victim login $i during the attack: $st"
	[ "$st" = 0x0000 ] && ok=$((ok + 1))
	sleep 1.5
done
wait "$APID"
cat "$T/flood2.out"
[ "$ok" = 8 ] || hl_fail "the host that logged in before got in $ok times of 8 while its name was attacked"
hl_log "ok: 8 of 8 logins of the known host while its name was guessed from fresh addresses"

# ---- 3. the log: a few lines and summaries, not a line per guess
for _ in $(seq 1 150); do
	grep -q 'guessing episode over' "$HL_LOG" && break
	sleep 0.1
done
grep -E 'CHAP|login of' "$HL_LOG" | grep -v 'established' >"$T/chap.log"
n=$(wc -l <"$T/chap.log")
tail -4 "$T/chap.log" >&2
grep -q 'not logged one by one' "$T/chap.log" || hl_fail "no summary line of the guesses not logged one by one"
grep -q 'guessing episode over' "$T/chap.log" || hl_fail "no line when the guessing stopped"
[ "$n" -le 20 ] || hl_fail "$n CHAP log lines for two floods: a few lines and summaries expected"
hl_log "ok: $n CHAP log lines for $(($(stat auth_failures) + $(stat auth_throttled))) answers"
hl_check_alive
hl_target_stop
hl_log "PASS"
