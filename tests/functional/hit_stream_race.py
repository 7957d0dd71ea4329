#!/usr/bin/env python3
"""hit_stream_race.py - streamed big hits checked PDU by PDU, with writes to
the same blocks before and during each read (hit_stream_race.sh).

One session with header and data digests (CRC32C), our
MaxRecvDataSegmentLength and MaxBurstLength as given (512 and 20480: a
Data-In per sector, a sequence every 40). ROUNDS ranges of BLOCKS sectors
from LBA on (a range apart) are read twice each (a miss: the cache fills
it, then a hit), then, in
round r, on range r (a range of its own, so its READ plans all hits):
  1. one sector in every cache block is written (WRITE(10), immediate
     data, pipelined), all answered GOOD, and SETTLE/2 s later (their
     updates installed: the blocks are hits again) the READ is sent: it
     must return these bytes (writes that completed before the READ
     arrived; in the update buffer they are laid over each chunk);
  2. the READ of the whole range is sent, and right behind it a WRITE to
     another sector of every cache block (racing the READ's chunks): those
     sectors may hold the old or the new bytes, every other sector must be
     exactly what the model says (the image's bytes, then the writes).
Every READ is checked as it comes: DataSN 0, 1, ... in order, offsets
contiguous from 0, no PDU over MaxRecvDataSegmentLength, the F bit exactly
where a sequence of MaxBurstLength ends and on the last PDU, the S bit only
on the last PDU (or a SCSI Response with ExpDataSN = the Data-In count),
GOOD, no residual; every digest (the client checks them on receipt).
Last, every range is read again and must equal the model, and the model
the origin image. Prints "racing reads N" (the rounds' READs), "streamed N"
(the hits that must have gone out streamed: the second warm-up reads and
the racing ones) and "reads N" (every READ after the fills) for the caller.
"""

import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pdu_client as pc  # noqa: E402

SECT = 512


def pattern(tag, lba):
    """512 bytes that name the write (tag) and the sector."""
    return struct.pack(">IIQ", 0x48535452, tag, lba) * (SECT // 16)


class Race:
    def __init__(self, args):
        self.a = args
        self.n = args.blocks
        self.base = args.lba   # the current range's first LBA
        # ranges a gap apart: contiguous reads over 1 MiB would be a sequential
        # stream, kept out of the SSD (docs/cache-policy.md, rule 6)
        self.stride = 2 * self.n
        span = self.stride * (args.rounds - 1) + self.n
        with open(args.image, "rb") as f:
            f.seek(args.lba * SECT)
            img = f.read(span * SECT)
        if len(img) != span * SECT:
            raise AssertionError("image shorter than the ranges")
        # the model: every sector's bytes, indexed from args.lba
        self.all = [img[i * SECT:(i + 1) * SECT] for i in range(span)]
        host, _, port = args.portal.rpartition(":")
        self.c = pc.Conn(host.strip("[]"), int(port), timeout=30.0)
        self.c.login(args.target, digest=True, mrdsl=args.mrdsl, burst=args.burst)
        k = self.c.target_keys
        if int(k.get("MaxBurstLength", 0)) != args.burst:
            raise AssertionError("MaxBurstLength not %d: %r" % (args.burst, k))
        self.c.clear_ua(args.lun)
        self.spb = args.cache_block // SECT   # sectors per cache block

    def send(self, cdb, read_len=0, data=b""):
        c = self.c
        bhs = c.scsi_bhs(cdb, self.a.lun, read_len, len(data))
        itt = c.itt
        c.send(bhs, data)
        c.cmdsn += 1
        return itt

    def collect(self, itts):
        """PDUs for each itt until its command ended: {itt: [pdu, ...]}."""
        out = {i: [] for i in itts}
        left = set(itts)
        while left:
            r = self.c.recv()
            if r.itt not in out:
                if r.opcode == pc.OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
                    self.c.nop_reply(r)
                    continue
                if r.opcode == pc.OP_ASYNC:
                    continue
                raise AssertionError("unexpected PDU %r" % r)
            out[r.itt].append(r)
            if r.opcode == pc.OP_SCSI_RSP or (r.opcode == pc.OP_DATA_IN and r.flags & 0x01):
                left.discard(r.itt)
            elif r.opcode != pc.OP_DATA_IN:
                raise AssertionError("unexpected PDU %r" % r)
        return out

    def check_read(self, pdus, what):
        """The Data-In sequence of one READ of the range: the data."""
        a = self.a
        total = self.n * SECT
        data = bytearray()
        in_burst = 0
        ndin = 0
        for i, r in enumerate(pdus):
            last = i == len(pdus) - 1
            if r.opcode == pc.OP_SCSI_RSP:
                if not last:
                    raise AssertionError("%s: SCSI Response before Data-In" % what)
                if r.bhs[2] or r.bhs[3]:
                    raise AssertionError("%s: response %d status 0x%02x" %
                                         (what, r.bhs[2], r.bhs[3]))
                if r.u32(36) != ndin:
                    raise AssertionError("%s: ExpDataSN %d, %d Data-In sent" %
                                         (what, r.u32(36), ndin))
                if r.flags & 0x06 or r.u32(44):
                    raise AssertionError("%s: a residual in the response" % what)
                break
            dsn, off, ln = r.u32(36), r.u32(40), len(r.data)
            if dsn != ndin:
                raise AssertionError("%s: DataSN %d where %d was due" % (what, dsn, ndin))
            if off != len(data):
                raise AssertionError("%s: offset %d where %d was due" % (what, off, len(data)))
            if not 0 < ln <= a.mrdsl:
                raise AssertionError("%s: Data-In of %d bytes (MRDSL %d)" % (what, ln, a.mrdsl))
            data += r.data
            ndin += 1
            in_burst += ln
            end = len(data) == total or in_burst == a.burst
            if bool(r.flags & 0x80) != end:
                raise AssertionError("%s: F bit %s at offset %d (sequence at %d of %d)" %
                                     (what, bool(r.flags & 0x80), off, in_burst, a.burst))
            if in_burst > a.burst:
                raise AssertionError("%s: a sequence over MaxBurstLength" % what)
            if end:
                in_burst = 0
            if r.flags & 0x01:
                if not last or len(data) != total:
                    raise AssertionError("%s: S bit at offset %d" % (what, off))
                if r.bhs[3] != 0 or r.flags & 0x06:
                    raise AssertionError("%s: status 0x%02x flags 0x%02x" %
                                         (what, r.bhs[3], r.flags))
        if len(data) != total:
            raise AssertionError("%s: %d bytes of %d" % (what, len(data), total))
        return bytes(data)

    def compare(self, data, racing, what):
        """Every sector the model's, but racing ones {i: new} may be old or new."""
        self.model = self.all[self.base - self.a.lba:self.base - self.a.lba + self.n]
        for i in range(self.n):
            got = data[i * SECT:(i + 1) * SECT]
            if got == self.model[i]:
                continue
            if i in racing and got == racing[i]:
                continue
            kind = "a racing sector" if i in racing else "a sector"
            old = [t for t, m in enumerate(self.model) if m == got]
            raise AssertionError("%s: %s at lba %d holds neither its data nor a racing write's"
                                 " (%s)" % (what, kind, self.a.lba + i,
                                            "the bytes of lba %d" % (self.a.lba + old[0])
                                            if old else "unknown bytes"))

    def writes(self, round_, salt):
        """{sector index: bytes}: one sector per cache block."""
        out = {}
        for j in range(self.n // self.spb):
            i = j * self.spb + (round_ * 29 + j * 7 + salt) % self.spb
            out[i] = pattern(round_ * 4 + salt, self.base + i)
        return out

    def write_all(self, w):
        return [self.send(pc.cdb_write10(self.base + i, 1), data=d) for i, d in sorted(w.items())]

    def check_writes(self, res, itts, what):
        for itt in itts:
            r = res[itt][-1]
            if r.opcode != pc.OP_SCSI_RSP or r.bhs[3] != 0:
                raise AssertionError("%s: a WRITE failed: %r" % (what, r))

    def read(self, what, racing=None):
        itt = self.send(pc.cdb_read10(self.base, self.n), read_len=self.n * SECT)
        wi = self.write_all(racing) if racing else []
        res = self.collect([itt] + wi)
        self.check_writes(res, wi, what)
        data = self.check_read(res[itt], what)
        self.compare(data, racing or {}, what)
        return data

    def at(self, r):
        self.base = self.a.lba + r * self.stride

    def run(self):
        a = self.a
        for warm in ("a miss", "a hit"):
            for r in range(a.rounds):
                self.at(r)
                self.read("the first reads of range %d (%s)" % (r, warm))
            # the fills land; a block the RAM window took is promoted to the SSD by
            # its next hit: from here on the ranges are hits on the cache device
            time.sleep(a.settle)
        reads = 0
        for r in range(a.rounds):
            self.at(r)
            before = self.writes(r, 1)
            wi = self.write_all(before)
            self.check_writes(self.collect(wi), wi, "round %d" % r)
            self.model_update(before)
            # the updates land in the slots (or the update buffer): until they
            # have, the blocks are PARTIAL and the READ would not be streamed
            time.sleep(a.settle / 2)
            racing = self.writes(r, 3)
            for i in before:
                racing.pop(i, None)
            t0 = time.monotonic()
            self.read("round %d" % r, racing)
            print("round %d ms %d" % (r, (time.monotonic() - t0) * 1000))
            reads += 1
            self.model_update(racing)
        time.sleep(a.settle)
        for r in range(a.rounds):
            self.at(r)
            self.read("the last read of range %d" % r)
        with open(a.image, "rb") as f:
            f.seek(a.lba * SECT)
            img = f.read(len(self.all) * SECT)
        if img != b"".join(self.all):
            raise AssertionError("the origin image does not hold what was written")
        self.c.logout()
        self.c.close()
        # the hits that must have gone out streamed: the second warm reads and
        # the racing ones (a last read may be PARTIAL: a racing write dropped
        # an update), out of every READ after the fills
        print("racing reads %d" % reads)
        print("streamed %d" % (reads + a.rounds))
        print("reads %d" % (reads + 2 * a.rounds))
        return 0

    def model_update(self, w):
        for i, d in w.items():
            self.all[self.base - self.a.lba + i] = d


def abort_runs(args):
    """--abort: streamed READs cut short while their chunks are held.

    The range is warmed (a miss, then a hit), then: a READ aborted (ABORT
    TASK) as soon as its first Data-In is in; a READ whose connection is
    closed as soon as its first Data-In is in. Checks: the TMF answers
    "function complete", nothing of the aborted task follows its response
    (a NOP round trip after it), and a new session reads the range right.
    Run with HOTLUN_TEST_CACHE_DEV_READ_STAGGER so the chunks are still
    out when the abort or the close comes (under ASan: nothing freed early).
    """
    args.rounds = 1
    race = Race(args)
    race.read("warm-up (a miss)")
    time.sleep(args.settle)
    race.read("warm-up (a hit)")
    c = race.c
    n = race.n

    def first_data_in(itt):
        while True:
            r = c.recv()
            if r.itt == itt and r.opcode == pc.OP_DATA_IN and not r.flags & 0x01:
                return r
            if r.opcode == pc.OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
                c.nop_reply(r)
                continue
            raise AssertionError("abort: waiting for the first Data-In, got %r" % r)

    # 1. ABORT TASK with chunks out
    cmdsn = c.cmdsn
    itt = race.send(pc.cdb_read10(args.lba, n), read_len=n * SECT)
    first_data_in(itt)
    b = bytearray(48)
    b[0] = 0x40 | pc.OP_TMF
    b[1] = 0x80 | 1   # ABORT TASK
    struct.pack_into(">H", b, 8, args.lun)
    struct.pack_into(">I", b, 16, c.next_itt())
    tmf_itt = c.itt
    struct.pack_into(">I", b, 20, itt)
    struct.pack_into(">I", b, 24, c.cmdsn)
    struct.pack_into(">I", b, 28, c.exp_statsn)
    struct.pack_into(">I", b, 32, cmdsn)
    c.send(b)
    datain = 1
    while True:
        r = c.recv()
        if r.itt == itt and r.opcode == pc.OP_DATA_IN:
            datain += 1
            continue
        if r.itt == tmf_itt and r.opcode == pc.OP_TMF_RSP:
            if r.bhs[2] != 0:
                raise AssertionError("ABORT TASK answered %d, not function complete" % r.bhs[2])
            break
        if r.opcode == pc.OP_NOP_IN and r.u32(20) != 0xFFFFFFFF:
            c.nop_reply(r)
            continue
        raise AssertionError("abort: %r before the TMF response" % r)
    # anything of the aborted task after its TMF response would come before this NOP-In
    c.ping(b"after the abort")
    print("abort: %d Data-In before the TMF response, none after" % datain)

    # 2. the connection closed with chunks out
    itt = race.send(pc.cdb_read10(args.lba, n), read_len=n * SECT)
    first_data_in(itt)
    c.close()
    print("close: connection closed after the first Data-In")
    time.sleep(args.settle)

    # 3. a new session reads the range right
    race2 = Race(args)
    race2.read("after the abort and the close")
    race2.c.logout()
    race2.c.close()
    print("after: a new session read the range right")
    return 0


def main():
    ap = pc.lun_args(__doc__)
    ap.add_argument("--image", required=True, help="the origin file (512-byte sectors)")
    ap.add_argument("--lba", type=int, required=True)
    ap.add_argument("--blocks", type=int, default=2048)
    ap.add_argument("--cache-block", type=int, default=65536)
    ap.add_argument("--mrdsl", type=int, default=512)
    ap.add_argument("--burst", type=int, default=20480)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--abort", action="store_true",
                    help="READs cut short by ABORT TASK and by a closed connection")
    args = ap.parse_args()
    try:
        return abort_runs(args) if args.abort else Race(args).run()
    except (AssertionError, pc.Closed, pc.Timeout, OSError) as e:
        print("error: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
