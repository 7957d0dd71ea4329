#!/bin/bash
# metrics_cost.sh - issue 28, item 3: what recording the per-disk latency
# histograms costs (docs/benchmarks.md, "Cost of the latency histograms").
# hotlund serves two 256 MiB file disks, one behind a warm 512 MiB cache,
# one without; hotlun-bench reads 4K at queue depth 64 from each. Recording
# on (the default) and off (HOTLUN_COUNT_NO_LATENCY=1: no clock read, no
# histogram) alternate round by round, the order swapped every other round,
# each round a fresh hotlund; printed: the IOPS and hotlund's CPU time per
# I/O (utime + stime from /proc over the run) of every run, then medians.
# With CALLGRIND=1 it also counts hotlund's instructions per I/O under
# valgrind --tool=callgrind, on and off (independent of the machine's load),
# and the counting wrapper's own (tests/bench/count_cost.c: reads through
# the wrapper alone, no event loop), under callgrind and natively.
#
#   tests/bench/metrics_cost.sh   (BUILD=dir; ROUNDS=5; SECONDS_RUN=10; CALLGRIND=1)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
ROUNDS=${ROUNDS:-5}
RUN=${SECONDS_RUN:-10}
tmp=$(mktemp -d /tmp/hotlun-cost.XXXXXX)
pid=
declare -A ir
cleanup() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
iqn=iqn.2026-11.io.hotlun:cost
truncate -s 256M "$tmp/cached.img" "$tmp/plain.img"
cat >"$tmp/h.conf" <<EOF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/state
control_socket = $tmp/ctl.sock
threads = 2

[cache c]
device = $tmp/cache.img
size = 512M
block_size = 4K
admission = always

[disk cached]
origin = file:$tmp/cached.img
cache = c

[disk plain]
origin = file:$tmp/plain.img

[target $iqn]
lun.0 = cached
lun.1 = plain
allow = ALL
EOF

start() { # start MODE [WRAPPER...]
	local mode=$1
	shift
	if [ "$mode" = off ]; then
		HOTLUN_COUNT_NO_LATENCY=1 "$@" "$BUILD/hotlund" --config "$tmp/h.conf" >>"$tmp/hotlund.log" 2>&1 &
	else
		"$@" "$BUILD/hotlund" --config "$tmp/h.conf" >>"$tmp/hotlund.log" 2>&1 &
	fi
	pid=$!
	for _ in $(seq 1 600); do
		[ -S "$tmp/ctl.sock" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "hotlund did not start" >&2
	exit 1
}
stop() {
	kill -TERM "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	rm -f "$tmp/ctl.sock"
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
# run LUN: one bench run; prints "iops cpu_us_per_io"
run() {
	local t0 t1 out ios
	t0=$(cpu_ticks)
	out=$("$BUILD/hotlun-bench" --quiet --bs 4K --qd 64 --read 100 --range 256M --time "$RUN" \
		"iscsi://127.0.0.1:$port/$iqn/$1" 2>/dev/null | tail -n 1)
	t1=$(cpu_ticks)
	ios=$(sed -n 's/.* ios=\([0-9]*\) .*/\1/p' <<<"$out")
	echo "$(sed -n 's/.* iops=\([0-9.]*\) .*/\1/p' <<<"$out") $(echo "($t1 - $t0) * 1000000 / $(getconf CLK_TCK) / $ios" | bc -l)"
}

# warm the cache once: every 4K block of the cached disk
start on
"$BUILD/hotlun-bench" --quiet --workload seq --bs 64K --qd 8 --read 100 --count 4096 \
	"iscsi://127.0.0.1:$port/$iqn/0" >/dev/null 2>&1
"$BUILD/hotlun-bench" --quiet --bs 4K --qd 64 --read 100 --time "$RUN" \
	"iscsi://127.0.0.1:$port/$iqn/0" >/dev/null 2>&1
stop

: >"$tmp/results"
for r in $(seq 1 "$ROUNDS"); do
	order="on off"
	[ $((r % 2)) = 0 ] && order="off on"
	for mode in $order; do
		start "$mode"
		read -r ci cc <<<"$(run 0)"
		read -r pi pc <<<"$(run 1)"
		stop
		printf 'round=%s latency=%s cached_iops=%.0f cached_cpu_us=%.2f plain_iops=%.0f plain_cpu_us=%.2f\n' \
			"$r" "$mode" "$ci" "$cc" "$pi" "$pc" | tee -a "$tmp/results"
	done
done
[ "$ROUNDS" -gt 0 ] && python3 - "$tmp/results" <<'PY'
import statistics, sys
rows = [dict(kv.split("=") for kv in l.split()) for l in open(sys.argv[1])]
med = lambda mode, k: statistics.median(float(r[k]) for r in rows if r["latency"] == mode)
for k in ("cached_iops", "cached_cpu_us", "plain_iops", "plain_cpu_us"):
    on, off = med("on", k), med("off", k)
    print(f"median {k}: on {on:.2f} off {off:.2f} on/off {on / off:.4f}")
PY

if [ "${CALLGRIND:-0}" = 1 ]; then
	# Two counts per mode: the difference is the I/O alone (start-up and
	# shutdown, the same in both runs, cancel out).
	# No busy-polling under valgrind: a reactor spinning while it waits would
	# count instructions that depend on timing, not on the work.
	sed -i 's/^threads = 2$/&\npoll_us = 0/' "$tmp/h.conf"
	for mode in off on; do
		for n in 20000 40000; do
			start "$mode" valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$mode.$n.%p"
			"$BUILD/hotlun-bench" --quiet --bs 4K --qd 64 --read 100 --count "$n" --seed 1 \
				"iscsi://127.0.0.1:$port/$iqn/0" >/dev/null 2>&1
			stop
			ir[$n]=$(callgrind_annotate "$tmp"/cg."$mode"."$n".* 2>/dev/null |
				sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
		done
		echo "callgrind latency=$mode instructions_20k=${ir[20000]} instructions_40k=${ir[40000]}" \
			"per_io=$(((ir[40000] - ir[20000]) / 20000))"
	done
fi

if [ "${CALLGRIND:-0}" = 1 ]; then
	# the wrapper alone: instructions per read (two counts: the slope), and native time
	libs=$(sed -n 's/^\(LIBISCSI_LIBS\|URING_LIBS\|CRYPTO_LIBS\|JANSSON_LIBS\|RBD_LIBS\) = //p' \
		"$BUILD/Makefile" | tr '\n' ' ')
	# shellcheck disable=SC2086
	cc -O2 -D_GNU_SOURCE -I "$BUILD" -I "$SRC/include" -I "$SRC/src" "$SRC/tests/bench/count_cost.c" \
		"$BUILD/.libs/libhotlun.a" $libs -lm -pthread -o "$tmp/count_cost"
	for mode in off on; do
		for n in 100000 200000; do
			if [ "$mode" = off ]; then
				HOTLUN_COUNT_NO_LATENCY=1 valgrind --tool=callgrind \
					--callgrind-out-file="$tmp/cc.$mode.$n" "$tmp/count_cost" "$n" >/dev/null 2>&1
			else
				valgrind --tool=callgrind --callgrind-out-file="$tmp/cc.$mode.$n" \
					"$tmp/count_cost" "$n" >/dev/null 2>&1
			fi
			ir[$n]=$(callgrind_annotate "$tmp/cc.$mode.$n" |
				sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,)
		done
		echo "count_cost latency=$mode per_io=$(((ir[200000] - ir[100000]) / 100000)) instructions"
	done
	if command -v farm-bench >/dev/null; then
		farm-bench -n 7 --timeout 300 \
			--vs "env HOTLUN_COUNT_NO_LATENCY=1 $tmp/count_cost 20000000" -- "$tmp/count_cost" 20000000 |
			grep -E '^(A|B) (user|cpu) s|^A/B cpu'
	fi
fi
