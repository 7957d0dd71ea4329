#!/usr/bin/env python3
"""cache-trace.py - read the cache traces hotlund writes with HOTLUN_CACHE_TRACE=DIR.

Every process of a run (a hotlund restarted after kill -9 is a new one)
leaves DIR/cache-trace.PID; this merges them by time and prints the events
you ask for, one per line, times in seconds from the first event.

  cache-trace.py DIR --slot 145               everything that touched device slot 145
  cache-trace.py DIR --block 670 --block 493  ... cache blocks 670 and 493
  cache-trace.py DIR --slot 145 --block 493 --pid 13607 --from 12.2 --to 12.3
  cache-trace.py DIR --summary                events per process and kind

A slot's history with its block's shows crash-ordering bugs: which process
wrote which block into the slot, and which record (RECORD: snapshotted by
a sync, PERSIST: durable; RESTORE: found at the next start) claimed what.
The file format is described in src/cache/engine/cache_trace.h.
"""
import argparse
import collections
import glob
import os
import struct
import sys

HDR = 64
REC = struct.Struct('<QIBBHIIQQQ')
EVENTS = {1: 'START', 2: 'SUB', 3: 'DONE', 4: 'RESTORE', 5: 'RECORD', 6: 'SYNC',
          7: 'PERSIST', 8: 'PROMOTE', 9: 'RAM'}
SUBS = ['HIT', 'RUN', 'RETRY', 'FILL', 'WRITE', 'SKIPPED', 'BUF', 'PHIT', 'RMW']
NO_BLOCK = 2**64 - 1


def load(d):
    recs = []
    for path in sorted(glob.glob(os.path.join(d, 'cache-trace.*'))):
        with open(path, 'rb') as f:
            hdr = f.read(HDR)
            if len(hdr) < 32 or hdr[:8] != b'HLCTRACE':
                sys.exit('%s: not a hotlun cache trace' % path)
            _, size, used, cap = struct.unpack_from('<IIQQ', hdr, 8)
            if size != REC.size:
                sys.exit('%s: record size %d, expected %d' % (path, size, REC.size))
            data = f.read(min(used, cap) * REC.size)
        for off in range(0, len(data) - REC.size + 1, REC.size):
            r = REC.unpack_from(data, off)
            if r[0]:  # ns == 0: the writer died before finishing it
                recs.append(r)
    recs.sort(key=lambda r: r[0])
    return recs


def describe(r):
    ns, pid, ev, kind, lun, slot, aux, block, a, b = r
    name = EVENTS.get(ev, str(ev))
    blk = '-' if block == NO_BLOCK else str(block)
    if ev in (2, 3):
        what = SUBS[kind & 0x7f] if (kind & 0x7f) < len(SUBS) else str(kind & 0x7f)
        what += ' write' if kind & 0x80 else ' read'
        tail = 'at +%d len %d' % (a, b)
        tail += (' ticket %d' % aux) if ev == 2 else (' result %d' % (aux - 2**32 if aux >= 2**31 else aux))
        return '%-8s %-12s lun %d slot %-5d block %-8s %s' % (name, what, lun, slot, blk, tail)
    if ev in (4, 5):
        extra = ' (dropped)' if ev == 4 and aux else ''
        return '%-8s %-12s lun %d slot %-5d block %-8s valid %016x gen %d%s' % (
            name, '', lun, slot, blk, a, b, extra)
    if ev == 6:
        return '%-8s %-12s %d page(s)%s' % (name, 'end' if kind else 'begin', a,
                                            (' result %d' % (aux - 2**32 if aux >= 2**31 else aux)) if kind else '')
    if ev == 7:
        return '%-8s %-12s page %d (slots from %d) epoch %d' % (name, '', aux, slot, a)
    if ev == 8:
        return '%-8s %-12s lun %d slot %-5d block %-8s from window slot %d, sectors %d+%d' % (
            name, '', lun, slot, blk, aux, a, b)
    if ev == 9:
        return '%-8s %-12s lun %d slot %-5d block %-8s %d+%d' % (
            name, 'update' if kind else 'fill', lun, slot, blk, a, b)
    if ev == 1:
        return '%-8s %-12s block size %d' % (name, '', block)
    return '%-8s %r' % (name, r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('dir')
    ap.add_argument('--slot', type=int, action='append', default=[])
    ap.add_argument('--block', type=int, action='append', default=[])
    ap.add_argument('--pid', type=int)
    ap.add_argument('--from', dest='t0', type=float)
    ap.add_argument('--to', dest='t1', type=float)
    ap.add_argument('--summary', action='store_true')
    o = ap.parse_args()
    recs = load(o.dir)
    if not recs:
        sys.exit('no trace records in %s' % o.dir)
    start = recs[0][0]
    if o.summary:
        count = collections.Counter((r[1], EVENTS.get(r[2], r[2])) for r in recs)
        for (pid, ev), n in sorted(count.items()):
            print('%8d %-8s %d' % (pid, ev, n))
        return
    for r in recs:
        t = (r[0] - start) / 1e9
        if o.pid and r[1] != o.pid:
            continue
        if (o.t0 is not None and t < o.t0) or (o.t1 is not None and t > o.t1):
            continue
        ev, slot, block = r[2], r[5], r[7]
        always = ev in (1, 6, 7)  # process starts and syncs frame everything else
        hit = (slot in o.slot and ev in (2, 3, 4, 5, 8)) or block in o.block
        if (o.slot or o.block) and not (always or hit):
            continue
        print('%11.6f %7d  %s' % (t, r[1], describe(r)))


if __name__ == '__main__':
    try:
        main()
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
