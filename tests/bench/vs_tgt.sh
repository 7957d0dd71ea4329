#!/bin/bash
# vs_tgt.sh - hotlund and tgt side by side on the same backing file (in the
# page cache), each on its own free loopback port, driven by libiscsi's
# iscsi-perf:
#   4 KiB random read, 64 in flight
#   1 MiB sequential read, 8 in flight
#   4 KiB random read, 1 in flight (latency bound)
# plus, when built, hotlun-bench's 1 MiB sequential read at 8 in flight as a
# second opinion. Runs alternate between the two targets (ROUNDS rounds of
# SECONDS each, the order reversed every other round) and the median of
# each side is reported with the ratio hotlund/tgt, and each target's CPU
# microseconds per I/O (utime + stime of its process over the run / I/Os;
# iscsi-perf's I/Os are its average IOPS x the run's seconds). Not part of
# `make check`; results go into docs/benchmarks.md.
#
# usage: tests/bench/vs_tgt.sh [BUILDDIR]
# environment: SECONDS_PER_RUN (default 10), ROUNDS (default 3),
#              SIZE (backing file, default 1G), HL_OUT (default ./vs-tgt),
#              HL_GLOBAL_EXTRA (a line for hotlund's [global], e.g. "poll_us = 0")
# Needs root (tgtd).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export HL_SRCDIR=$SRC HL_BUILDDIR=${1:-${HL_BUILDDIR:-$SRC/build}}
. "$SRC/tests/functional/lib.sh"
hl_need iscsi-perf tgtd
DUR=${SECONDS_PER_RUN:-10}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-1G}
OUT=${HL_OUT:-$PWD/vs-tgt}
mkdir -p "$OUT"
T=$(hl_tmpdir)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# One backing file with real data, read once so both targets hit the page cache.
DISK=$T/backing.img
hl_log "writing $SIZE of random data to $DISK"
head -c "$SIZE" /dev/urandom >"$DISK" || hl_error "cannot write $DISK"
cat "$DISK" >/dev/null

HL_LOG_LEVEL=notice hl_target_start --disk "$DISK"
H_URL=$HL_URL H_PID=$HL_PID
HL_TARGET=tgt hl_target_start --disk "$DISK"
G_URL=$HL_URL G_PID=$HL_PID

# cpu_ticks PID: utime + stime of PID in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)

# perf PID URL ARGS...: iscsi-perf for $DUR seconds; prints its final average
# IOPS and the target's (PID) CPU us per I/O.
perf() {
	local pid=$1 url=$2 log t0 t1 s0 s1 iops
	shift 2
	log=$(mktemp "$T/perf.XXXXXX")
	t0=$(cpu_ticks "$pid") s0=$(date +%s.%N)
	timeout -s INT "$DUR" iscsi-perf "$@" "$url" >"$log" 2>&1
	t1=$(cpu_ticks "$pid") s1=$(date +%s.%N)
	iops=$(tr '\r' '\n' <"$log" | grep -o 'iops average [0-9]*' | tail -1 | awk '{print $3}')
	awk -v i="${iops:-0}" -v d=$((t1 - t0)) -v k="$TCK" -v a="$s0" -v b="$s1" \
		'BEGIN {s = b - a; printf "%d %.1f\n", i, (i * s > 0 ? d * 1e6 / k / (i * s) : 0)}'
}

# bench PID URL: hotlun-bench 1 MiB sequential read, 8 in flight; prints IOPS and CPU us per I/O.
bench() {
	local pid=$1 t0 t1 line
	t0=$(cpu_ticks "$pid")
	line=$("$HL_BUILDDIR/hotlun-bench" --workload seq --bs 1M --qd 8 --time "$DUR" --quiet "$2" 2>&1 | tail -1)
	t1=$(cpu_ticks "$pid")
	awk -v i="$(tr ' ' '\n' <<<"$line" | sed -n 's/^iops=//p')" \
		-v n="$(tr ' ' '\n' <<<"$line" | sed -n 's/^ios=//p')" -v d=$((t1 - t0)) -v k="$TCK" \
		'BEGIN {printf "%d %.1f\n", i, (n > 0 ? d * 1e6 / k / n : 0)}'
}

WORKLOADS=("4k-rand-qd64" "1m-seq-qd8" "4k-rand-qd1")
args_of() {
	case $1 in
	4k-rand-qd64) echo "-r -m 64 -b 8" ;;
	1m-seq-qd8) echo "-m 8 -b 2048" ;;
	4k-rand-qd1) echo "-r -m 1 -b 8" ;;
	esac
}
[ -x "$HL_BUILDDIR/hotlun-bench" ] && WORKLOADS+=("1m-seq-qd8-bench")

median() { sort -n | awk '{a[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%d\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

: >"$OUT/raw.txt"
for w in "${WORKLOADS[@]}"; do
	for r in $(seq 1 "$ROUNDS"); do
		order="hotlund tgt"
		[ $((r % 2)) = 0 ] && order="tgt hotlund"
		for side in $order; do
			url=$H_URL pid=$H_PID
			[ $side = tgt ] && url=$G_URL pid=$G_PID
			if [ "$w" = 1m-seq-qd8-bench ]; then
				v=$(bench "$pid" "$url")
			else
				# shellcheck disable=SC2046
				v=$(perf "$pid" "$url" $(args_of "$w"))
			fi
			echo "$w $side $r ${v:-0 0}" | tee -a "$OUT/raw.txt"
		done
	done
	hl_check_alive "$H_PID"
done

{
	echo "| workload | hotlund IOPS | tgt IOPS | hotlund/tgt | hotlund CPU µs/IO | tgt CPU µs/IO |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: |"
	for w in "${WORKLOADS[@]}"; do
		h=$(awk -v w="$w" '$1 == w && $2 == "hotlund" {print $4}' "$OUT/raw.txt" | median)
		g=$(awk -v w="$w" '$1 == w && $2 == "tgt" {print $4}' "$OUT/raw.txt" | median)
		hc=$(awk -v w="$w" '$1 == w && $2 == "hotlund" {print $5 * 10}' "$OUT/raw.txt" | median)
		gc=$(awk -v w="$w" '$1 == w && $2 == "tgt" {print $5 * 10}' "$OUT/raw.txt" | median)
		ratio=$(awk -v h="$h" -v g="$g" 'BEGIN {if (g > 0) printf "%.2f", h / g; else print "-"}')
		case $w in
		4k-rand-qd64) d="4 KiB random read, 64 in flight (iscsi-perf -r -m 64 -b 8)" ;;
		1m-seq-qd8) d="1 MiB sequential read, 8 in flight (iscsi-perf -m 8 -b 2048)" ;;
		4k-rand-qd1) d="4 KiB random read, 1 in flight (iscsi-perf -r -m 1 -b 8)" ;;
		1m-seq-qd8-bench) d="1 MiB sequential read, 8 in flight (hotlun-bench --workload seq --bs 1M --qd 8)" ;;
		esac
		echo "| $d | $h | $g | $ratio | $(awk -v c="$hc" 'BEGIN {printf "%.1f", c / 10}') | $(awk -v c="$gc" 'BEGIN {printf "%.1f", c / 10}') |"
	done
} >"$OUT/results.md"
{
	echo
	echo "machine: $(nproc) CPUs, $(uname -r), load average before: $LOAD0, after: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "$(date -u +%Y-%m-%dT%H:%MZ); median of $ROUNDS alternating runs of ${DUR} s (order reversed every other round); backing file $SIZE in the page cache"
	echo "hotlund from $HL_BUILDDIR (source $(git -C "$SRC" describe --always --dirty 2>/dev/null)), default threads; tgtd $(tgtd -V 2>&1 | head -1), default threads"
} >>"$OUT/results.md"
cat "$OUT/results.md"
hl_stop "$G_PID"
hl_stop "$H_PID"
