#!/bin/bash
# net_unread_responses.sh - a logged-in initiator that sends commands and
# never reads its socket (h33a). Each command is 48 bytes, is answered at
# once with CHECK CONDITION (a READ larger than hotlund buffers) and so
# frees its CmdSN slot at once; its response keeps its task until sent.
# Counted in wire bytes alone (32 MiB) that let one connection make hotlund
# hold ~470,000 responses, +600 MiB of RSS; now the PDUs queued count too
# (16384) and hotlund stops reading the connection there: RSS +20 MiB at
# most. Another session logs in and works meanwhile, and the first one,
# once it reads, gets its answers in order.
. "$(dirname "$0")/lib.sh"
hl_need python3
hl_target_start --size 16M

PORT=$HL_PORT IQN=$HL_IQN PID=$HL_PID SRC=$HL_SRCDIR python3 - <<'EOF2' || hl_fail "see above"
import os, select, struct, sys, time
sys.path.insert(0, os.environ["SRC"] + "/tests/functional")
import pdu_client as pc

port, iqn, pid = int(os.environ["PORT"]), os.environ["IQN"], os.environ["PID"]
MAX_XFER = 16 << 20
BATCH, MAX_SENT = 1024, 600000


def rss_kib():
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])


c = pc.Conn("127.0.0.1", port)
c.login(iqn, initiator="iqn.2026-11.test:deaf")
c.clear_ua(0)
first_itt = c.itt + 1
rss0 = rss_kib()
c.sock.setblocking(False)
sent, pending, stalled = 0, b"", False
t0 = time.monotonic()
while sent < MAX_SENT:
    if not pending:
        blob = bytearray()
        for _ in range(BATCH):
            blob += c.scsi_bhs(pc.cdb_read10(0, 1), read_len=MAX_XFER + 512)
            c.cmdsn += 1
        pending = bytes(blob)
    _, w, _ = select.select([], [c.sock], [], 2.0)
    if not w:
        stalled = True  # hotlund stopped reading this connection
        break
    n = c.sock.send(pending)
    pending = pending[n:]
    if not pending:
        sent += BATCH
rss1 = rss_kib()
grow = (rss1 - rss0) / 1024.0
print("sent %d commands in %.1f s, %s; hotlund VmRSS %d -> %d KiB (+%.1f MiB)" %
      (sent, time.monotonic() - t0, "then hotlund stopped reading" if stalled else "all taken",
       rss0, rss1, grow))
if not stalled:
    sys.exit("hotlund took all %d commands of a connection that reads nothing" % sent)
if grow > 64:
    sys.exit("hotlund grew %.1f MiB for one connection that reads nothing" % grow)

# another initiator is served meanwhile
o = pc.Conn("127.0.0.1", port)
o.login(iqn, initiator="iqn.2026-11.test:other")
o.clear_ua(0)
st, _, _ = o.scsi(bytes(6))
if st != 0:
    sys.exit("TEST UNIT READY of another session: status 0x%x" % st)
o.logout()
o.close()

# the deaf one reads now: its first answers come, in order, each a CHECK CONDITION
c.sock.setblocking(True)
c.sock.settimeout(10)
expect = first_itt
for _ in range(2000):
    r = c.recv()
    if r.opcode in (pc.OP_NOP_IN, pc.OP_ASYNC):
        continue
    if r.opcode != pc.OP_SCSI_RSP or r.itt != expect or r.bhs[3] != 0x02:
        sys.exit("answer %r, expected a CHECK CONDITION for itt 0x%x" % (r, expect))
    expect += 1
print("the first %d answers came in order once the initiator read" % (expect - first_itt))
c.close()
EOF2
hl_check_alive
hl_target_stop
hl_log "PASS"
