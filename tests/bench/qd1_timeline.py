#!/usr/bin/env python3
"""qd1_timeline.py - per-request stages of 4K QD1 reads from a perf trace.

Input: `perf script -F comm,tid,cpu,time,event,trace --ns` of a system-wide
`perf record -e` of the tracepoints that hit_path.sh's TIMELINE=1 lists
(syscalls, sock:sk_data_ready, io_uring, block, irq, sched). One request at a
time (QD1), so each request is a cycle between two submissions, and the
stages are times between tracepoints inside that cycle (relative times on
one clock: the machine's other load moves whole cycles, not the split).

usage: qd1_timeline.py MODE TRACE [TIDS...]
  MODE hit:      hotlund reads the cache device (TIDS: hotlund's threads,
                 then '--', then the client's threads)
  MODE uncached: hotlund reads the origin from the page cache (same TIDS)
  MODE fio:      fio's io_uring O_DIRECT reads (TIDS: none; comm "fio")
Prints a Markdown table: stage, median, p10, p90 (µs), cycles used.
"""
import re
import sys

LINE = re.compile(r'^\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(\S+):\s?(.*)$')


def load(path):
    evs = []
    with open(path, errors='replace') as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            comm, tid, cpu, t, name, rest = m.groups()
            evs.append((float(t) * 1e6, int(tid), int(cpu), name, rest, comm))
    evs.sort(key=lambda e: e[0])
    return evs


def ret(rest):
    try:
        return int(rest.split()[0], 16)
    except (ValueError, IndexError):
        return -1


def sector(rest):
    m = re.search(r'\) (\d+) \+ (\d+)', rest)
    return m.group(1) if m else None


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float('nan')
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def mean(xs):
    return sum(xs) / len(xs) if xs else float('nan')


def table(title, stages, rows, notes=()):
    print(f'{title}: {len(rows)} requests')
    print()
    print('| stage | median µs | p10 | p90 | mean |')
    print('| --- | ---: | ---: | ---: | ---: |')
    for i, s in enumerate(stages):
        xs = [r[i] for r in rows]
        print(f'| {s} | {pct(xs, .5):.1f} | {pct(xs, .1):.1f} | {pct(xs, .9):.1f} | {mean(xs):.1f} |')
    tot = [sum(r) for r in rows]
    print(f'| **cycle (sum)** | {pct(tot, .5):.1f} | {pct(tot, .1):.1f} | {pct(tot, .9):.1f} | {mean(tot):.1f} |')
    print()
    for n in notes:
        print(n)
    if notes:
        print()


def first(evs, i, end, pred):
    """Index of the first event in evs[i:end] matching pred, or None."""
    for j in range(i, end):
        if pred(evs[j]):
            return j
    return None


def target(evs, mode, dtids, ctids):
    # Cycles: client command send (sys_enter_sendto of a 48-byte PDU) to the next.
    starts = [i for i, e in enumerate(evs)
              if e[1] in ctids and e[3] == 'syscalls:sys_enter_sendto']
    if mode == 'hit':
        stages = ['client send -> command on hotlund\'s socket (sk_data_ready)',
                  'socket -> hotlund recvfrom returns',
                  'recvfrom -> io_uring_enter (iSCSI, SCSI, cache lookup)',
                  'io_uring_enter -> block_rq_issue',
                  'block_rq_issue -> io_uring_enter returns (virtio doorbell)',
                  'io_uring_enter returns -> device IRQ',
                  'device IRQ -> block_rq_complete',
                  'block_rq_complete -> CQE posted (io_uring_complete)',
                  'CQE posted -> sendmsg entered (reap, Data-In)',
                  'sendmsg (loopback TCP, client wake-up)',
                  'sendmsg returns -> client\'s next send (client)']
    else:
        stages = ['client send -> command on hotlund\'s socket (sk_data_ready)',
                  'socket -> hotlund recvfrom returns',
                  'recvfrom -> io_uring_enter (iSCSI, SCSI)',
                  'io_uring_enter (page-cache read, CQE posted inline)',
                  'io_uring_enter returns -> sendmsg entered',
                  'sendmsg (loopback TCP, client wake-up)',
                  'sendmsg returns -> client\'s next send (client)']
    rows = []
    kinds = []
    skipped = 0
    for a, b in zip(starts, starts[1:]):
        e = evs

        def nxt(i, pred):
            return first(e, i, b, pred)
        kind = 'spun'
        switches = []  # (index, slept) of the reactor leaving its CPU
        for j in range(a, b):
            x = e[j]
            if x[3] == 'sched:sched_switch':
                m = re.search(r'prev_pid=(\d+) .*prev_state=(\S+)', x[4])
                if m and int(m.group(1)) in dtids:
                    slept = m.group(2).startswith(('S', 'D'))
                    switches.append((j, slept))
                    kind = 'slept' if slept else ('preempted' if kind == 'spun' else kind)
        ready = nxt(a, lambda x: x[3] == 'sock:sk_data_ready' and x[1] in ctids)
        rcv = ready is not None and nxt(ready, lambda x: x[1] in dtids and
                                        x[3] == 'syscalls:sys_exit_recvfrom' and ret(x[4]) > 0)
        sub = rcv and nxt(rcv, lambda x: x[1] in dtids and
                          x[3] == 'syscalls:sys_enter_io_uring_enter')
        if not sub:
            skipped += 1
            continue
        tid = e[sub][1]
        sube = nxt(sub, lambda x: x[1] == tid and x[3] == 'syscalls:sys_exit_io_uring_enter')
        snd = sube and nxt(sube, lambda x: x[1] in dtids and x[3] == 'syscalls:sys_enter_sendmsg')
        sndx = snd and nxt(snd, lambda x: x[1] == e[snd][1] and x[3] == 'syscalls:sys_exit_sendmsg')
        if not sndx:
            skipped += 1
            continue
        t = lambda i: e[i][0]
        if mode == 'hit':
            iss = nxt(sub, lambda x: x[1] == tid and x[3] == 'block:block_rq_issue')
            if not iss or iss > sube:
                skipped += 1
                continue
            sec = sector(e[iss][4])
            cmp_ = nxt(iss, lambda x: x[3] == 'block:block_rq_complete' and sector(x[4]) == sec)
            if not cmp_:
                skipped += 1
                continue
            irq = None
            for j in range(cmp_ - 1, iss, -1):
                if e[j][3] == 'irq:irq_handler_entry' and e[j][2] == e[cmp_][2]:
                    irq = j
                    break
            cqe = nxt(cmp_, lambda x: x[3] == 'io_uring:io_uring_complete' and x[1] in dtids)
            if irq is None or not cqe or cqe > snd or irq < sube:
                skipped += 1
                continue
            if kind == 'slept':
                kind = 'slept-io' if any(sl and sube < j < cqe for j, sl in switches) else \
                    'slept-cmd'
            kinds.append(kind)
            rows.append([t(ready) - t(a), t(rcv) - t(ready), t(sub) - t(rcv), t(iss) - t(sub),
                         t(sube) - t(iss), t(irq) - t(sube), t(cmp_) - t(irq), t(cqe) - t(cmp_),
                         t(snd) - t(cqe), t(sndx) - t(snd), t(b) - t(sndx)])
        else:
            kinds.append(kind)
            rows.append([t(ready) - t(a), t(rcv) - t(ready), t(sub) - t(rcv), t(sube) - t(sub),
                         t(snd) - t(sube), t(sndx) - t(snd), t(b) - t(sndx)])
    notes = []
    for k, what in (('spun', 'the reactor never left the CPU'),
                    ('slept', 'the reactor slept (epoll_wait past its busy-poll window)'),
                    ('slept-io', 'the reactor slept during the device read (past its busy-poll window)'),
                    ('slept-cmd', 'the reactor slept only while waiting for the command'),
                    ('preempted', 'the reactor was preempted (another task ran on its CPU)')):
        tot = [sum(r) for r, kk in zip(rows, kinds) if kk == k]
        if tot:
            notes.append(f'- {what}: {len(tot)} cycles ({100 * len(tot) / len(rows):.0f}%), '
                         f'cycle median {pct(tot, .5):.1f} µs, mean {mean(tot):.1f}')
    return stages, rows, skipped, notes


def fio(evs):
    fe = [i for i, x in enumerate(evs) if x[5] == 'fio']
    starts = [i for i in fe if evs[i][3] == 'syscalls:sys_enter_io_uring_enter' and
              re.search(r'to_submit: 0x0*1,', evs[i][4])]
    stages = ['io_uring_enter -> block_rq_issue',
              'block_rq_issue -> io_uring_enter returns (virtio doorbell)',
              'io_uring_enter returns -> device IRQ (fio sleeps in io_uring_enter)',
              'device IRQ -> block_rq_complete',
              'block_rq_complete -> CQE posted (fio woken, task work)',
              'CQE posted -> io_uring_enter returns',
              'io_uring_enter returns -> next submission (fio)']
    rows = []
    skipped = 0
    for a, b in zip(starts, starts[1:]):
        e = evs
        tid = e[a][1]

        def nxt(i, pred):
            return first(e, i, b, pred)
        iss = nxt(a, lambda x: x[1] == tid and x[3] == 'block:block_rq_issue')
        sube = iss and nxt(iss, lambda x: x[1] == tid and x[3] == 'syscalls:sys_exit_io_uring_enter')
        if not sube:
            skipped += 1
            continue
        sec = sector(e[iss][4])
        cmp_ = nxt(iss, lambda x: x[3] == 'block:block_rq_complete' and sector(x[4]) == sec)
        cqe = cmp_ and nxt(cmp_, lambda x: x[1] == tid and x[3] == 'io_uring:io_uring_complete')
        wx = cqe and nxt(cqe, lambda x: x[1] == tid and x[3] == 'syscalls:sys_exit_io_uring_enter')
        irq = None
        if cmp_:
            for j in range(cmp_ - 1, iss, -1):
                if e[j][3] == 'irq:irq_handler_entry' and e[j][2] == e[cmp_][2]:
                    irq = j
                    break
        if not wx or irq is None or irq < sube:
            skipped += 1
            continue
        t = lambda i: e[i][0]
        rows.append([t(iss) - t(a), t(sube) - t(iss), t(irq) - t(sube), t(cmp_) - t(irq),
                     t(cqe) - t(cmp_), t(wx) - t(cqe), t(b) - t(wx)])
    return stages, rows, skipped, ()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    mode, path = sys.argv[1], sys.argv[2]
    evs = load(path)
    if mode == 'fio':
        stages, rows, skipped, notes = fio(evs)
    elif mode in ('hit', 'uncached'):
        rest = sys.argv[3:]
        if '--' not in rest:
            sys.exit('hit/uncached want hotlund TIDS -- client TIDS')
        k = rest.index('--')
        dtids = {int(x) for x in rest[:k]}
        ctids = {int(x) for x in rest[k + 1:]}
        stages, rows, skipped, notes = target(evs, mode, dtids, ctids)
    else:
        sys.exit(__doc__)
    table(f'{mode} ({skipped} cycles skipped: events missing or out of order)', stages, rows, notes)


if __name__ == '__main__':
    main()
