#!/usr/bin/env python3
"""write_hoard.py - connections that start big WRITEs and never finish them.

Owns: the "memory held by unfinished writes" attack of issue 19, built on
pdu_client.py's raw PDUs. Each connection logs in (ImmediateData=Yes,
InitialR2T=No, so each WRITE brings immediate and unsolicited data), sends
--cmds WRITE(10)s of --size bytes, answers every R2T with Data-Out but
withholds the last 4 KiB of each command, and then holds everything.

  write_hoard.py --portal H:P --target IQN [--conns N] [--cmds 16] [--size 16M]
                 [--lun N] [--settle S] [--source ADDR[,ADDR...]]

Once every connection is idle (no PDU for --settle seconds) it prints one
line: READY conns=N sent=BYTES r2t=N r2t_bytes=BYTES task_set_full=N other=N
held_cmds=N max_r2t_bytes=BYTES errors=N, then holds the connections until
SIGTERM. held_cmds counts WRITEs that got all their data but the last 4 KiB
(or wait for R2T); r2t_bytes what all R2Ts asked for, max_r2t_bytes the most
one connection was asked for. Exit 1 when no connection could log in.
With --source, connection I comes from the (I mod N)th address of the list
(one host may hold only half the budget: several are needed to fill it).

  write_hoard.py --probe --portal H:P --target IQN [--wait S] [--source ADDR]

A well-behaved initiator: one 1 MiB WRITE with 64 KiB of immediate data,
the rest by R2T. Prints "WAITING" when no R2T came within --wait seconds
(or "TASK SET FULL" and exits 2), then answers the R2Ts when they come and
prints "STATUS 0xNN"; exit 0 on GOOD.

  write_hoard.py --trickle S --portal H:P --target IQN [--conns N] [--cmds 16]
                 [--size 1M] [--source ADDR]

Issue 24 item 2: each connection sends --cmds WRITE(10)s of --size bytes
with no data of their own (everything by R2T) and then, every S seconds,
512 valid bytes for each R2T it holds: never silent long enough for the
"no data" close, never done. Prints "READY conns=N holding=N
held_cmds=N task_set_full=N busy=N" once every command has its R2T or its status (or
--settle seconds passed without news), then "CLOSED conn=I held=N after=T"
for each connection the target closes (T: seconds since its first R2T).
holding counts the connections with an R2T. Runs until SIGTERM.

  write_hoard.py --small --portal H:P --target IQN [--source ADDR] [--bound S]

Another initiator while the budget is under attack: a 4 KiB WRITE with its
data immediate, then a 64 KiB WRITE whose data all goes by R2T, each
retried on BUSY / TASK SET FULL until --bound seconds. Prints "SMALL LEN
STATUS 0xNN after T s (N retries)" per WRITE; exit 0 when both were GOOD
within the bound.
"""

import os
import signal
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdu_client as pc  # noqa: E402

WITHHOLD = 4096
OUT_LOCK = threading.Lock()
CHUNK = b"\xa5" * (256 * 1024)


def say(line, err=False):
    """One whole line per write, under a lock: threads that print at the same
    instant must not glue their lines together (the test counts them)."""
    f = sys.stderr if err else sys.stdout
    with OUT_LOCK:
        f.write(line + "\n")
        f.flush()


def data_out(c, itt, ttt, datasn, offset, length, final, lun):
    b = bytearray(48)
    b[0] = pc.OP_DATA_OUT
    b[1] = 0x80 if final else 0
    struct.pack_into(">H", b, 8, lun)
    struct.pack_into(">I", b, 16, itt)
    struct.pack_into(">I", b, 20, ttt)
    struct.pack_into(">I", b, 28, c.exp_statsn)
    struct.pack_into(">I", b, 36, datasn)
    struct.pack_into(">I", b, 40, offset)
    return c.build(b, CHUNK[:length])


def answer_r2t(c, r2t, itt, lun):
    """All the Data-Out the R2T r2t asks for, in segments of at most MaxRecvDataSegmentLength."""
    off, ln = r2t.u32(40), r2t.u32(44)
    seg = min(c.mrdsl, len(CHUNK))
    out, sn, end = [], 0, off + ln
    while off < end:
        n = min(seg, end - off)
        out.append(data_out(c, itt, r2t.u32(20), sn, off, n, off + n == end, lun))
        sn += 1
        off += n
    c.send_raw(b"".join(out))


def login(c, target, initiator):
    """Log in asking for immediate and unsolicited data (the most a WRITE brings unasked)."""
    r = c.login_step(0, 1, True, [("InitiatorName", initiator), ("SessionType", "Normal"),
                                  ("TargetName", target), ("AuthMethod", "None")])
    pc.check_login_ok(r)
    ops = [("HeaderDigest", "None"), ("DataDigest", "None"), ("ErrorRecoveryLevel", "0"),
           ("InitialR2T", "No"), ("ImmediateData", "Yes"),
           ("MaxBurstLength", "1048576"), ("FirstBurstLength", "262144"),
           ("MaxRecvDataSegmentLength", "262144"), ("MaxConnections", "1"),
           ("DefaultTime2Wait", "2"), ("DefaultTime2Retain", "0"),
           ("MaxOutstandingR2T", "4"), ("DataPDUInOrder", "Yes"),
           ("DataSequenceInOrder", "Yes")]
    r = c.login_step(1, 3, True, ops)
    pc.check_login_ok(r)
    for _ in range(4):
        if r.flags & 0x80 and (r.flags & 3) == 3:
            break
        r = c.login_step(1, 3, True, [])
        pc.check_login_ok(r)
    else:
        raise AssertionError("target never transited to full feature phase")
    k = c.target_keys
    if "MaxRecvDataSegmentLength" in k:
        c.mrdsl = int(k["MaxRecvDataSegmentLength"])
    c.cmdsn = r.u32(28)


class Hoarder(threading.Thread):
    def __init__(self, args, idx):
        super().__init__(daemon=True)
        self.args, self.idx = args, idx
        self.sent = 0
        self.r2t = 0
        self.r2t_bytes = 0
        self.tsf = 0
        self.other = 0
        self.held = 0
        self.error = None
        self.ready = threading.Event()
        self.conn = None

    def send_range(self, c, itt, ttt, offset, length, edtl):
        """Data-Out for [offset, offset+length), minus what lies in the last 4 KiB."""
        asked_end = offset + length
        end = min(asked_end, edtl - WITHHOLD)
        seg = min(c.mrdsl, len(CHUNK))
        sn = 0
        out = []
        while offset < end:
            n = min(seg, end - offset)
            out.append(data_out(c, itt, ttt, sn, offset, n,
                                offset + n == end and end == asked_end, self.args.lun))
            sn += 1
            offset += n
            self.sent += n
        if out:
            c.send_raw(b"".join(out))
        return end

    def run(self):
        a = self.args
        try:
            host, port = a.portal.rsplit(":", 1)
            srcs = a.source.split(",") if a.source else [None]
            c = pc.Conn(host, int(port), timeout=30.0, source=srcs[self.idx % len(srcs)])
            self.conn = c
            login(c, a.target, "iqn.2026-11.io.hotlun:hoard%d" % self.idx)
            k = c.target_keys
            fb = int(k.get("FirstBurstLength", "65536"))
            imm_ok = k.get("ImmediateData", "No") == "Yes"
            unsol_ok = k.get("InitialR2T", "Yes") == "No"
            edtl = a.size
            blocks = edtl // 512
            cmds = {}
            for i in range(a.cmds):
                itt = c.next_itt()
                imm = min(c.mrdsl, fb, edtl) if imm_ok else 0
                final = not unsol_ok or imm >= min(fb, edtl)
                bhs = c.scsi_bhs(pc.cdb_write10(0, blocks), lun=a.lun,
                                 write_len=edtl, itt=itt, final=final)
                c.send(bhs, CHUNK[:imm])
                c.cmdsn += 1
                self.sent += imm
                if not final:
                    self.send_range(c, itt, 0xFFFFFFFF, imm, min(fb, edtl) - imm, edtl)
                cmds[itt] = imm
            while True:
                try:
                    r = c.recv(timeout=a.settle)
                except pc.Timeout:
                    break
                if r.opcode == pc.OP_R2T:
                    self.r2t += 1
                    off, ln = r.u32(40), r.u32(44)
                    self.r2t_bytes += ln
                    self.send_range(c, r.itt, r.u32(20), off, ln, edtl)
                elif r.opcode == pc.OP_SCSI_RSP:
                    if r.bhs[3] == 0x28:
                        self.tsf += 1
                    else:
                        self.other += 1
                    cmds.pop(r.itt, None)
                elif r.opcode == pc.OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
                    c.nop_reply(r)
            self.held = len(cmds)
        except Exception as e:  # noqa: BLE001 - reported by main
            self.error = "%s: %s" % (type(e).__name__, e)
        finally:
            self.ready.set()


def main():
    ap = pc.lun_args(__doc__)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--cmds", type=int, default=16)
    ap.add_argument("--size", default="16M")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--wait", type=float, default=3.0)
    ap.add_argument("--trickle", type=float, default=0.0)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--source", default=None)
    ap.add_argument("--bound", type=float, default=5.0)
    a = ap.parse_args()
    if a.probe:
        return probe(a)
    if a.small:
        return small(a)
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    a.size = int(a.size[:-1]) * mult[a.size[-1]] if a.size[-1] in mult else int(a.size)
    if a.trickle:
        return trickle(a)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    hs = [Hoarder(a, i) for i in range(a.conns)]
    for h in hs:
        h.start()
    for h in hs:
        h.ready.wait()
    errs = [h.error for h in hs if h.error]
    for e in errs[:5]:
        print("error: %s" % e, file=sys.stderr)
    print("READY conns=%d sent=%d r2t=%d r2t_bytes=%d task_set_full=%d other=%d held_cmds=%d "
          "max_r2t_bytes=%d errors=%d" % (
              a.conns, sum(h.sent for h in hs), sum(h.r2t for h in hs),
              sum(h.r2t_bytes for h in hs), sum(h.tsf for h in hs),
              sum(h.other for h in hs), sum(h.held for h in hs),
              max(h.r2t_bytes for h in hs), len(errs)), flush=True)
    if len(errs) == a.conns:
        return 1
    while True:
        time.sleep(3600)  # hold every connection until SIGTERM


def session(a, name):
    """A plain session to the target (initiator iqn.2026-11.io.hotlun:NAME), its unit attention taken."""
    host, port = a.portal.rsplit(":", 1)
    c = pc.Conn(host, int(port), timeout=30.0, source=a.source)
    c.login(a.target, initiator="iqn.2026-11.io.hotlun:" + name)
    c.clear_ua(a.lun)
    return c


def probe(a):
    c = session(a, "probe")
    edtl, imm = 1 << 20, 65536
    itt = c.next_itt()
    c.send(c.scsi_bhs(pc.cdb_write10(4096, edtl // 512), lun=a.lun, write_len=edtl, itt=itt),
           CHUNK[:imm])
    c.cmdsn += 1
    said_waiting = False
    t0 = time.monotonic()
    deadline = t0 + 120
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            print("no answer within 120 s", flush=True)
            return 1
        timeout = min(left, a.wait) if not said_waiting else left
        try:
            r = c.recv(timeout=timeout)
        except pc.Timeout:
            if not said_waiting:
                print("WAITING", flush=True)
                said_waiting = True
            continue
        if r.opcode == pc.OP_R2T:
            print("R2T after %.2f s" % (time.monotonic() - t0), flush=True)
            answer_r2t(c, r, itt, a.lun)
        elif r.opcode == pc.OP_SCSI_RSP and r.itt == itt:
            if r.bhs[3] == 0x28:
                print("TASK SET FULL", flush=True)
                return 2
            print("STATUS 0x%02x" % r.bhs[3], flush=True)
            c.logout()
            return 0 if r.bhs[3] == 0 else 1
        elif r.opcode == pc.OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
            c.nop_reply(r)


class Trickler(threading.Thread):
    """One connection of the trickle attack (see --trickle)."""

    def __init__(self, args, idx):
        super().__init__(daemon=True)
        self.args, self.idx = args, idx
        self.r2ts = {}       # itt -> [ttt, offset, length, sent, datasn] of its R2T
        self.tsf = self.busy = 0
        self.answered = set()
        self.first_r2t = None
        self.settled = threading.Event()
        self.error = None

    def run(self):
        a = self.args
        try:
            host, port = a.portal.rsplit(":", 1)
            c = pc.Conn(host, int(port), timeout=30.0, source=a.source)
            c.login(a.target, initiator="iqn.2026-11.io.hotlun:trickle%d" % self.idx)
            itts = []
            for _ in range(a.cmds):
                itt = c.next_itt()
                c.send(c.scsi_bhs(pc.cdb_write10(0, a.size // 512), lun=a.lun,
                                  write_len=a.size, itt=itt))
                c.cmdsn += 1
                itts.append(itt)
            last_news = time.monotonic()
            next_drip = time.monotonic() + a.trickle
            while True:
                now = time.monotonic()
                if not self.settled.is_set() and (
                        len(self.r2ts) + len(self.answered) >= len(itts) or
                        now - last_news > a.settle):
                    self.settled.set()
                if now >= next_drip:
                    # 512 valid bytes for every R2T held: data, but hardly any
                    out = []
                    for itt, r in self.r2ts.items():
                        if r[3] + 512 < r[2]:
                            out.append(data_out(c, itt, r[0], r[4], r[1] + r[3], 512,
                                                False, a.lun))
                            r[3] += 512
                            r[4] += 1
                    if out:
                        c.send_raw(b"".join(out))
                    next_drip = now + a.trickle
                try:
                    r = c.recv(timeout=max(0.05, min(next_drip - now, 1.0)))
                except pc.Timeout:
                    continue
                last_news = time.monotonic()
                if r.opcode == pc.OP_R2T:
                    if self.first_r2t is None:
                        self.first_r2t = time.monotonic()
                    self.r2ts[r.itt] = [r.u32(20), r.u32(40), r.u32(44), 0, 0]
                elif r.opcode == pc.OP_SCSI_RSP:
                    self.answered.add(r.itt)
                    self.r2ts.pop(r.itt, None)
                    if r.bhs[3] == 0x28:
                        self.tsf += 1
                    elif r.bhs[3] == 0x08:
                        self.busy += 1
                elif r.opcode == pc.OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
                    c.nop_reply(r)
        except pc.Closed:
            t = time.monotonic() - self.first_r2t if self.first_r2t else -1.0
            say("CLOSED conn=%d held=%d after=%.1f" % (self.idx, len(self.r2ts), t))
        except Exception as e:  # noqa: BLE001 - reported by main
            self.error = "%s: %s" % (type(e).__name__, e)
            say("error: conn %d: %s" % (self.idx, self.error), err=True)
        finally:
            self.settled.set()


def trickle(a):
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    ts = [Trickler(a, i) for i in range(a.conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.settled.wait()
    say("READY conns=%d holding=%d held_cmds=%d task_set_full=%d busy=%d errors=%d" % (
        a.conns, sum(1 for t in ts if t.r2ts), sum(len(t.r2ts) for t in ts), sum(t.tsf for t in ts),
        sum(t.busy for t in ts), sum(1 for t in ts if t.error)))
    while True:
        time.sleep(3600)  # the threads trickle until SIGTERM


def small(a):
    c = session(a, "small")
    ok = True
    for edtl, imm in ((4096, 4096), (65536, 0)):
        t0 = time.monotonic()
        retries = 0
        while True:
            st = write_once(c, a, edtl, imm, t0 + a.bound)
            if st in (0x08, 0x28) and time.monotonic() - t0 < a.bound:
                retries += 1
                time.sleep(0.05)
                continue
            break
        took = time.monotonic() - t0
        print("SMALL %d STATUS %s after %.2f s (%d retries)" % (
            edtl, "none" if st is None else "0x%02x" % st, took, retries), flush=True)
        ok = ok and st == 0 and took <= a.bound
    return 0 if ok else 1


def write_once(c, a, edtl, imm, deadline):
    """One WRITE(10) at LBA 8192: imm bytes immediate, the rest by R2T. Its status, or None."""
    itt = c.next_itt()
    c.send(c.scsi_bhs(pc.cdb_write10(8192, edtl // 512), lun=a.lun, write_len=edtl, itt=itt),
           CHUNK[:imm])
    c.cmdsn += 1
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            r = c.recv(timeout=left)
        except pc.Timeout:
            return None
        if r.opcode == pc.OP_R2T and r.itt == itt:
            answer_r2t(c, r, itt, a.lun)
        elif r.opcode == pc.OP_SCSI_RSP and r.itt == itt:
            return r.bhs[3]
        elif r.opcode == pc.OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
            c.nop_reply(r)


if __name__ == "__main__":
    sys.exit(main())
