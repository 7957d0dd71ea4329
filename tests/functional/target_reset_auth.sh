#!/bin/bash
# target_reset_auth.sh - issue 19 item 9: TARGET COLD RESET (and WARM
# RESET) reach every initiator of the target, so an initiator may send them
# only when the target allows it. Two raw-PDU sessions (two initiators):
# a cold and a warm reset from one -> TMF response 6 (function authorization
# failed), the other session keeps working; `set allow_target_reset=yes`
# with hotlunctl (live) -> the cold reset goes through and closes both
# sessions. The log names the initiator, its address and the target each time.
. "$(dirname "$0")/lib.sh"
hl_need python3

CTL=$HL_BUILDDIR/hotlunctl
[ -x "$CTL" ] || hl_error "no $CTL"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
HL_IQN=$HL_IQN_PREFIX:tmf
hl_make_disk "$tmp/d0.img" 16M
hl_write_config "$tmp/hotlund.conf" "$port" "$tmp/d0.img"
sock=$tmp/state/ctl.sock
hl_start_hotlund "$tmp/hotlund.conf"

PORT=$port IQN=$HL_IQN CTL=$CTL SOCK=$sock SRC=$HL_SRCDIR python3 - <<'EOF' || hl_fail "scenario failed (see above)"
import os, struct, subprocess, sys
sys.path.insert(0, os.environ["SRC"] + "/tests/functional")
import pdu_client as pc

iqn = os.environ["IQN"]
WARM, COLD = 6, 7
AUTH_FAILED = 6


def session(name):
    c = pc.Conn("127.0.0.1", int(os.environ["PORT"]))
    c.login(iqn, initiator="iqn.2026-11.test:" + name)
    c.clear_ua(0)
    return c


def tmf(c, fn):
    """Send task management function fn (immediate); return its response code."""
    b = bytearray(48)
    b[0] = 0x40 | pc.OP_TMF
    b[1] = 0x80 | fn
    struct.pack_into(">I", b, 16, c.next_itt())
    struct.pack_into(">I", b, 20, 0xFFFFFFFF)
    struct.pack_into(">I", b, 24, c.cmdsn)
    struct.pack_into(">I", b, 28, c.exp_statsn)
    itt = c.itt
    c.send(b)
    while True:
        r = c.recv()
        if r.opcode == pc.OP_TMF_RSP and r.itt == itt:
            print("TMF function %d -> response %d" % (fn, r.bhs[2]))
            return r.bhs[2]
        if r.opcode in (pc.OP_NOP_IN, pc.OP_ASYNC):
            continue
        sys.exit("unexpected PDU while waiting for the TMF response: %r" % r)


a, b = session("resetter"), session("bystander")
for fn in (COLD, WARM):
    if tmf(a, fn) != AUTH_FAILED:
        sys.exit("function %d was not refused" % fn)
    # both sessions are untouched: no unit attention, commands work
    for c in (a, b):
        st, _, sense = c.scsi(bytes(6))
        if st:
            sys.exit("TEST UNIT READY after a refused reset: 0x%02x %r" % (st, pc.sense_key(sense)))
b.ping()

r = subprocess.run([os.environ["CTL"], "--socket", os.environ["SOCK"], "/iscsi/" + iqn, "set",
                    "allow_target_reset=yes"], capture_output=True, text=True)
if r.returncode:
    sys.exit("set allow_target_reset=yes: " + r.stderr)
if tmf(a, COLD) != 0:
    sys.exit("cold reset refused although allowed")
if not b.expect_closed(timeout=20):
    sys.exit("the other initiator's session survived an allowed cold reset")
if not a.expect_closed(timeout=20):
    sys.exit("the resetting session survived its cold reset")
print("ok")
EOF
hl_check_alive
who="initiator iqn.2026-11.test:resetter at 127.0.0.1:[0-9]* on target $HL_IQN"
grep -q "TARGET COLD RESET from $who: refused (function authorization failed" "$HL_LOG" ||
	hl_fail "the refused cold reset is not logged with the initiator: $(grep RESET "$HL_LOG")"
grep -q "TARGET WARM RESET from $who: refused" "$HL_LOG" ||
	hl_fail "the refused warm reset is not logged: $(grep RESET "$HL_LOG")"
grep -q "TARGET COLD RESET from $who: done, closing 1 other session(s) and this one" "$HL_LOG" ||
	hl_fail "the allowed cold reset is not logged: $(grep RESET "$HL_LOG")"
grep -q "^allow_target_reset = yes" <("$CTL" --socket "$sock" saveconfig >/dev/null && cat "$tmp/hotlund.conf") ||
	hl_fail "saveconfig does not keep allow_target_reset"
hl_target_stop
hl_log "PASS"
