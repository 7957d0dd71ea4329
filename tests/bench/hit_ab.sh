#!/bin/bash
# hit_ab.sh - A/B of two hotlund binaries on warmed cache hits, in one run:
# both daemons run side by side (each its own cache file over one origin
# file, admission = always, warmed like hit_path.sh does), and hotlun-bench
# runs against A and B in turn (A B, then B A, ...) for each cell, so the
# machine's drift hits both alike. Per run: IOPS and the daemon's CPU µs per
# I/O (utime + stime of /proc/PID/stat over the run / I/Os; with tick-based
# accounting this includes the network softirq work done in its context).
# Also the uncached LUN (LUN 1, the origin from the page cache, read-only) with UNCACHED=1.
#
# NET=veth runs the client in a network namespace behind a veth pair that
# the script makes (10.231.0.1 <-> 10.231.0.2; needs root and iproute2)
# instead of over loopback: a real device path, but still on this machine
# (the kernel copies zero-copy sends that are delivered to a local socket).
#
# Not part of `make check`; results go into docs/benchmarks.md.
#
# usage: tests/bench/hit_ab.sh HOTLUND_A HOTLUND_B [BUILDDIR]
# environment: BLOCKS ("4K 64K 1M"), CELLS ("4K:64 64K:16 1M:8"), TIME (5),
#              ROUNDS (3: runs of each binary per cell), RANGE (256M),
#              THREADS (2), NET (lo | veth), UNCACHED (0 | 1),
#              A_ENV / B_ENV (environment for A's / B's daemon, e.g.
#              "HOTLUN_ZEROCOPY=1"), A_GLOBAL / B_GLOBAL (lines added to A's / B's
#              [global], e.g. "poll_us = 200"), HL_OUT (default ./hit-ab),
#              SESSIONS (1: iSCSI sessions per run, hotlun-bench --sessions; QD is per session),
#              SYSCALLS (0 | 1: also count the daemon's syscalls per I/O with
#              perf stat on syscalls:sys_enter_*, into $HL_OUT/syscalls.txt),
#              PIN=HOTLUND_CPUS:CLIENT_CPUS | irq (both daemons' threads on the first
#              CPUs, hotlun-bench on the second, as hit_path.sh's PIN; ":CLIENT_CPUS"
#              pins the client only, e.g. to A/B the daemons' own "cpus = "
#              through A_GLOBAL / B_GLOBAL),
#              NOHALT=1 (SCHED_IDLE busy loops keep every CPU from halting, as
#              hit_path.sh's NOHALT), NICE=N (run the daemons' threads and the
#              client at nice N, e.g. -10, as hit_path.sh's NICE),
#              A_SESSIONS / B_SESSIONS (sessions of A's / B's hotlun-bench runs,
#              the cell's QD divided among them: the same commands in flight
#              over one or more TCP streams),
#              A_CLIENT / B_CLIENT (hotlun-bench | iscsi-perf: the client of A's /
#              B's runs; with the same binary twice, an A/B of the clients),
#              TRACE=1 (`perf trace` of the daemon's epoll_wait, recvfrom, read,
#              sendmsg and io_uring_enter for 2 s of each run, from its 2nd
#              second; tests/bench/turn_order.py sums up, per run, how long
#              the turn's device submission waited behind the turn's sends;
#              into $HL_OUT/turns.txt)
# Per run also the cache device's queue during it, in I/Os of the cell's size
# (requests in flight x the mean request size / the cell's size, from
# /proc/diskstats of the disk under the run's temp dir; hit_path.sh's
# disk_delta) and the mean size of its read requests, in the "dev" columns.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
A_BIN=$(realpath "$1") B_BIN=$(realpath "$2")
export HL_SRCDIR=$SRC HL_BUILDDIR=${3:-${HL_BUILDDIR:-$SRC/build}}
. "$SRC/tests/functional/lib.sh"
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_error "$BENCH not built"
BLOCKS=${BLOCKS:-4K 64K 1M}
CELLS=${CELLS:-4K:64 64K:16 1M:8}
TIME=${TIME:-5}
ROUNDS=${ROUNDS:-3}
RANGE=${RANGE:-256M}
THREADS=${THREADS:-2}
NET=${NET:-lo}
UNCACHED=${UNCACHED:-0}
SYSCALLS=${SYSCALLS:-0}
SESSIONS=${SESSIONS:-1}
OUT=${HL_OUT:-$PWD/hit-ab}
mkdir -p "$OUT"
T=$(hl_tmpdir)
NS=
SPIN_PIDS=
trap 'rc=$?; for p in $SPIN_PIDS; do kill "$p" 2>/dev/null; done; if [ -n "$NS" ]; then ip netns del "$NS" 2>/dev/null; fi; (exit $rc); hl_cleanup' EXIT
PIN=${PIN:-}
NICE=${NICE:-}
. "$SRC/tests/bench/bench_lib.sh"
bench_client_setup "$T"
DISK=$(basename "$(df --output=source "$T" | tail -1)")
grep -q " $DISK " /proc/diskstats 2>/dev/null || DISK=
# disk_snap: "reads sectors_read weighted_ms ms_now" of DISK.
disk_snap() {
	awk -v d="$DISK" -v t="$(($(date +%s%N) / 1000000))" '$3 == d {print $4, $6, $7, t; exit}' /proc/diskstats
}
# disk_ios "SNAP0" BS: the device's bytes in flight since SNAP0, in I/Os of BS, and
# the mean read request size in KiB ("IOS/SIZEK"; "-" without a disk).
disk_ios() {
	local r0 s0 w0 t0 r1 s1 w1 t1
	[ -n "$DISK" ] || { echo -; return; }
	read -r r0 s0 w0 t0 <<<"$1"
	read -r r1 s1 w1 t1 <<<"$(disk_snap)"
	awk -v t=$((t1 - t0)) -v r=$((r1 - r0)) -v s=$((s1 - s0)) -v w=$((w1 - w0)) \
		-v bs="$(numfmt --from=iec "$2")" 'BEGIN {printf "%.1f/%.0fK\n", (t > 0 && r) ? w / t * s * 512 / r / bs : 0, r ? s / 2 / r : 0}'
}
IQN=$HL_IQN_PREFIX:hit-ab
TCK=$(getconf CLK_TCK)
RANGE_B=$(numfmt --from=iec "$RANGE")
HOST=127.0.0.1
RUN=()
if [ "$NET" = veth ]; then
	NS=hlab$$
	ip netns add "$NS" || hl_error "cannot make a network namespace"
	ip link add "v$NS" type veth peer name "p$NS" netns "$NS" || hl_error "no veth"
	ip addr add 10.231.0.1/24 dev "v$NS" && ip link set "v$NS" up &&
		ip -n "$NS" addr add 10.231.0.2/24 dev "p$NS" && ip -n "$NS" link set "p$NS" up &&
		ip -n "$NS" link set lo up || hl_error "cannot set up the veth pair"
	HOST=10.231.0.1
	RUN=(ip netns exec "$NS")
fi

# One origin file each (a file origin is locked by the daemon that serves
# it), both made the same way: how a file was written decides the size of
# its page-cache folios, and with them the cost of an uncached read.
head -c "$RANGE_B" /dev/urandom >"$T/origin.src" || hl_error "cannot write the origin"
cp "$T/origin.src" "$T/origin-A.img"
cp "$T/origin.src" "$T/origin-B.img"
rm -f "$T/origin.src"
cat "$T/origin-A.img" "$T/origin-B.img" >/dev/null

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }

SC_EVENTS=syscalls:sys_enter_sendmsg,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait
SC_EVENTS=$SC_EVENTS,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_epoll_ctl

# bench PID PORT LUN BS QD [NAME]: "IOPS CPU_US_PER_IO DEV_IOS" of one run.
bench() {
	local pid=$1 port=$2 lun=$3 bs=$4 qd=$5 name=${6:-} t0 t1 line d0 perf_pid=
	if [ "$SYSCALLS" = 1 ]; then
		perf stat -x, -e "$SC_EVENTS" -p "$pid" -o "$T/perf.out" 2>/dev/null &
		perf_pid=$!
		sleep 0.2
	fi
	if [ "${TRACE:-0}" = 1 ]; then
		(sleep 1 && timeout -s INT 2 perf trace -p "$pid" -e epoll_wait,recvfrom,read,sendmsg,io_uring_enter \
			-o "$OUT/trace.txt" >/dev/null 2>&1) &
		perf_pid=$!
	fi
	d0=$(disk_snap)
	t0=$(cpu_ticks "$pid")
	local client=${name}_CLIENT
	if [ "${!client:-}" = iscsi-perf ]; then
		# libiscsi's own client: whole LUN (= RANGE), 512-byte blocks; its
		# I/Os are its average IOPS x the run's seconds
		local p
		p=$("${RUN[@]}" "${CPIN[@]}" iscsi-perf -t "$TIME" -m "$qd" -b $(($(numfmt --from=iec "$bs") / 512)) -r \
			"iscsi://$HOST:$port/$IQN/$lun" 2>&1 | tr '\r' '\n' | sed -n 's/.*iops average \([0-9]*\).*/\1/p' | tail -1)
		line="iops=${p:-0} ios=$((${p:-0} * TIME)) errors=$([ -n "$p" ] && echo 0 || echo iscsi-perf)"
	else
		local sv=${name}_SESSIONS ns=$SESSIONS nq=$qd
		if [ -n "${!sv:-}" ]; then
			ns=${!sv}
			nq=$((qd / ns > 0 ? qd / ns : 1))
		fi
		line=$("${RUN[@]}" "${CPIN[@]}" "$BENCH" --workload uniform --range "$RANGE" --bs "$bs" --qd "$nq" \
			--sessions "$ns" --time "$TIME" --quiet "iscsi://$HOST:$port/$IQN/$lun" 2>>"$OUT/bench.err" | tail -1)
	fi
	t1=$(cpu_ticks "$pid")
	[ "$(field "$line" errors)" = 0 ] || hl_error "I/O errors: $line"
	if [ "${TRACE:-0}" = 1 ]; then
		wait "$perf_pid"
		echo "$name LUN $lun $bs QD$qd: $("$SRC/tests/bench/turn_order.py" "$OUT/trace.txt")" >>"$OUT/turns.txt"
	elif [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"
		wait "$perf_pid"
		# syscalls per I/O (the perf window is a little longer than the run's)
		awk -F, -v n="$(field "$line" ios)" -v tag="$name LUN $lun $bs QD$qd" '
			$3 ~ /sys_enter_/ { sub(/.*sys_enter_/, "", $3); s = s sprintf(" %s %.2f", $3, n ? $1 / n : 0) }
			END { print tag ":" s }' "$T/perf.out" >>"$OUT/syscalls.txt"
	fi
	awk -v i="$(field "$line" iops)" -v n="$(field "$line" ios)" -v d=$((t1 - t0)) -v k="$TCK" \
		-v q="$(disk_ios "$d0" "$bs")" 'BEGIN {printf "%d %.1f %s\n", i, n ? d * 1e6 / k / n : 0, q}'
}

# start NAME BIN ENV CACHE_BS: a daemon (LUN 0 cached, LUN 1 uncached), warmed;
# sets PID_<NAME> and PORT_<NAME>.
start() {
	local name=$1 bin=$2 env=$3 cbs=$4 st=$T/state-$1-$4 port pass m0 m1 g
	port=$(hl_free_port)
	rm -rf "$st"
	mkdir -p "$st"
	{
		printf '[global]\nportal = %s:%s\nstate_dir = %s\ncontrol_socket = %s/ctl.sock\n' \
			"$HOST" "$port" "$st" "$st"
		printf 'log_level = notice\nthreads = %s\n' "$THREADS"
		g=${name}_GLOBAL
		[ -n "${!g:-}" ] && printf '%s\n' "${!g}"
		printf '\n'
		printf '[cache ssd]\ndevice = %s/cache.img\nsize = %s\nblock_size = %s\nadmission = always\n\n' \
			"$st" "$(((RANGE_B * 2 + (1 << 30) - 1) >> 30))G" "$cbs"
		printf '[disk hit]\norigin = file:%s\ncache = ssd\n\n' "$T/origin-$name.img"
		printf '[disk plain]\norigin = file:%s\nread_only = yes\n\n' "$T/origin-$name.img"
		printf '[target %s]\nlun.0 = hit\nlun.1 = plain\nallow = ALL\n' "$IQN"
	} >"$st.conf"
	# shellcheck disable=SC2086
	HL_HOTLUND=$bin HL_WRAPPER="${env:+env $env}" hl_start_hotlund "$st.conf"
	if [ -n "${PIN%%:*}" ]; then
		taskset -a -p -c "${PIN%%:*}" "$HL_PID" >/dev/null || hl_error "taskset ${PIN%%:*} $HL_PID failed"
	fi
	if [ -n "$NICE" ]; then
		for t in /proc/"$HL_PID"/task/*; do
			renice -n "$NICE" -p "${t##*/}" >/dev/null || hl_error "renice $NICE failed"
		done
	fi
	for pass in 1 2 3 4 5 6; do
		m0=$(hl_cache_stat "$st/ctl.sock" ssd read_misses)
		seq 0 $(((RANGE_B >> 20) - 1)) | shuf >"$T/warm.blocks"
		"${RUN[@]}" "$BENCH" --workload "trace:blocks:$T/warm.blocks" --bs 1M --qd 4 \
			--count $((RANGE_B >> 20)) --quiet "iscsi://$HOST:$port/$IQN/0" >/dev/null \
			2>>"$OUT/bench.err" || hl_error "warm-up failed"
		sleep 1
		m1=$(hl_cache_stat "$st/ctl.sock" ssd read_misses)
		[ "$m1" = "$m0" ] && break
	done
	printf -v "PID_$name" %s "$HL_PID"
	printf -v "PORT_$name" %s "$port"
	hl_log "$name ($bin${env:+, $env}) cache block $cbs: warm after $pass passes"
}

# median of the arguments
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

{
	echo "A = $A_BIN${A_ENV:+ ($A_ENV)}, B = $B_BIN${B_ENV:+ ($B_ENV)}; NET=$NET, $TIME s a run, $ROUNDS runs each, $SESSIONS session(s)"
	echo
	echo "| cache block | LUN | I/O | A: IOPS | B: IOPS | A: CPU µs/IO | B: CPU µs/IO | CPU A / B (median) | IOPS A / B (median) | A: dev | B: dev |"
	echo "| ---: | --- | --- | --- | --- | --- | --- | ---: | ---: | --- | --- |"
} >"$OUT/results.md"
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
luns=0
[ "$UNCACHED" = 1 ] && luns="0 1"
for cbs in $BLOCKS; do
	start A "$A_BIN" "${A_ENV:-}" "$cbs"
	start B "$B_BIN" "${B_ENV:-}" "$cbs"
	for lun in $luns; do
		for cell in $CELLS; do
			bs=${cell%:*} qd=${cell#*:}
			ai=() bi=() ac=() bc=() aq=() bq=()
			for r in $(seq 1 "$ROUNDS"); do
				order="A B"
				[ $((r % 2)) = 0 ] && order="B A"
				for x in $order; do
					pid=PID_$x port=PORT_$x
					read -r i c q <<<"$(bench "${!pid}" "${!port}" "$lun" "$bs" "$qd" "$x")"
					if [ $x = A ]; then ai+=("$i") ac+=("$c") aq+=("$q"); else bi+=("$i") bc+=("$c") bq+=("$q"); fi
				done
			done
			printf '| %s | %s | %s QD%s | %s | %s | %s | %s | %.2f | %.2f | %s | %s |\n' "$cbs" \
				"$([ "$lun" = 0 ] && echo hit || echo uncached)" "$bs" "$qd" \
				"${ai[*]}" "${bi[*]}" "${ac[*]}" "${bc[*]}" \
				"$(awk -v a="$(median "${ac[@]}")" -v b="$(median "${bc[@]}")" 'BEGIN {print b ? a / b : 0}')" \
				"$(awk -v a="$(median "${ai[@]}")" -v b="$(median "${bi[@]}")" 'BEGIN {print b ? a / b : 0}')" \
				"${aq[*]}" "${bq[*]}" |
				tee -a "$OUT/results.md"
		done
	done
	hl_check_alive "$PID_A"
	hl_check_alive "$PID_B"
	hl_stop "$PID_A"
	hl_stop "$PID_B"
done
{
	echo
	echo "machine: $(nproc) CPUs, $(uname -r), load average before: $LOAD0, after: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ)${PIN:+, pinned hotlund:client = $PIN$PIN_IRQ}${SPIN_PIDS:+, NOHALT=1}${NICE:+, nice $NICE}"
} >>"$OUT/results.md"
cat "$OUT/results.md"
if [ "$SYSCALLS" = 1 ]; then cat "$OUT/syscalls.txt"; fi
if [ "${TRACE:-0}" = 1 ]; then cat "$OUT/turns.txt"; fi
