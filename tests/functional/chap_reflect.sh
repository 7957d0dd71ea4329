#!/bin/bash
# chap_reflect.sh - CHAP reflection across targets (RFC 7143 12.1.3: a
# secret that authenticates initiators must not also authenticate a
# target). Target A's mutual_secret is target B's chap_secret. An initiator
# that knows only A's secret opens a login to B, takes B's challenge
# (CHAP_I, CHAP_C), and sends it to A as its own mutual challenge after a
# correct answer to A: A answers H(I_B || secret_B || C_B), which is the
# answer B wants. The same with the discovery secret as a mutual secret.
# Such a configuration must be refused: at start (--check-config), through
# hotlunctl set, and the reflected answer must not get the attacker into B.
. "$(dirname "$0")/lib.sh"
hl_need python3

CTL=$HL_BUILDDIR/hotlunctl
[ -x "$CTL" ] || hl_error "no $CTL"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
A=$HL_IQN_PREFIX:reflect-a
B=$HL_IQN_PREFIX:reflect-b
SA=secret-of-A-0123
SB=secret-of-B-4567
SD=secret-of-disc-89
hl_make_disk "$tmp/d0.img" 16M
st=$tmp/state
mkdir -p "$st"
conf() { # conf FILE A_MUTUAL_SECRET
	cat >"$1" <<EOF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $st/ctl.sock
log_level = info
discovery_chap_user = disc
discovery_chap_secret = $SD

[disk disk0]
origin = file:$tmp/d0.img

[target $A]
lun.0 = disk0
allow = ALL
chap_user = ua
chap_secret = $SA
mutual_user = ma
mutual_secret = $2

[target $B]
lun.0 = disk0
allow = ALL
chap_user = ub
chap_secret = $SB
EOF
}

# 1. At start: B's or the discovery secret as A's mutual secret is refused.
for bad in "$SB" "$SD"; do
	conf "$tmp/bad.conf" "$bad"
	if "$HL_HOTLUND" --check-config "$tmp/bad.conf" >"$tmp/check.out" 2>&1; then
		hl_fail "--check-config accepted A's mutual_secret equal to another secret ($bad)"
	fi
	grep -q "mutual_secret" "$tmp/check.out" ||
		hl_fail "the refusal does not name mutual_secret: $(cat "$tmp/check.out")"
done

# 2. Live: a good configuration, then hotlunctl tries to make the reflection possible.
conf "$tmp/hotlund.conf" "mutual-of-A-abcd"
hl_start_hotlund "$tmp/hotlund.conf"
for bad in "$SD" "$SB"; do # B's last: the attack below needs it
	if "$CTL" --socket "$st/ctl.sock" "/iscsi/$A" set "mutual_secret=$bad" >"$tmp/set.out" 2>&1; then
		hl_log "set mutual_secret=<another secret> was accepted"
		set_ok=1
	fi
done

# 3. The attack, whatever the control plane let through: it must not log in to B.
PORT=$port A=$A B=$B SA=$SA SRC=$HL_SRCDIR python3 - <<'EOF' || hl_fail "the reflection attack got into target B (see above)"
import os, sys
sys.path.insert(0, os.environ["SRC"] + "/tests/functional")
import pdu_client as pc

port, A, B, SA = int(os.environ["PORT"]), os.environ["A"], os.environ["B"], os.environ["SA"]
ini = "iqn.2026-11.test:attacker"


def challenge(c, target):
    c.isid = bytes([0x80, 0, 0, 0, 0, 7])
    r = c.login_step(0, 1, False, [("InitiatorName", ini), ("SessionType", "Normal"),
                                   ("TargetName", target), ("AuthMethod", "CHAP")])
    pc.check_login_ok(r)
    r = c.login_step(0, 1, False, [("CHAP_A", "5")])
    pc.check_login_ok(r)
    return pc.text_decode(r.data)


b = pc.Conn("127.0.0.1", port)
kb = challenge(b, B)
a = pc.Conn("127.0.0.1", port)
ka = challenge(a, A)
r = a.login_step(0, 1, True, [("CHAP_N", "ua"), ("CHAP_R", pc.chap_response(ka, SA)),
                              ("CHAP_I", kb["CHAP_I"]), ("CHAP_C", kb["CHAP_C"])])
pc.check_login_ok(r)
reflected = pc.text_decode(r.data).get("CHAP_R")
print("target A answered the mutual challenge with", reflected)
r = b.login_step(0, 1, True, [("CHAP_N", "ub"), ("CHAP_R", reflected)])
if r.opcode == pc.OP_LOGIN_RSP and r.bhs[36] == 0:
    sys.exit("target B took A's answer to its own challenge: logged in without B's secret")
print("target B refused the reflected answer: status 0x%02x%02x" % (r.bhs[36], r.bhs[37]))
EOF
[ -z "${set_ok:-}" ] || hl_fail "hotlunctl set a mutual_secret equal to another target's or the discovery secret"
grep -q "mutual_secret must differ" "$tmp/set.out" ||
	hl_fail "hotlunctl's refusal does not say why: $(cat "$tmp/set.out")"
hl_log "ok: a secret that authenticates initiators is never a mutual secret"
