#!/usr/bin/env python3
"""cpu_split.py - where a benchmark run's CPU time and interrupts went, per CPU.

usage: cpu_split.py NAME SNAP0 SNAP1 IOS DISK_VIRTIO

SNAP0 / SNAP1 are snapshots taken before and after the run by
hit_path.sh's sys_snap: /proc/stat, /proc/interrupts and /proc/softirqs
one after the other, then lines "spin CPU TICKS" (the NOHALT=1 busy loops,
which fill idle time and are not counted as busy) and "task NAME TICKS"
(utime + stime of the measured processes: hotlund, the client), and a line
"ns NANOSECONDS" (the clock). DISK_VIRTIO is the cache disk's virtio device
(e.g. virtio1): its queue interrupts are counted apart. IOS is the run's
I/O count.

Prints one line per CPU: busy % of the wall time (user + nice + system +
irq + softirq, less the busy loops), of which softirq and irq % as tick
accounting sees them (without CONFIG_IRQ_TIME_ACCOUNTING a hard interrupt
is charged to the task it interrupts; a softirq run at interrupt exit is
charged to softirq only when a tick lands in it), then per I/O: the cache
disk's interrupts, BLOCK and NET_RX softirqs, rescheduling and function
call IPIs; and one line with the tasks' CPU µs per I/O.
"""
import sys


def parse(path):
    stat, irqs, soft, spin, task, ns = {}, {}, {}, {}, {}, 0
    ncpu = 0
    section = "stat"
    with open(path) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "CPU0":
                ncpu = len(w)
                section = "irq" if section == "stat" else "soft"
                continue
            if w[0] == "spin":
                spin[int(w[1])] = spin.get(int(w[1]), 0) + int(w[2])
            elif w[0] == "task":
                task[w[1]] = int(w[2])
            elif w[0] == "ns":
                ns = int(w[1])
            elif section == "stat" and w[0].startswith("cpu") and w[0] != "cpu":
                stat[int(w[0][3:])] = [int(x) for x in w[1:]]
            elif section == "irq" and w[0].endswith(":"):
                counts = [int(x) for x in w[1:1 + ncpu] if x.isdigit()]
                name = w[0][:-1] if not w[0][:-1].isdigit() else w[-1]
                if len(counts) == ncpu:
                    irqs[name] = counts
            elif section == "soft" and w[0].endswith(":"):
                soft[w[0][:-1]] = [int(x) for x in w[1:1 + ncpu]]
    return stat, irqs, soft, spin, task, ns


def main():
    name, p0, p1, ios, virtio = sys.argv[1:6]
    ios = max(int(ios), 1)
    import os
    tck = os.sysconf("SC_CLK_TCK")
    s0, i0, f0, sp0, t0, n0 = parse(p0)
    s1, i1, f1, sp1, t1, n1 = parse(p1)
    secs = (n1 - n0) / 1e9
    wall = secs * tck
    disk = [k for k in i1 if k.startswith(virtio + "-") and "config" not in k]
    for cpu in sorted(s1):
        d = [b - a for a, b in zip(s0[cpu], s1[cpu])]
        user, nice, system, _idle, _iow, irq, softirq = d[:7]
        spun = sp1.get(cpu, 0) - sp0.get(cpu, 0)
        busy = user + nice + system + irq + softirq - spun

        def per_io(table, key):
            if key not in table[1]:
                return 0.0
            return (table[1][key][cpu] - table[0].get(key, [0] * (cpu + 1))[cpu]) / ios

        dirq = sum(per_io((i0, i1), k) for k in disk)
        print("%s cpu%d: busy %.0f%% (softirq %.0f%%, irq %.0f%%); per I/O: disk irqs %.3f, "
              "BLOCK %.3f, NET_RX %.3f, RES %.3f, CAL %.3f" %
              (name, cpu, 100 * busy / wall, 100 * softirq / wall, 100 * irq / wall, dirq,
               per_io((f0, f1), "BLOCK"), per_io((f0, f1), "NET_RX"),
               per_io((i0, i1), "RES"), per_io((i0, i1), "CAL")))
    tasks = ", ".join("%s %.1f" % (k, (t1[k] - t0.get(k, 0)) * 1e6 / tck / ios)
                      for k in sorted(t1))
    print("%s tasks CPU µs/IO: %s; %.1f s, %d I/Os" % (name, tasks, secs, ios))


if __name__ == "__main__":
    main()
