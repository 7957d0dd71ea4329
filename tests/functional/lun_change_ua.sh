#!/bin/bash
# lun_change_ua.sh - issue 19 item 8: a LUN added or removed while sessions
# are logged in reaches them. Two raw-PDU sessions (two initiators) on one
# target; a LUN added with hotlunctl -> each session's next TEST UNIT READY
# gets CHECK CONDITION, UNIT ATTENTION, REPORTED LUNS DATA HAS CHANGED
# (3Fh/0Eh), once, and REPORT LUNS then lists the new LUN. The LUN, in use,
# deleted with force -> what docs/control.md says: the sessions stay, the
# LUN answers LOGICAL UNIT NOT SUPPORTED (25h/00h), LUN 0 reports 3Fh/0Eh,
# and the log names the LUN, the target, the sessions and who asked. A
# reload (SIGHUP) that adds it back tells the sessions too.
. "$(dirname "$0")/lib.sh"
hl_need python3

CTL=$HL_BUILDDIR/hotlunctl
[ -x "$CTL" ] || hl_error "no $CTL"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
HL_IQN=$HL_IQN_PREFIX:lunchange
hl_make_disk "$tmp/d0.img" 16M
hl_make_disk "$tmp/d1.img" 8M
hl_write_config "$tmp/hotlund.conf" "$port" "$tmp/d0.img"
sock=$tmp/state/ctl.sock
hl_start_hotlund "$tmp/hotlund.conf"
"$CTL" --socket "$sock" /disks create d1 origin=file:"$tmp/d1.img" >/dev/null || hl_fail "create disk d1"

PORT=$port IQN=$HL_IQN CTL=$CTL SOCK=$sock SRC=$HL_SRCDIR CONF=$tmp/hotlund.conf HOTLUND_PID=$HL_PID python3 - <<'EOF' || hl_fail "scenario failed (see above)"
import os, signal, struct, subprocess, sys, time
sys.path.insert(0, os.environ["SRC"] + "/tests/functional")
import pdu_client as pc

iqn = os.environ["IQN"]
luns = "/iscsi/%s/tpg1/luns" % iqn
TUR = bytes(6)
RL = bytes([0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0])


def ctl(*args, ok=True):
    r = subprocess.run([os.environ["CTL"], "--socket", os.environ["SOCK"]] + list(args),
                       capture_output=True, text=True)
    if ok and r.returncode:
        sys.exit("hotlunctl %s failed: %s" % (" ".join(args), r.stderr.strip()))
    return r


def session(name):
    c = pc.Conn("127.0.0.1", int(os.environ["PORT"]))
    c.login(iqn, initiator="iqn.2026-11.test:" + name)
    c.clear_ua(0)
    return c


def expect(c, who, lun, want):
    st, _, sense = c.scsi(TUR, lun=lun)
    got = (st, pc.sense_key(sense))
    print("%s: TEST UNIT READY on LUN %d -> status 0x%02x sense %s" % (who, lun, st, got[1]))
    if got != want:
        sys.exit("%s LUN %d: expected %r, got %r" % (who, lun, want, got))


def report_luns(c):
    st, data, _ = c.scsi(RL, read_len=4096)
    if st:
        sys.exit("REPORT LUNS: status 0x%02x" % st)
    n = struct.unpack(">I", data[:4])[0] // 8
    return sorted(data[8 + 8 * i + 1] for i in range(n))


GOOD = (0, None)
CHANGED = (2, (0x6, 0x3F, 0x0E))
a, b = session("a"), session("b")

ctl(luns, "create", "/disks/d1")            # becomes LUN 1
expect(b, "b", 0, CHANGED)
expect(b, "b", 0, GOOD)                     # reported once
if report_luns(b) != [0, 1]:
    sys.exit("REPORT LUNS after the add: %r" % report_luns(b))
expect(a, "a", 0, CHANGED)
expect(a, "a", 1, (2, (0x6, 0x29, 0x00)))   # new to a: POWER ON there, 3F/0E already heard
expect(a, "a", 1, GOOD)

# LUN 1 is in use: refused without force, done with force, sessions stay
r = ctl(luns + "/lun1", "delete", ok=False)
if r.returncode == 0:
    sys.exit("deleted a LUN in use without force")
ctl(luns + "/lun1", "delete", "force")
expect(a, "a", 1, (2, (0x5, 0x25, 0x00)))   # LOGICAL UNIT NOT SUPPORTED
expect(a, "a", 0, CHANGED)
expect(a, "a", 0, GOOD)
if report_luns(a) != [0]:
    sys.exit("REPORT LUNS after the delete: %r" % report_luns(a))
expect(b, "b", 0, CHANGED)

# a reload that adds the LUN back (the file edited by hand, then SIGHUP)
ctl("saveconfig")
with open(os.environ["CONF"], "a") as f:   # the target's section is the file's last
    f.write("lun.1 = d1\n")
os.kill(int(os.environ["HOTLUND_PID"]), signal.SIGHUP)
deadline = time.monotonic() + 30
while True:
    st, _, sense = b.scsi(TUR)
    if (st, pc.sense_key(sense)) == CHANGED:
        break
    if st or time.monotonic() > deadline:
        sys.exit("no REPORTED LUNS DATA HAS CHANGED after the reload: 0x%02x %r" % (st, pc.sense_key(sense)))
    time.sleep(0.1)
if report_luns(b) != [0, 1]:
    sys.exit("REPORT LUNS after the reload: %r" % report_luns(b))
a.ping()
b.ping()
a.logout()
b.logout()
print("ok")
EOF
hl_check_alive
grep -q "LUN 1 (disk d1) added by a change from the control socket (pid [0-9]* uid [0-9]*); 2 session(s) told REPORTED LUNS DATA HAS CHANGED" "$HL_LOG" ||
	hl_fail "the add is not logged as documented: $(grep 'LUN 1' "$HL_LOG")"
grep -q "LUN 1 (disk d1) removed by a change from the control socket (pid [0-9]* uid [0-9]*) with force; 2 session(s) stay logged in" "$HL_LOG" ||
	hl_fail "the forced delete is not logged as documented: $(grep 'LUN 1' "$HL_LOG")"
grep -q "LUN 1 (disk d1) added by a reload (SIGHUP); 2 session(s) told" "$HL_LOG" ||
	hl_fail "the reload's add is not logged: $(grep 'LUN 1' "$HL_LOG")"
hl_target_stop
hl_log "PASS"
