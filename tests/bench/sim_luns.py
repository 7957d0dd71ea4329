#!/usr/bin/env python3
"""sim_luns.py VSCSI OUTDIR - multi-LUN traces for hotlun-sim from one vscsi v1 trace.

hotlun-sim models several LUNs only through MSR Cambridge CSV (one LUN per
hostname and disk number); the one real trace we have is a single vscsi disk.
This writes, in OUTDIR:

  one.csv     the trace as MSR, all on one disk (replays exactly as the vscsi)
  split2.csv  the same requests on 2 disks, cut at the median read offset
              (1 MiB aligned); offsets kept, so the blocks are the same as
              in one.csv and only the LUN ids differ
  split4.csv  likewise, 4 disks cut at the read offset quartiles
  two_vms.csv two disks: the trace, and the trace started half way through
              (wrapped), interleaved request by request

split2/split4 against one.csv isolate what the core does differently with
several LUNs (docs/cache-policy.md, "Several LUNs").
"""
import os
import struct
import sys

READ_OPS = (0x08, 0x28, 0xa8, 0x88)
WRITE_OPS = (0x0a, 0x2a, 0xaa, 0x8a)
M = 1 << 20


def load(path):
    data = open(path, 'rb').read()
    recs = []
    for i in range(0, len(data) - 31, 32):
        _serial, length, _sg, op, ver, lba, ts = struct.unpack_from('<IIIHHQQ', data, i)
        if ver >> 8 != 1 or not length:
            continue
        if op in READ_OPS:
            recs.append((ts, lba * 512, length, False))
        elif op in WRITE_OPS:
            recs.append((ts, lba * 512, length, True))
    return recs


def write(path, rows):
    with open(path, 'w') as f:
        f.write('Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n')
        for ts, disk, off, length, wr in rows:
            f.write('%d,vm,%d,%s,%d,%d,0\n' % (ts, disk, 'Write' if wr else 'Read', off, length))


def disk_of(off, cuts):
    return sum(1 for c in cuts if off >= c)


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: sim_luns.py VSCSI OUTDIR')
    recs = load(sys.argv[1])
    if not recs:
        sys.exit('sim_luns.py: no vscsi v1 records in ' + sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    reads = sorted(r[1] for r in recs if not r[3])

    def quantile(p):
        return reads[int(len(reads) * p)] // M * M

    write(os.path.join(out, 'one.csv'), [(ts, 0, o, n, w) for ts, o, n, w in recs])
    for name, cuts in (('split2.csv', [quantile(0.5)]),
                       ('split4.csv', [quantile(0.25), quantile(0.5), quantile(0.75)])):
        # a request across a cut stays on the disk of its start (offsets are kept)
        write(os.path.join(out, name), [(ts, disk_of(o, cuts), o, n, w) for ts, o, n, w in recs])
    n, half, rows = len(recs), len(recs) // 2, []
    for i in range(n):
        _, o, ln, w = recs[i]
        rows.append((2 * i, 0, o, ln, w))
        _, o, ln, w = recs[(i + half) % n]
        rows.append((2 * i + 1, 1, o, ln, w))
    write(os.path.join(out, 'two_vms.csv'), rows)


if __name__ == '__main__':
    main()
