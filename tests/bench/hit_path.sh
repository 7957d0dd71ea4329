#!/bin/bash
# hit_path.sh - issue 25: cache hits against the two limits they live under,
# measured in one run:
#   fio       the cache device itself (fio, O_DIRECT, io_uring, random reads
#             over the warmed range of the cache file)
#   hit       hotlund serving warmed hits from that device (admission = always,
#             the range read once before measuring), LUN 0
#   uncached  the same origin file as a second, uncached LUN of the same
#             hotlund, served from the page cache (what the protocol path
#             alone reaches), LUN 1; read-only (a writable second disk on a
#             cached origin is refused: its writes would leave the cache stale)
# at 4K QD1, 4K QD64, 64K QD16 and 1 MiB QD8 random reads, for each cache
# block size. One line per cell: the three figures (IOPS), hit / the lower
# limit, at QD1 the hit path's own addition in microseconds (the hit's mean
# latency less fio's and the uncached LUN's, both measured next to it: the
# device read plus the protocol round trip; then the same of the three
# medians, hotlun-bench's p50 and fio's total-latency p50, which a load
# spike on a shared machine moves far less than the means; the uncached run
# also copies from the page cache and fio's figure holds its own submission,
# so both err low by those ~4 µs; on a VM it is like with like only with
# NOHALT=1, below), and hotlund's CPU microseconds per I/O for the hit and the uncached
# run (utime + stime of /proc/PID/stat over the run / I/Os), and the cache
# device's average queue (requests in flight, iostat's aqu-sz) and busy time
# during fio and during the hits (/proc/diskstats of the block device under
# CACHE_DIR; "-" when there is none): at 4K QD64 the hits keep only about
# half of their 64 commands at the device (docs/bench-hit-path.md, "Why 4K QD64
# hits trail fio"), which the 4K QD128 cell shows. For cells of 64K and more,
# also the least CPU any target spends sending that reply over TCP here
# (tests/bench/tcp_floor.c: a bare server thread answering each request
# with the cell's size from one buffer, the client keeping the cell's QD in
# flight; no disk, no iSCSI), the physical limit of "CPU µs/IO hit" on this
# machine's loopback. Client: hotlun-bench.
# Not part of `make check`; results go into docs/benchmarks.md.
#
# TIMELINE=1 adds, with the first cache block size, per-request timelines of
# 4K QD1 reads (tests/bench/qd1_timeline.py: the stages of one request
# between kernel tracepoints, from a system-wide `perf record -e` of TL_TIME
# s, default 1) for fio on the cache device, the hits and the uncached LUN,
# into $HL_OUT/timeline.md.
#
# COUNTS=1 adds, with the first cache block size, per-I/O counts of the
# kernel work behind one read at COUNTS_CELL (default 4K:64), side by side
# for fio on the cache device as by default, fio submitting and reaping
# QD/8 at a time (`--thread`, so one process), the hits and the uncached
# LUN, into $HL_OUT/counts.md (function `counts`, below): per I/O the
# measured process's io_uring_enter calls, SQEs, CQEs, task-work runs,
# context switches, wake-ups and CPU µs; system-wide the block requests
# issued, plugs, virtio interrupts (/proc/interrupts) and the machine's
# busy CPU µs (/proc/stat: every task, interrupts included); and from a
# `perf record -g` of the process (COUNT_PROF s more) the µs per I/O of the
# kernel symbols where a device read differs from fio's (the doorbell,
# page pinning, ext4/iomap, the completion's task work).
#
# PROFILE=1 adds, for 4K QD64 hits (first cache block size) and 4K QD64
# uncached reads, `perf record -g` on hotlund and a table of where its CPU
# goes by layer (tests/bench/perf_layers.sh); PROFILE=all profiles the hits
# at every cache block size, PROFILE_CELL (default 4K:64) picks the cell.
#
# usage: tests/bench/hit_path.sh [BUILDDIR]
# environment: FULL=1 (every cell: cache blocks 4K 64K 1M, 10 s a run;
#              default: cache block 4K and 64K, 3 s a run),
#              BLOCKS, CELLS ("4K:1 4K:64 4K:128 64K:16 1M:8"), TIME, RANGE (warmed
#              and measured range, default 256M), THREADS (hotlund's, default 2),
#              CACHE_DIR (where the cache file lives: the "SSD"; default the
#              run's temp dir), HL_OUT (default ./hit-path), PROFILE=1|all,
#              PROFILE_CELL, PIN=HOTLUND_CPUS:CLIENT_CPUS | irq (e.g. PIN=0:1: every
#              hotlund thread on CPU 0, hotlun-bench and fio on CPU 1, so that
#              where the scheduler puts the client does not move QD1 figures
#              by more than what they measure; PIN=irq: hotlund on the CPU that
#              takes the cache disk's interrupts, the client on the others
#              (tests/bench/bench_lib.sh); default: no pinning), HOTLUND (the hotlund binary to run; default BUILDDIR's),
#              NOHALT=1 (no CPU halts: see below; the QD1 column's like-with-like mode),
#              TIMELINE=1 (per-request timelines, below),
#              CPUSTAT=1 (per run, each CPU's busy time, interrupts and softirqs
#              per I/O, hotlund's and the client's CPU µs per I/O:
#              tests/bench/cpu_split.py, into $HL_OUT/cpustat.txt),
#              CPUPROF=1 (perf record -a -g of each run, $HL_OUT/cpuprof-*.data),
#              COUNTS=1 (per-I/O counts beside fio, above; COUNTS_CELL,
#              COUNT_TIME, COUNT_WIN, COUNT_PROF),
#              NICE=N (hotlund's threads, hotlun-bench and fio at nice N, e.g.
#              -10: on a machine shared with other work, that work then takes
#              less of the CPUs from the measured runs; the runs still share
#              the disk with it)
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export HL_SRCDIR=$SRC HL_BUILDDIR=${1:-${HL_BUILDDIR:-$SRC/build}}
. "$SRC/tests/functional/lib.sh"
hl_need fio
hl_need python3
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_error "$BENCH not built"
if [ "${FULL:-0}" = 1 ]; then
	BLOCKS=${BLOCKS:-4K 64K 1M}
	TIME=${TIME:-10}
else
	BLOCKS=${BLOCKS:-4K 64K}
	TIME=${TIME:-3}
fi
CELLS=${CELLS:-4K:1 4K:64 4K:128 64K:16 1M:8}
RANGE=${RANGE:-256M}
THREADS=${THREADS:-2}
PROFILE=${PROFILE:-0}
PROFILE_CELL=${PROFILE_CELL:-4K:64}
COUNTS_CELL=${COUNTS_CELL:-4K:64}
OUT=${HL_OUT:-$PWD/hit-path}
mkdir -p "$OUT"
T=$(hl_tmpdir)
CDIR=${CACHE_DIR:-$T}
CDEV=$CDIR/hotlun-hit-path.$$.img
FIOF=$CDIR/hotlun-hit-path-fio.$$.img
SPIN_PIDS=
trap 'for p in $SPIN_PIDS; do kill "$p" 2>/dev/null; done; rm -f "$CDEV" "$CDEV.map" "$FIOF"; hl_cleanup' EXIT
IQN=$HL_IQN_PREFIX:hit-path
PIN=${PIN:-}
NICE=${NICE:-}
. "$SRC/tests/bench/bench_lib.sh"
bench_client_setup "$CDIR"
TCK=$(getconf CLK_TCK)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
RANGE_B=$(numfmt --from=iec "$RANGE")

ORIGIN=$T/origin.img
hl_log "writing $RANGE of random data to $ORIGIN"
head -c "$RANGE_B" /dev/urandom >"$ORIGIN" || hl_error "cannot write $ORIGIN"
cat "$ORIGIN" >/dev/null
dd if="$ORIGIN" of="$FIOF" bs=1M oflag=direct conv=fsync status=none || hl_error "cannot write $FIOF"

# The block device under CDIR, as /proc/diskstats names it (empty: none,
# e.g. tmpfs): its average queue (requests in flight, iostat's aqu-sz) and
# busy time during fio and the hit runs show how much of the queue depth
# reaches the device.
DISK=$(basename "$(df --output=source "$CDIR" | tail -1)")
grep -q " $DISK " /proc/diskstats 2>/dev/null || DISK=

# disk_snap: "ms_now io_ticks weighted_ms reads sectors_read" of DISK (zeros without one).
disk_snap() {
	local now
	now=$(($(date +%s%N) / 1000000))
	if [ -n "$DISK" ]; then
		awk -v d="$DISK" -v t="$now" '$3 == d {print t, $13, $7, $4, $6; exit}' /proc/diskstats
	else
		echo "$now 0 0 0 0"
	fi
}

# disk_delta "SNAP0" BS: "AQU:IOS BUSY%" of DISK since SNAP0 ("- -" without
# one). AQU is the average number of requests in flight (iostat's aqu-sz);
# IOS the bytes they hold, in I/Os of BS (AQU x the mean request size / BS):
# the block layer splits or merges reads (a 1 MiB read in 4 KiB pages is two
# requests for max_segments 254, a streamed hit's adjacent chunks can merge
# again in the scheduler), so only the bytes tell how many of the cell's
# commands the device holds at once (assuming latency does not depend on a
# request's size).
disk_delta() {
	local t0 b0 w0 r0 s0 t1 b1 w1 r1 s1
	read -r t0 b0 w0 r0 s0 <<<"$1"
	read -r t1 b1 w1 r1 s1 <<<"$(disk_snap)"
	if [ -z "$DISK" ] || [ "$t1" -le "$t0" ]; then
		echo "- -"
		return
	fi
	awk -v t=$((t1 - t0)) -v b=$((b1 - b0)) -v w=$((w1 - w0)) -v r=$((r1 - r0)) \
		-v s=$((s1 - s0)) -v bs="$(numfmt --from=iec "$2")" \
		'BEGIN {printf "%.1f:%.1f %.0f\n", w / t, r ? w / t * s * 512 / r / bs : 0, 100 * b / t}'
}

# cpu_ticks PID: utime + stime of PID in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# CPUSTAT=1: per run, where the CPU time and the interrupts went on each
# CPU (tests/bench/cpu_split.py, into $HL_OUT/cpustat.txt): sys_snap FILE
# CLIENT_TICKS takes the snapshot it compares (the client's ticks come from
# /usr/bin/time, as it has exited by the second snapshot).
VIRTIO=$(basename "$(readlink -f "/sys/block/$DISK/device" 2>/dev/null)")
CPUSTAT_NAME=
sys_snap() {
	local p
	{
		cat /proc/stat /proc/interrupts /proc/softirqs
		for p in $SPIN_PIDS; do
			echo "spin $(awk '{print $39, $14 + $15}' "/proc/$p/stat")"
		done
		echo "task hotlund $(cpu_ticks "$HL_PID")"
		echo "task client $2"
		echo "ns $(date +%s%N)"
	} >"$1"
}

# field LINE KEY: the value of KEY=... in hotlun-bench's summary line.
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

# bench LUN BS QD: one measured hotlun-bench run against hotlund's LUN;
# prints "IOPS CPU_US_PER_IO AQU BUSY% P50_US" (the cache device's queue and
# busy time during the run, the median latency).
bench() {
	local lun=$1 bs=$2 qd=$3 t0 t1 line ios d0 dq timed=()
	d0=$(disk_snap)
	[ "${CPUSTAT:-0}" = 1 ] && { sys_snap "$T/snap0" 0; timed=(/usr/bin/time -o "$T/client.time" -f '%U %S'); }
	t0=$(cpu_ticks "$HL_PID")
	if [ "${CPUPROF:-0}" = 1 ]; then
		(sleep 1; perf record -a -g -o "$OUT/cpuprof-${CPUSTAT_NAME%% *}-lun$lun-$bs-$qd.data" -- sleep \
			"$((TIME > 3 ? TIME - 2 : 1))" >/dev/null 2>&1) &
	fi
	line=$("${CPIN[@]}" "${timed[@]}" "$BENCH" --workload uniform --range "$RANGE" --bs "$bs" --qd "$qd" --time "$TIME" \
		--quiet "iscsi://127.0.0.1:$PORT/$IQN/$lun" 2>>"$OUT/bench.err" | tail -1)
	t1=$(cpu_ticks "$HL_PID")
	dq=$(disk_delta "$d0" "$bs")
	ios=$(field "$line" ios)
	[ "$(field "$line" errors)" = 0 ] || hl_error "I/O errors: $line"
	if [ "${CPUSTAT:-0}" = 1 ]; then
		sys_snap "$T/snap1" "$(awk -v k="$TCK" '{printf "%d", ($1 + $2) * k + 0.5}' "$T/client.time")"
		python3 "$SRC/tests/bench/cpu_split.py" "$CPUSTAT_NAME lun$lun $bs QD$qd" "$T/snap0" "$T/snap1" \
			"${ios:-0}" "$VIRTIO" >>"$OUT/cpustat.txt"
	fi
	awk -v i="$(field "$line" iops)" -v n="${ios:-0}" -v d=$((t1 - t0)) -v k="$TCK" \
		'BEGIN {printf "%d %.1f", i, n ? d * 1e6 / k / n : 0}'
	echo " $dq $(field "$line" p50_us)"
}

# fio_run BS QD [FIO OPTION...]: one fio run, prints "IOPS P50_US".
fio_run() {
	local bs=$1 qd=$2
	shift 2
	"${CPIN[@]}" fio --name=dev --filename="$FIOF" --direct=1 --ioengine=io_uring --rw=randread \
		--bs="$bs" --iodepth="$qd" --size="$RANGE" --time_based --runtime="$TIME" \
		--lat_percentiles=1 --output-format=json "$@" 2>>"$OUT/fio.err" |
		python3 -c 'import json, sys
r = json.load(sys.stdin)["jobs"][0]["read"]
print("%d %.1f" % (r["iops"], r["lat_ns"]["percentile"]["50.000000"] / 1e3))' 2>>"$OUT/fio.err"
}

# fio_iops BS QD: random O_DIRECT io_uring reads of FIOF, RANGE of data
# written in the cache file's folder (the cache device's file system; the
# cache file itself has holes where no block was filled, which read at
# memory speed). Prints "IOPS AQU BUSY% P50_US", P50_US the median of
# fio's total latency (submission included: io_uring_enter also rings the
# device's doorbell, 15-20 µs on a VM, which fio's clat leaves out).
# Above QD 8 fio runs twice and the better run counts: as configured by
# default (one io_uring_enter per I/O, woken for every completion), and
# submitting and reaping QD/8 at a time. On a VM fio's default is bound by
# its own CPU, not the device's: 88-97k 4K IOPS at QD64 with 87-90% system
# time, against 313-334k batched, on the same file (2026-12-07), so the
# default alone would understate the limit the hits are held to. The
# device figures (queue, busy) are those of the counted run.
fio_iops() {
	local d0 d1 r p r2 p2 b
	d0=$(disk_snap)
	read -r r p <<<"$(fio_run "$1" "$2")"
	d1=$(disk_delta "$d0" "$1")
	if [ "$2" -gt 8 ]; then
		b=$(($2 / 8))
		d0=$(disk_snap)
		read -r r2 p2 <<<"$(fio_run "$1" "$2" --iodepth_batch_submit="$b" \
			--iodepth_batch_complete_min="$b")"
		if [ "${r2:-0}" -gt "${r:-0}" ]; then
			r=$r2 p=$p2
			d1=$(disk_delta "$d0" "$1")
		fi
	fi
	echo "${r:-0} $d1 ${p:-0}"
}

# start CACHE_BS: hotlund with LUN 0 = origin cached on a fresh cache file, LUN 1 = origin uncached.
start() {
	local cbs=$1 st=$T/state-$1
	PORT=$(hl_free_port)
	rm -rf "$st" "$CDEV" "$CDEV.map"
	mkdir -p "$st"
	{
		printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s\ncontrol_socket = %s/ctl.sock\n' \
			"$PORT" "$st" "$st"
		printf 'log_level = notice\nthreads = %s\n\n' "$THREADS"
		printf '[cache ssd]\ndevice = %s\nsize = %s\nblock_size = %s\nadmission = always\n\n' \
			"$CDEV" "$(( (RANGE_B * 2 + (1 << 30) - 1) >> 30 ))G" "$cbs"
		printf '[disk hit]\norigin = file:%s\ncache = ssd\n\n' "$ORIGIN"
		printf '[disk plain]\norigin = file:%s\nread_only = yes\n\n' "$ORIGIN"
		printf '[target %s]\nlun.0 = hit\nlun.1 = plain\nallow = ALL\n' "$IQN"
	} >"$T/hit-$cbs.conf"
	HL_HOTLUND=${HOTLUND:-$HL_HOTLUND} hl_start_hotlund "$T/hit-$cbs.conf"
	if [ -n "${PIN%%:*}" ]; then
		taskset -a -p -c "${PIN%%:*}" "$HL_PID" >/dev/null || hl_error "taskset ${PIN%%:*} $HL_PID failed"
	fi
	if [ -n "$NICE" ]; then
		local t
		for t in /proc/"$HL_PID"/task/*; do
			renice -n "$NICE" -p "${t##*/}" >/dev/null || hl_error "renice $NICE failed"
		done
	fi
	SOCK=$st/ctl.sock
	# Warm: every MiB of the range read once in shuffled order (a sequential
	# stream would bypass the cache), again until a pass misses nothing
	# (admission = always; fills run after the replies).
	local pass m0 m1
	for pass in 1 2 3 4 5 6; do
		m0=$(hl_cache_stat "$SOCK" ssd read_misses)
		seq 0 $(((RANGE_B >> 20) - 1)) | shuf >"$T/warm.blocks"
		"$BENCH" --workload "trace:blocks:$T/warm.blocks" --bs 1M --qd 4 --count $((RANGE_B >> 20)) \
			--quiet "iscsi://127.0.0.1:$PORT/$IQN/0" >/dev/null 2>>"$OUT/bench.err" ||
			hl_error "warm-up failed"
		sleep 1
		m1=$(hl_cache_stat "$SOCK" ssd read_misses)
		[ "$m1" = "$m0" ] && break
	done
	hl_log "cache block $cbs: warm after $pass passes"
	HITS0=$(hl_cache_stat "$SOCK" ssd read_hits)
	MISS0=$(hl_cache_stat "$SOCK" ssd read_misses)
	SOCK=$st/ctl.sock
}

# profile NAME LUN: perf record -g on hotlund during a PROFILE_CELL run, grouped by layer.
profile() {
	local name=$1 lun=$2
	command -v perf >/dev/null || { hl_log "no perf: no profile"; return; }
	perf record -g -o "$OUT/$name.perf.data" -p "$HL_PID" -- sleep "$TIME" >/dev/null 2>&1 &
	local ppid=$!
	bench "$lun" "${PROFILE_CELL%:*}" "${PROFILE_CELL#*:}" >"$OUT/$name.bench.txt"
	wait "$ppid"
	"$SRC/tests/bench/perf_layers.sh" "$OUT/$name.perf.data" "$HL_BUILDDIR" >"$OUT/$name.layers.txt" 2>&1
	hl_log "profile $name:"
	echo "IOPS CPU-us/IO (under perf): $(cut -d' ' -f1-2 "$OUT/$name.bench.txt")" >>"$OUT/$name.layers.txt"
	cat "$OUT/$name.layers.txt" >&2
}

# timeline NAME CMD...: perf record of the tracepoints of one 4K QD1 request
# (tests/bench/qd1_timeline.py) on every CPU for TL_TIME s while CMD runs.
TL_EVENTS=sock:sk_data_ready,syscalls:sys_enter_recvfrom,syscalls:sys_exit_recvfrom
TL_EVENTS=$TL_EVENTS,syscalls:sys_enter_sendmsg,syscalls:sys_exit_sendmsg
TL_EVENTS=$TL_EVENTS,syscalls:sys_enter_sendto,syscalls:sys_exit_sendto
TL_EVENTS=$TL_EVENTS,syscalls:sys_enter_recvmsg,syscalls:sys_exit_recvmsg
TL_EVENTS=$TL_EVENTS,syscalls:sys_enter_ppoll,syscalls:sys_exit_ppoll,syscalls:sys_enter_poll,syscalls:sys_exit_poll
TL_EVENTS=$TL_EVENTS,syscalls:sys_enter_io_uring_enter,syscalls:sys_exit_io_uring_enter
TL_EVENTS=$TL_EVENTS,io_uring:io_uring_submit_req,io_uring:io_uring_complete,io_uring:io_uring_task_add
TL_EVENTS=$TL_EVENTS,block:block_rq_issue,block:block_rq_complete,irq:irq_handler_entry
TL_EVENTS=$TL_EVENTS,sched:sched_wakeup,sched:sched_switch
timeline() {
	local name=$1
	shift
	command -v perf >/dev/null || { hl_log "no perf: no timeline"; return; }
	"$@" >"$OUT/tl-$name.cmd.txt" 2>&1 &
	local cpid=$!
	sleep 1
	local t
	TL_CLIENT=
	for t in /proc/"$cpid"/task/*; do
		TL_CLIENT="$TL_CLIENT ${t##*/}"
	done
	perf record -a -k CLOCK_MONOTONIC -e "$TL_EVENTS" -o "$OUT/tl-$name.perf.data" -- sleep "${TL_TIME:-1}" \
		>/dev/null 2>"$OUT/tl-$name.perf.err"
	wait "$cpid"
	perf script -i "$OUT/tl-$name.perf.data" -F comm,tid,cpu,time,event,trace --ns >"$OUT/tl-$name.txt" 2>/dev/null
	hl_log "timeline $name: $(wc -l <"$OUT/tl-$name.txt") events in $OUT/tl-$name.txt"
}

# timelines: fio, hits (LUN 0) and uncached (LUN 1), 4K QD1, into timeline.md.
timelines() {
	local lun mode dtids t
	timeline fio "${CPIN[@]}" fio --name=dev --filename="$FIOF" --direct=1 --ioengine=io_uring \
		--rw=randread --bs=4K --iodepth=1 --size="$RANGE" --time_based --runtime=3
	"$SRC/tests/bench/qd1_timeline.py" fio "$OUT/tl-fio.txt" >"$OUT/timeline.md"
	dtids=
	for t in /proc/"$HL_PID"/task/*; do
		dtids="$dtids ${t##*/}"
	done
	for lun in 0 1; do
		# shellcheck disable=SC2086
		timeline "lun$lun" "${CPIN[@]}" "$BENCH" --workload uniform --range "$RANGE" --bs 4K --qd 1 \
			--time 3 --quiet "iscsi://127.0.0.1:$PORT/$IQN/$lun"
		mode=hit
		[ "$lun" = 1 ] && mode=uncached
		# shellcheck disable=SC2086
		"$SRC/tests/bench/qd1_timeline.py" $mode "$OUT/tl-lun$lun.txt" $dtids -- $TL_CLIENT >>"$OUT/timeline.md"
	done
	rm -f "$OUT"/tl-*.perf.data
	cat "$OUT/timeline.md"
}

# tcp_floor SIZE QD: the bare TCP sender's CPU µs per reply of SIZE bytes
# at QD in flight (tests/bench/tcp_floor.c), pinned like the runs; "-" below
# 64K. Measured right after each hit run, as the machine's load drifts.
FLOOR_BIN=$T/tcp_floor
cc -O2 -pthread -o "$FLOOR_BIN" "$SRC/tests/bench/tcp_floor.c" || hl_error "cannot build tcp_floor"
tcp_floor() {
	local kib
	kib=$(($(numfmt --from=iec "$1") / 1024))
	[ "$kib" -ge 64 ] || { echo -; return; }
	"$FLOOR_BIN" "$kib" "$2" "$TIME" ${PIN:+${PIN%%:*} ${PIN#*:}} |
		sed -n 's/.*server_us_per_reply=\([0-9.]*\).*/\1/p'
}

# counts: what one read costs the kernel, per I/O, at COUNTS_CELL, for fio
# (default and batched), the hits and the uncached LUN; into counts.md.
# Each workload runs COUNT_TIME s (default 10); from its 2nd second a
# perf stat window of COUNT_WIN s (default 2), then COUNT_PROF s (default
# 3) of perf record -g (kept as $HL_OUT/counts-NAME.perf.data).
COUNT_PEV=syscalls:sys_enter_io_uring_enter,io_uring:io_uring_submit_req,io_uring:io_uring_complete
COUNT_PEV=$COUNT_PEV,io_uring:io_uring_task_work_run,io_uring:io_uring_task_add,context-switches
COUNT_PEV=$COUNT_PEV,sched:sched_wakeup,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendmsg
COUNT_PEV=$COUNT_PEV,syscalls:sys_enter_recvfrom
COUNT_AEV=block:block_rq_issue,block:block_plug,block:block_unplug,irq:irq_handler_entry,context-switches
# busy ticks of the machine (every CPU: user, nice, system, irq, softirq, steal excluded)
machine_ticks() { awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }
# interrupts of the cache disk's virtio queues, all CPUs
disk_irqs() {
	local v
	v=$(basename "$(readlink -f "/sys/block/$DISK/device" 2>/dev/null)")
	awk -v v="$v-" 'index($NF, v) == 1 && $NF !~ /config/ {for (i = 2; i < NF - 2; i++) if ($i ~ /^[0-9]+$/) n += $i} END {print n + 0}' /proc/interrupts
}
# count_window NAME PID: the perf stat window and the tracer window on the
# running workload PID; leaves "name value" lines in $T/cnt-NAME.
count_window() {
	local name=$1 pid=$2 w=${COUNT_WIN:-2} c0 m0 i0 n0 c1 m1 i1 n1
	sleep 1
	c0=$(cpu_ticks "$pid") m0=$(machine_ticks) i0=$(disk_irqs) n0=$(date +%s%N)
	perf stat -x, -e "$COUNT_PEV" -p "$pid" -o "$T/cnt-p.$name" -- sleep "$w" 2>/dev/null &
	local pp=$!
	perf stat -x, -a -e "$COUNT_AEV" -o "$T/cnt-a.$name" -- sleep "$w" 2>/dev/null
	wait "$pp"
	c1=$(cpu_ticks "$pid") m1=$(machine_ticks) i1=$(disk_irqs) n1=$(date +%s%N)
	{
		echo "secs $(awk -v a="$n0" -v b="$n1" 'BEGIN {print (b - a) / 1e9}')"
		echo "cpu_us $(((c1 - c0) * 1000000 / TCK))"
		echo "machine_us $(((m1 - m0) * 1000000 / TCK))"
		echo "disk_irqs $((i1 - i0))"
		awk -F, '$3 != "" {print "p:" $3, $1}' "$T/cnt-p.$name"
		awk -F, '$3 != "" {print "a:" $3, $1}' "$T/cnt-a.$name"
	} >"$T/cnt-$name"
	# where the process's CPU goes, per symbol (no children), in its own window
	perf record -g -o "$T/cnt-perf.$name" -p "$pid" -- sleep "${COUNT_PROF:-3}" >/dev/null 2>&1
	perf report -i "$T/cnt-perf.$name" --no-children --sort sym --stdio -g none 2>/dev/null |
		awk '!/^#/ && NF >= 3 {v = $1; sub(/%/, "", v); print "sym:" $NF, v}' >>"$T/cnt-$name"
	perf report -i "$T/cnt-perf.$name" --children --sort sym --stdio -g none 2>/dev/null |
		awk '!/^#/ && NF >= 4 {v = $1; sub(/%/, "", v); print "inc:" $NF, v}' >>"$T/cnt-$name"
	mv "$T/cnt-perf.$name" "$OUT/counts-$name.perf.data"
}
counts() {
	local bs=${COUNTS_CELL%:*} qd=${COUNTS_CELL#*:} ct=${COUNT_TIME:-10} name pid iops lun b
	b=$((qd / 8 > 0 ? qd / 8 : 1))
	for name in fio fio-batched; do
		local extra=()
		[ "$name" = fio-batched ] && extra=(--iodepth_batch_submit="$b" --iodepth_batch_complete_min="$b")
		"${CPIN[@]}" fio --name=dev --thread --filename="$FIOF" --direct=1 --ioengine=io_uring --rw=randread \
			--bs="$bs" --iodepth="$qd" --size="$RANGE" --time_based --runtime="$ct" \
			--output-format=json "${extra[@]}" >"$T/cnt-out.$name" 2>>"$OUT/fio.err" &
		pid=$!
		count_window "$name" "$pid"
		wait "$pid"
		iops=$(python3 -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"]))' "$T/cnt-out.$name")
		echo "iops $iops" >>"$T/cnt-$name"
	done
	for lun in 0 1; do
		name=hits
		[ "$lun" = 1 ] && name=uncached
		"${CPIN[@]}" "$BENCH" --workload uniform --range "$RANGE" --bs "$bs" --qd "$qd" --time "$ct" \
			--quiet "iscsi://127.0.0.1:$PORT/$IQN/$lun" >"$T/cnt-out.$name" 2>>"$OUT/bench.err" &
		pid=$!
		count_window "$name" "$HL_PID"
		wait "$pid"
		echo "iops $(field "$(tail -1 "$T/cnt-out.$name")" iops)" >>"$T/cnt-$name"
	done
	python3 "$SRC/tests/bench/io_counts.py" "$COUNTS_CELL" "$T/cnt-fio" "$T/cnt-fio-batched" \
		"$T/cnt-hits" "$T/cnt-uncached" >"$OUT/counts.md"
	cat "$OUT/counts.md" >&2
}

declare -A FIO FLOOR
for cell in $CELLS; do
	FIO[$cell]=0
done
{
	echo "| cache block | I/O | fio on the cache device (IOPS) | hits (IOPS) | uncached LUN (IOPS) | hits / lower limit | µs added at QD1 (means / medians) | CPU µs/IO hit | CPU µs/IO uncached | CPU µs of a bare TCP sender per reply (hit / it) | device queue fio / hits: requests (in I/Os of the cell) | device busy % fio / hits |"
	echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} >"$OUT/results.md"
first=1
for cbs in $BLOCKS; do
	start "$cbs"
	for cell in $CELLS; do
		bs=${cell%:*} qd=${cell#*:}
		CPUSTAT_NAME="$cbs blocks:"
		# The device limit does not depend on the cache block: measure it once,
		# but at QD1 next to each hit run (the QD1 addition subtracts it).
		{ [ "${FIO[$cell]}" = 0 ] || [ "$qd" = 1 ]; } && FIO[$cell]=$(fio_iops "$bs" "$qd")
		read -r hit hcpu hq hb hp <<<"$(bench 0 "$bs" "$qd")"
		FLOOR[$cell]=$(tcp_floor "$bs" "$qd")
		read -r unc ucpu _ _ up <<<"$(bench 1 "$bs" "$qd")"
		read -r f fq fb fp <<<"${FIO[$cell]}"
		awk -v c="$cbs" -v b="$bs" -v q="$qd" -v f="${f:-0}" -v h="$hit" -v u="$unc" \
			-v fp="${fp:-0}" -v hp="${hp:-0}" -v up="${up:-0}" \
			-v hc="$hcpu" -v uc="$ucpu" -v tf="${FLOOR[$cell]}" -v fq="$fq" -v hq="$hq" -v fb="$fb" -v hb="$hb" \
			'BEGIN {lim = f < u ? f : u;
			add = "-";
			if (q == 1 && f && h && u)
				add = sprintf("%.1f / %.1f", 1e6 / h - 1e6 / f - 1e6 / u, hp - fp - up);
			floor = tf == "-" || tf == "" ? "-" : sprintf("%s (%.2f)", tf, hc / tf);
			printf "| %s | %s QD%s | %d | %d | %d | %.2f | %s | %.1f | %.1f | %s | %s / %s | %s / %s |\n",
				c, b, q, f, h, u, lim ? h / lim : 0, add, hc, uc, floor, dq(fq), dq(hq), fb, hb}
			function dq(x) { return sub(/:/, " (", x) ? x ")" : x }' |
			tee -a "$OUT/results.md"
	done
	hits=$(($(hl_cache_stat "$SOCK" ssd read_hits) - HITS0))
	miss=$(($(hl_cache_stat "$SOCK" ssd read_misses) - MISS0))
	echo "cache block $cbs: $hits hits, $miss misses while measuring" | tee -a "$OUT/notes.txt" >&2
	[ "$miss" -le $((hits / 100)) ] || hl_log "WARNING: cache block $cbs: $miss misses in a hit run"
	if { [ "$PROFILE" = 1 ] && [ $first = 1 ]; } || [ "$PROFILE" = all ]; then
		profile "hit-$cbs" 0
		[ $first = 1 ] && profile uncached 1
	fi
	[ "${TIMELINE:-0}" = 1 ] && [ $first = 1 ] && timelines
	[ "${COUNTS:-0}" = 1 ] && [ $first = 1 ] && counts
	first=0
	hl_check_alive "$HL_PID"
	hl_stop "$HL_PID"
done
{
	echo
	echo "machine: $(nproc) CPUs, $(uname -r), load average before: $LOAD0, after: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "$(date -u +%Y-%m-%dT%H:%MZ); hotlund ${HOTLUND:-$HL_BUILDDIR/hotlund} (script from $(git -C "$SRC" describe --always --dirty 2>/dev/null)), threads = $THREADS${PIN:+, pinned hotlund:client = $PIN$PIN_IRQ}${NICE:+, nice $NICE}${SPIN_PIDS:+, NOHALT=1 (SCHED_IDLE loops keep every CPU from halting)};"
	echo "random reads over $RANGE, $TIME s a run, hotlun-bench one session; cache file in $CDIR ($(df --output=source "$CDIR" | tail -1)); $(fio --version)"
	cat "$OUT/notes.txt"
} >>"$OUT/results.md"
rm -f "$OUT/notes.txt"
cat "$OUT/results.md"
