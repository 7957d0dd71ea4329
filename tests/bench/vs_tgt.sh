#!/bin/bash
# vs_tgt.sh - hotlund and tgt side by side on the same backing file (in the
# page cache), each on its own free loopback port, driven by libiscsi's
# iscsi-perf:
#   4 KiB random read, 64 in flight
#   1 MiB sequential read, 8 in flight
#   4 KiB random read, 1 in flight (latency bound)
# plus, when built, hotlun-bench's 1 MiB sequential read at 8 in flight as a
# second opinion. Runs alternate between the two targets (ROUNDS rounds of
# SECONDS each) and the median of each side is reported with the ratio
# hotlund/tgt. Not part of `make check`; results go into docs/benchmarks.md.
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

# perf URL ARGS...: iscsi-perf for $DUR seconds; prints its final average IOPS.
perf() {
	local url=$1 log
	shift
	log=$(mktemp "$T/perf.XXXXXX")
	timeout -s INT "$DUR" iscsi-perf "$@" "$url" >"$log" 2>&1
	tr '\r' '\n' <"$log" | grep -o 'iops average [0-9]*' | tail -1 | awk '{print $3}'
}

# bench URL: hotlun-bench 1 MiB sequential read, 8 in flight; prints IOPS.
bench() {
	"$HL_BUILDDIR/hotlun-bench" --workload seq --bs 1M --qd 8 --time "$DUR" --quiet "$1" 2>&1 |
		tail -1 | tr ' ' '\n' | sed -n 's/^iops=//p'
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
		for side in hotlund tgt; do
			url=$H_URL
			[ $side = tgt ] && url=$G_URL
			if [ "$w" = 1m-seq-qd8-bench ]; then
				v=$(bench "$url")
			else
				# shellcheck disable=SC2046
				v=$(perf "$url" $(args_of "$w"))
			fi
			echo "$w $side $r ${v:-0}" | tee -a "$OUT/raw.txt"
		done
	done
	hl_check_alive "$H_PID"
done

{
	echo "| workload | hotlund IOPS | tgt IOPS | hotlund/tgt |"
	echo "| --- | ---: | ---: | ---: |"
	for w in "${WORKLOADS[@]}"; do
		h=$(awk -v w="$w" '$1 == w && $2 == "hotlund" {print $4}' "$OUT/raw.txt" | median)
		g=$(awk -v w="$w" '$1 == w && $2 == "tgt" {print $4}' "$OUT/raw.txt" | median)
		ratio=$(awk -v h="$h" -v g="$g" 'BEGIN {if (g > 0) printf "%.2f", h / g; else print "-"}')
		case $w in
		4k-rand-qd64) d="4 KiB random read, 64 in flight (iscsi-perf -r -m 64 -b 8)" ;;
		1m-seq-qd8) d="1 MiB sequential read, 8 in flight (iscsi-perf -m 8 -b 2048)" ;;
		4k-rand-qd1) d="4 KiB random read, 1 in flight (iscsi-perf -r -m 1 -b 8)" ;;
		1m-seq-qd8-bench) d="1 MiB sequential read, 8 in flight (hotlun-bench --workload seq --bs 1M --qd 8)" ;;
		esac
		echo "| $d | $h | $g | $ratio |"
	done
} >"$OUT/results.md"
{
	echo
	echo "machine: $(nproc) CPUs, $(uname -r), load average before: $LOAD0, after: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "$(date -u +%Y-%m-%dT%H:%MZ); median of $ROUNDS alternating runs of ${DUR} s; backing file $SIZE in the page cache"
	echo "hotlund from $HL_BUILDDIR (source $(git -C "$SRC" describe --always --dirty 2>/dev/null)), default threads; tgtd $(tgtd -V 2>&1 | head -1), default threads"
} >>"$OUT/results.md"
cat "$OUT/results.md"
hl_stop "$G_PID"
hl_stop "$H_PID"
