#!/usr/bin/env python3
"""io_counts.py - hit_path.sh's COUNTS=1 table: per I/O counts of the kernel
work behind one read, side by side for fio and hotlund.

usage: io_counts.py CELL FILE...   (FILE: "key value" lines of count_window,
plus "iops N"; the column is named after the file's name past "cnt-")

Counts of the perf stat window are divided by the workload's I/Os in it,
its SQEs (every read here is one SQE: fio's, a 4K hit's device read, an
uncached read from the page cache); the profile's shares are turned into
µs per I/O with the CPU per I/O of that window."""
import sys

ROWS = [
    ("IOPS (whole run)", "iops", None),
    ("CPU µs per I/O, the measured process (/proc/PID/stat)", "cpu_us", "us"),
    ("CPU µs per I/O, the whole machine (/proc/stat: every task and interrupt)", "machine_us", "us"),
    ("io_uring_enter calls", "p:syscalls:sys_enter_io_uring_enter", "io"),
    ("SQEs submitted (io_uring_submit_req)", "p:io_uring:io_uring_submit_req", "io"),
    ("CQEs posted in the process (io_uring_complete)", "p:io_uring:io_uring_complete", "io"),
    ("task-work runs (io_uring_task_work_run)", "p:io_uring:io_uring_task_work_run", "io"),
    ("task-work adds in the process (io_uring_task_add)", "p:io_uring:io_uring_task_add", "io"),
    ("context switches of the process", "p:context-switches", "io"),
    ("wake-ups done by the process (sched_wakeup)", "p:sched:sched_wakeup", "io"),
    ("epoll_wait calls", "p:syscalls:sys_enter_epoll_wait", "io"),
    ("sendmsg calls", "p:syscalls:sys_enter_sendmsg", "io"),
    ("recvfrom calls", "p:syscalls:sys_enter_recvfrom", "io"),
    ("block requests issued, machine (block_rq_issue)", "a:block:block_rq_issue", "io"),
    ("block plugs, machine", "a:block:block_plug", "io"),
    ("block unplugs, machine", "a:block:block_unplug", "io"),
    ("device interrupts, machine (irq_handler_entry)", "a:irq:irq_handler_entry", "io"),
    ("the cache disk's virtio interrupts (/proc/interrupts)", "disk_irqs", "io"),
    ("context switches, machine", "a:context-switches", "io"),
    ("I/Os in the window (SQEs: one read each)", "p:io_uring:io_uring_submit_req", "raw"),
]

GROUPS = [
    ("the virtio doorbell (iowrite16)", ("iowrite16",)),
    ("PVM interrupt enable (pvm_irq_enable)", ("pvm_irq_enable",)),
    ("page pinning (gup, pin/unpin, bio pages)", ("gup_", "pin_user", "unpin_user", "bio_iov_iter", "iov_iter_extract", "bio_release_pages", "try_grab", "folio_add_pin", "io_pin")),
    ("ext4 and iomap", ("ext4_", "iomap_", "__iomap")),
    ("block layer and mq-deadline", ("blk_", "__blk", "dd_", "bio_", "submit_bio", "__submit_bio")),
    ("virtio-blk and virtqueue (doorbell and IRQ excluded)", ("virtblk", "virtio_", "virtqueue", "vring_", "detach_buf")),
    ("io_uring", ("io_", "__io_")),
    ("TCP, sockets, copies", ("tcp_", "__tcp", "sock_", "skb_", "__skb", "ip_", "__ip", "_copy_", "copy_", "rep_movs", "memcpy", "net_", "__dev", "loopback", "inet_")),
    ("epoll and system call entry/exit", ("ep_", "do_epoll", "__x64_sys", "do_syscall", "entry_SYSCALL", "syscall_", "fdget", "fput", "__fget")),
    ("scheduling", ("schedule", "__schedule", "finish_task_switch", "try_to_wake", "ttwu", "enqueue", "dequeue", "pick_next", "update_curr")),
]



def load(path):
    d = {}
    for line in open(path):
        parts = line.split()
        if len(parts) < 2:
            continue
        try:
            d[parts[0]] = float(parts[1])
        except ValueError:
            pass
    return d


def cell(d, key, kind):
    v = d.get(key)
    if v is None:
        return "-"
    if kind is None or kind == "raw":
        return "%d" % v
    ios = d.get("p:io_uring:io_uring_submit_req", 0)
    if kind == "us":
        return "%.2f" % (v / ios) if ios else "-"
    if kind == "io":
        return "%.3f" % (v / ios) if ios else "-"
    return "-"


INCLUSIVE = [
    ("all system calls (entry_SYSCALL_64_after_hwframe)", ("entry_SYSCALL_64_after_hwframe",)),
    ("device interrupts (asm_common_interrupt)", ("asm_common_interrupt",)),
    ("io_uring_enter (submission, and the task work it runs)", ("__do_sys_io_uring_enter",)),
    ("... the O_DIRECT read down to the bio (__iomap_dio_rw)", ("__iomap_dio_rw",)),
    ("... ... page pinning (iov_iter_extract_pages)", ("iov_iter_extract_pages",)),
    ("... ... ext4 block mapping (iomap_iter)", ("iomap_iter",)),
    ("... block dispatch to virtio (blk_mq_flush_plug_list)", ("blk_mq_flush_plug_list",)),
    ("... ... the doorbell (iowrite16)", ("iowrite16",)),
    ("... page-cache read (filemap_read)", ("filemap_read",)),
    ("completion task work (tctx_task_work)", ("tctx_task_work",)),
    ("... of which the virtio-blk completion (virtblk_done)", ("virtblk_done",)),
    ("epoll_wait", ("__x64_sys_epoll_wait",)),
    ("sendmsg", ("__sys_sendmsg",)),
    ("recvfrom", ("__sys_recvfrom",)),
]


def inc_us(d, sym):
    ios = d.get("p:io_uring:io_uring_submit_req", 0)
    if not ios or not any(k.startswith("inc:") for k in d):
        return None
    return d.get("inc:" + sym, 0) / 100 * d.get("cpu_us", 0) / ios


def sym_us(d, prefixes, exact=False):
    """µs per I/O of the symbols starting with one of prefixes (share x CPU per I/O)."""
    ios = d.get("p:io_uring:io_uring_submit_req", 0)
    if not ios:
        return None
    per = d.get("cpu_us", 0) / ios
    if exact:
        share = d.get("sym:" + prefixes[0], 0)
    else:
        share = sum(v for k, v in d.items() if k.startswith("sym:") and k[4:].startswith(prefixes))
    return share / 100 * per


def main():
    cellname, files = sys.argv[1], sys.argv[2:]
    cols = [(f.rsplit("cnt-", 1)[-1], load(f)) for f in files]
    print("| per I/O, %s | %s |" % (cellname, " | ".join(n for n, _ in cols)))
    print("| --- |%s" % (" ---: |" * len(cols)))
    for label, key, kind in ROWS:
        print("| %s | %s |" % (label, " | ".join(cell(d, key, kind) for _, d in cols)))
    print()
    print("| CPU µs per I/O in (perf record -g of the process, self time) | %s |" % " | ".join(n for n, _ in cols))
    print("| --- |%s" % (" ---: |" * len(cols)))
    for label, prefixes in GROUPS:
        vals = [sym_us(d, prefixes) for _, d in cols]
        print("| %s | %s |" % (label, " | ".join("-" if v is None else "%.2f" % v for v in vals)))
    print()
    print("| CPU µs per I/O, inclusive (perf report --children) | %s |" % " | ".join(n for n, _ in cols))
    print("| --- |%s" % (" ---: |" * len(cols)))
    for label, (sym,) in INCLUSIVE:
        vals = [inc_us(d, sym) for _, d in cols]
        print("| %s | %s |" % (label, " | ".join("-" if v is None else "%.2f" % v for v in vals)))
    print()
    top = []
    for _, d in cols:
        syms = sorted(((v, k[4:]) for k, v in d.items() if k.startswith("sym:")), reverse=True)
        for _, k in syms[:12]:
            if k not in top:
                top.append(k)
    print("| top symbols, CPU µs per I/O | %s |" % " | ".join(n for n, _ in cols))
    print("| --- |%s" % (" ---: |" * len(cols)))
    for k in top:
        vals = [sym_us(d, (k,), exact=True) for _, d in cols]
        print("| `%s` | %s |" % (k, " | ".join("-" if v is None else "%.2f" % v for v in vals)))


main()
