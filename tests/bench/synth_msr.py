#!/usr/bin/env python3
# synth_msr.py SEED [4k] > trace.csv - a synthetic MSR Cambridge CSV for
# hotlun-sim --format msr (an out-of-sample check beside cloudPhysicsIO,
# docs/cache-policy.md "16 bytes again", third search): 250,000 requests
# on one disk, reads (85%) and writes of 60,000 extents of 4-64 KiB whose
# popularity is zipf-like (exponent 0.7-1.0 by SEED), and sequential scans
# of 256 KiB-4 MiB in 64 KiB reads (2% of the requests start one). With
# "4k": every extent is 4 KiB and there are no scans (random 4 KiB reads,
# no spatial locality). The same SEED gives the same trace.
import bisect
import random
import sys

seed = int(sys.argv[1])
only4k = len(sys.argv) > 2 and sys.argv[2] == "4k"
r = random.Random(seed)
NEXT = 60000
sizes = [4096] if only4k else [4096, 4096, 8192, 8192, 16384, 32768, 65536]
ext = [(r.randrange(0, 1 << 22) * 4096, r.choice(sizes)) for _ in range(NEXT)]
expo = 0.7 + 0.3 * (seed % 3) / 2
cum, s = [], 0.0
for i in range(NEXT):
    s += 1.0 / (i + 1) ** expo
    cum.append(s)
t = 128166372000000000
scan = None
out = sys.stdout
for i in range(250000):
    t += 1000
    if scan is not None:
        off, left = scan
        out.write("%d,h,0,Read,%d,65536,100\n" % (t, off))
        scan = (off + 65536, left - 1) if left > 1 else None
        continue
    if not only4k and r.random() < 0.02:
        scan = (r.randrange(0, 1 << 22) * 4096, r.randrange(4, 64))
        continue
    off, ln = ext[bisect.bisect_left(cum, r.random() * s)]
    typ = "Write" if r.random() < 0.15 else "Read"
    out.write("%d,h,0,%s,%d,%d,100\n" % (t, typ, off, ln))
