#!/bin/bash
# net_login_size.sh - what a peer that has proven nothing can make hotlund
# hold: until login ends the default MaxRecvDataSegmentLength (8192, RFC
# 7143 13.12) bounds a PDU's data segment, not the 256 KiB a logged-in
# session may negotiate. 64 connections from one source (its pending-login
# cap) each announce a 256 KiB login PDU and send all but its last byte:
# each is closed at once and hotlund's RSS stays put (before: all 64 held
# open, ~22 MiB more; 1,024 from 16 sources held 340 MiB). A login whose
# PDUs fit 8 KiB still logs in, and a logged-in session still takes PDUs
# of what it negotiated (a 64 KiB immediate WRITE).
. "$(dirname "$0")/lib.sh"
hl_need python3
# ASan holds freed buffers in quarantine: +10 MiB RSS for 64 closed peers
if hl_sanitized; then
	export ASAN_OPTIONS=$ASAN_OPTIONS:quarantine_size_mb=0:thread_local_quarantine_size_kb=0
fi
hl_target_start --size 16M

PORT=$HL_PORT IQN=$HL_IQN PID=$HL_PID SRC=$HL_SRCDIR python3 - <<'EOF' || hl_fail "see above"
import os, socket, sys, time
sys.path.insert(0, os.environ["SRC"] + "/tests/functional")
import pdu_client as pc
from netutil import alive

port, iqn, pid = int(os.environ["PORT"]), os.environ["IQN"], os.environ["PID"]


def rss_kib():
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


def big_login(dsl):
    """A login PDU announcing dsl bytes, all sent but the last one."""
    s = socket.create_connection(("127.0.0.1", port))
    b = bytearray(48)
    b[0] = 0x40 | pc.OP_LOGIN
    b[5:8] = dsl.to_bytes(3, "big")
    b[8:14] = bytes([0x80, 0, 0, 0, 0, 1])
    text = b"InitiatorName=iqn.2026-11.test:big\0"
    try:
        s.sendall(bytes(b) + text + b"A" * (dsl - len(text) - 1))
    except OSError:
        pass  # closed while we sent: that is the answer
    return s


before = rss_kib()
conns = [big_login(256 * 1024) for _ in range(64)]
deadline = time.time() + 5
while time.time() < deadline and any(alive(s) for s in conns):
    time.sleep(0.1)
held = sum(alive(s) for s in conns)
grew = rss_kib() - before
print("256 KiB login PDUs: %d of 64 connections held open, RSS +%d KiB" % (held, grew))
for s in conns:
    s.close()
if held:
    sys.exit("a login PDU above 8192 bytes was taken (%d connections held)" % held)
if grew > 8 * 1024:
    sys.exit("RSS grew %d KiB for connections that proved nothing" % grew)

# an 8 KiB login PDU is allowed: the connection waits for its last byte
s = big_login(8192)
time.sleep(0.5)
if not alive(s):
    sys.exit("a login PDU of 8192 bytes was refused")
s.close()

# a real login, then a 64 KiB immediate WRITE (one PDU above 8 KiB) and a READ
c = pc.Conn("127.0.0.1", port)
c.login(iqn, burst=256 * 1024)
c.clear_ua(0)
st, _, _ = c.scsi(pc.cdb_write10(0, 128), data=b"w" * 65536)
if st != 0:
    sys.exit("a 64 KiB immediate WRITE after login: status %d" % st)
st, data, _ = c.scsi(pc.cdb_read10(0, 512), read_len=256 * 1024)
if st != 0 or len(data) != 256 * 1024:
    sys.exit("READ of 256 KiB after login: status %d, %d bytes" % (st, len(data)))
print("login, a 64 KiB immediate WRITE and a 256 KiB READ after it: ok (MaxRecvDataSegmentLength %s)" %
      c.target_keys.get("MaxRecvDataSegmentLength"))
c.logout()
EOF
hl_log "ok: login PDUs are held to 8 KiB"
