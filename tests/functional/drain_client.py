#!/usr/bin/env python3
"""drain_client.py - the initiator's side of a planned stop, in raw PDUs.

Logs in, sends one READ that the (slow) origin will take a while to answer,
prints "SENT" and waits for the target's Async Message. Then it logs out as
RFC 7143 11.9.1 asks and records the order of what comes back: the READ's
data and status must arrive before the Logout Response, whose Time2Wait is
checked, and the Async Message, the READ's status and the Logout Response
carry consecutive StatSNs. Prints one line "async=E within=S read_before_logout=B time2wait=T"
and exits 0 when the target behaved, 1 otherwise.

  drain_client.py --portal H:P --target IQN [--time2wait T] [--within S]
"""

import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdu_client as pc  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--portal", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--time2wait", type=int, default=1)
    ap.add_argument("--within", type=int, default=5)
    args = ap.parse_args()
    host, port = args.portal.rsplit(":", 1)
    c = pc.Conn(host, int(port), timeout=30.0)
    pc.check_login_ok(c.login(args.target))
    c.clear_ua(0)

    bhs = c.scsi_bhs(pc.cdb_read10(0, 8), lun=0, read_len=8 * 512)
    read_itt = c.itt
    c.send(bhs)
    c.cmdsn += 1
    print("SENT", flush=True)

    event = within = None
    read_done = False
    statsns = []  # StatSN of the Async Message, the READ's status, the Logout Response
    while event is None:
        r = c.recv(timeout=30.0)
        if r.opcode == pc.OP_ASYNC:
            event = r.bhs[36]
            within = struct.unpack(">H", r.bhs[42:44])[0]
            statsns.append(r.u32(24))
        elif r.itt == read_itt and (r.opcode == pc.OP_SCSI_RSP or
                                    (r.opcode == pc.OP_DATA_IN and r.flags & 0x01)):
            read_done = True
    if read_done:
        print("the READ completed before the target asked for a logout: origin too fast")
        return 1

    lo = bytearray(48)
    lo[0] = 0x40 | pc.OP_LOGOUT
    lo[1] = 0x80  # reason 0: close the session
    struct.pack_into(">I", lo, 16, c.next_itt())
    struct.pack_into(">I", lo, 24, c.cmdsn)
    struct.pack_into(">I", lo, 28, c.exp_statsn)
    c.send(lo)
    time2wait = None
    while time2wait is None:
        r = c.recv(timeout=30.0)
        if r.itt == read_itt and (r.opcode == pc.OP_SCSI_RSP or
                                  (r.opcode == pc.OP_DATA_IN and r.flags & 0x01)):
            status = r.bhs[3]
            if status != 0:
                print("the READ ended with status 0x%02x" % status)
                return 1
            read_done = True
            statsns.append(r.u32(24))
        elif r.opcode == pc.OP_LOGOUT_RSP:
            if r.bhs[2] != 0:
                print("logout response %d" % r.bhs[2])
                return 1
            time2wait = struct.unpack(">H", r.bhs[40:42])[0]
            statsns.append(r.u32(24))
    closed = c.expect_closed(timeout=10.0)
    # each status-carrying PDU takes the next StatSN, in the order sent
    statsn_ok = len(statsns) == 3 and all(
        (statsns[i] + 1) & 0xFFFFFFFF == statsns[i + 1] for i in range(2))
    print("async=%d within=%d read_before_logout=%d time2wait=%d closed=%d statsn=%s" %
          (event, within, read_done, time2wait, closed, ",".join(map(str, statsns))))
    ok = (event == 1 and within == args.within and read_done and
          time2wait == args.time2wait and closed and statsn_ok)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (pc.Closed, pc.Timeout) as e:
        print("connection: %s" % (e.__class__.__name__))
        sys.exit(1)
