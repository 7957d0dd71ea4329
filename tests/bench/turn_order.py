#!/usr/bin/env python3
"""turn_order.py - how long a reactor turn's device submission waits behind
the turn's sends, from a `perf trace` of hotlund's epoll_wait, recvfrom,
read, sendmsg and io_uring_enter (tests/bench/hit_ab.sh TRACE=1).

A turn of a thread runs from the return of an epoll_wait that reported
events (> 0) to the next epoll_wait. Commands received in a turn have their
device reads submitted by one io_uring_enter at the turn's end (a turn hook,
file_uring.c), and the responses the turn's completions queued go out with
one sendmsg per connection (another turn hook); when the send runs first,
the reads wait for it, and the device idles meanwhile if nothing else is in
flight.

usage: turn_order.py TRACE_FILE
prints one line: turns, turns with an io_uring_enter, how many of those
entered after a sendmsg of the same turn and the mean time those spent in
sendmsg before it (µs), the mean sendmsg duration and size, and the mean
bytes a recvfrom took (a SCSI READ command is one 48-byte PDU: how many
commands the client sent in one burst).
"""
import re
import sys

LINE = re.compile(r'^\s*([\d.]+) \(\s*([\d.]*)\s*(?:ms)?\): \S+?/(\d+) (\w+)\((.*)$')
RET = re.compile(r'\)\s+= (-?\d+)')


def main():
    turns = {}  # tid -> list of calls of the current turn
    nturn = nenter = nafter = 0
    wait_us = 0.0
    sends = send_us = send_bytes = 0
    recvs = recv_bytes = 0

    def close(calls):
        nonlocal nturn, nenter, nafter, wait_us
        nturn += 1
        sent = 0.0
        after = False
        for name, dur, _ in calls:
            if name == 'sendmsg':
                sent += dur
                after = True
            elif name == 'io_uring_enter':
                nenter += 1
                if after:
                    nafter += 1
                    wait_us += sent * 1000
                break

    with open(sys.argv[1], errors='replace') as f:
        for ln in f:
            m = LINE.match(ln)
            if not m:
                continue
            r = RET.search(m.group(5))
            # an unfinished call (perf trace's "..."): no duration, no result
            dur, tid, name = float(m.group(2) or 0), m.group(3), m.group(4)
            ret = int(r.group(1)) if r else 0
            if name == 'epoll_wait':
                if tid in turns and turns[tid] is not None:
                    close(turns[tid])
                turns[tid] = [] if ret > 0 else None
                continue
            if name == 'recvfrom' and ret > 0:
                recvs += 1
                recv_bytes += ret
            if name == 'sendmsg' and ret > 0:
                sends += 1
                send_us += dur * 1000
                send_bytes += ret
            if turns.get(tid) is not None:
                turns[tid].append((name, dur, ret))
    print('turns %d, with an io_uring_enter %d, of those after a sendmsg %d (%.0f%%) '
          'waiting %.1f µs in sends; sendmsg: %d, %.1f µs, %.0f KiB each; '
          'recvfrom: %d, %.0f bytes each' %
          (nturn, nenter, nafter, 100.0 * nafter / nenter if nenter else 0,
           wait_us / nafter if nafter else 0, sends, send_us / sends if sends else 0,
           send_bytes / 1024 / sends if sends else 0, recvs,
           recv_bytes / recvs if recvs else 0))


if __name__ == '__main__':
    main()
