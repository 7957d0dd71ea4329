#!/bin/bash
# perf_layers.sh - where hotlund's CPU goes, by layer: a `perf record -g`
# file's self time (no children) summed per source folder of the symbol:
# iscsi/, scsi/, cache/core, cache/engine, origin/, event/, other src/
# folders, libc and other libraries, and the kernel (split into the network
# stack, io_uring and block, scheduling and the rest by symbol name). Each
# hotlund symbol is placed by the object file that defines it (nm over
# BUILDDIR/src/**.o).
#
# usage: tests/bench/perf_layers.sh PERF_DATA [BUILDDIR]
set -u
DATA=$1
BUILD=${2:-$(cd "$(dirname "$0")/../.." && pwd)/build}
MAP=$(mktemp)
trap 'rm -f "$MAP"' EXIT
# symbol -> layer, from the objects of libhotlun and the programs.
find "$BUILD/src" -name '*.o' | while read -r o; do
	d=${o#"$BUILD"/src/}
	d=${d%/*}
	nm --defined-only "$o" 2>/dev/null | awk -v d="$d" '$2 ~ /^[TtWw]$/ {print $3, d}'
done | sort -u -k1,1 >"$MAP"
perf report -i "$DATA" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
	awk -v map="$MAP" '
	BEGIN { while ((getline l < map) > 0) { split(l, a, " "); layer[a[1]] = a[2] } }
	/^#/ || NF < 4 { next }
	{
		pct = $1; sub(/%/, "", pct); dso = $2; kind = $3; sym = $4
		sub(/\.(isra|constprop|part|cold)\.[0-9.]*$/, "", sym)
		if (kind == "[k]") {
			l = "kernel: other"
			if (sym ~ /tcp|skb|ip_|inet|sock|net_|napi|__dev_|loopback|sk_|csum|copy_.*iter|_copy_to_user|_copy_from_user|rep_movs|memcpy/) l = "kernel: network and copies"
			if (sym ~ /io_uring|io_|blk_|bio|ext4|iomap|filemap|folio|virtblk|nvme|dio|submit_bio|aio/) l = "kernel: io_uring, block, fs"
			if (sym ~ /schedule|switch|futex|wake|enqueue|dequeue|idle|pick_next|update_curr|ttwu|select_task/) l = "kernel: scheduling"
			if (sym ~ /epoll|ep_|syscall|entry_|sys_|do_sys|__x64|exit_to_user|fget|fput/) l = "kernel: syscall entry, epoll"
		} else if (sym in layer) {
			l = layer[sym]
		} else if (dso ~ /libc/) {
			l = "libc"
		} else {
			l = "other: " dso
		}
		sum[l] += pct; tot += pct
		if (!(l in top) || pct > toppct[l]) { top[l] = sym; toppct[l] = pct }
	}
	END {
		for (l in sum) printf "%6.1f%%  %-32s (top: %s %.1f%%)\n", sum[l], l, top[l], toppct[l]
		printf "%6.1f%%  total sampled\n", tot
	}' | sort -rn
# The kernel's share by what user space asked of it (inclusive time of the
# system calls, from the call graphs): sends, the io_uring submissions and
# the block layer under them, receives, epoll.
echo "kernel time by system call (inclusive, % of all samples):"
perf report -i "$DATA" --children --sort sym --stdio -g none 2>/dev/null |
	awk '$3 == "[k]" {
		n = $4; v = $1; sub(/%/, "", v)
		if (n == "__sys_sendmsg") l = "sendmsg (iSCSI responses)"
		else if (n == "__do_sys_io_uring_enter") l = "io_uring_enter (device / file reads)"
		else if (n == "blk_mq_flush_plug_list") l = "  of which block dispatch (virtio)"
		else if (n == "__sys_recvfrom") l = "recv (commands)"
		else if (n == "__x64_sys_epoll_wait") l = "epoll_wait"
		else if (n == "__x64_sys_epoll_ctl") l = "epoll_ctl"
		else if (n == "ksys_read" || n == "ksys_write") l = "read/write (eventfds)"
		else if (n == "io_wq_worker") l = "io-wq workers"
		else next
		if (!(l in s)) order[++k] = l
		s[l] += v
	} END { for (i = 1; i <= k; i++) printf "%6.1f%%  %s\n", s[order[i]], order[i] }'
