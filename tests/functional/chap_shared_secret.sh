#!/bin/bash
# chap_shared_secret.sh - the CHAP guessing budget belongs to the secret,
# not to the target that checks it (docs/security.md, "CHAP guessing").
# Eight targets share one chap_secret (one secret for a host's targets is
# common), and the discovery secret is the same too. A guesser that has
# opened a back-off on one target must find the others in it: its next
# response, to another target or to discovery, is refused unchecked. Then
# 48 wrong responses spread over the eight targets: no more are checked
# than one target alone allows (before: each target had a budget of its
# own, eight times the guesses).
. "$(dirname "$0")/lib.sh"
hl_need python3
CTL=$HL_BUILDDIR/hotlunctl
[ -x "$CTL" ] || hl_error "no $CTL"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
SECRET=shared-s3cret-0123
hl_make_disk "$tmp/d0.img" 16M
st=$tmp/state
mkdir -p "$st"
{
	cat <<EOF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $st/ctl.sock
log_level = info
discovery_chap_user = alice
discovery_chap_secret = $SECRET

[disk disk0]
origin = file:$tmp/d0.img
EOF
	for i in 1 2 3 4 5 6 7 8; do
		printf '\n[target %s:shared%d]\nlun.0 = disk0\nallow = ALL\nchap_user = alice\nchap_secret = %s\n' \
			"$HL_IQN_PREFIX" "$i" "$SECRET"
	done
} >"$tmp/hotlund.conf"
hl_start_hotlund "$tmp/hotlund.conf"

PORT=$port PREFIX=$HL_IQN_PREFIX CTL=$CTL SOCK=$st/ctl.sock SRC=$HL_SRCDIR python3 - <<'EOF' || hl_fail "see above"
import json, os, re, subprocess, sys
sys.path.insert(0, os.environ["SRC"] + "/tests/functional")
import pdu_client as pc

port, prefix = int(os.environ["PORT"]), os.environ["PREFIX"]


def counters():
    out = subprocess.check_output([os.environ["CTL"], "--socket", os.environ["SOCK"], "stats",
                                   "--json"])
    i = json.loads(out)["iscsi"]
    return i["auth_failures"], i["auth_throttled"]


def guess(n, discovery=False):
    """One login to target n (or discovery) with a wrong secret; its status."""
    c = pc.Conn("127.0.0.1", port)
    try:
        if discovery:
            c.login(None, initiator="iqn.2026-11.test:guesser", chap=("alice", "wrong"),
                    session_type="Discovery")
        else:
            c.login("%s:shared%d" % (prefix, n), initiator="iqn.2026-11.test:guesser",
                    chap=("alice", "wrong"))
        return "0x0000"
    except AssertionError as e:
        m = re.search(r"status (0x[0-9a-f]{4})", str(e))
        return m.group(1) if m else str(e)
    finally:
        c.close()


# 1. four wrong on target 1: the fourth opens a back-off of 1 s
for _ in range(4):
    guess(1)
f0, t0 = counters()
# ... which the same secret on target 2 and on discovery must be in
guess(2)
guess(0, discovery=True)
f1, t1 = counters()
print("after 4 wrong on target 1: target 2 and discovery -> %d checked, %d refused unchecked"
      % (f1 - f0, t1 - t0))
if f1 - f0 != 0 or t1 - t0 != 2:
    sys.exit("another target with the same secret (or discovery) had a budget of its own")

# 2. 48 wrong responses spread over the eight targets, as fast as they come
for k in range(48):
    guess(1 + k % 8)
f2, t2 = counters()
print("48 spread over 8 targets: %d checked, %d refused unchecked" % (f2 - f1, t2 - t1))
if f2 - f1 > 3:
    sys.exit("the eight targets gave the guesser %d checks where one secret allows a few"
             % (f2 - f1))
EOF
hl_log "ok: one budget per secret, whichever target or discovery checks it"
