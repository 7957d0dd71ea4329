#!/bin/bash
# cache_field.sh - issue 4 field benchmark: how fast a cold cache in front of
# a slow origin warms up, and what it delivers once warm.
#
# Each run starts one hotlund with a cold cache (fresh device file) whose
# disk is a file origin throttled to ORIGIN_IOPS (the slow SAN) and drives
# it with hotlun-bench: 4 KiB random reads, 64 in flight, hotset:90/10 over
# a RANGE that fits the cache, for TIME seconds, one CSV row per second.
# Runs:
#   origin-<iops>          the throttled origin alone (no cache): the baseline
#   cache<bs>-<iops>       the same with the cache (block size 4K and 64K)
#   cached-<bs>            unthrottled origin with the cache: once warm (within
#                          a second) every read is a hit: the cache's ceiling
#   ram                    an unthrottled LUN whose data sits in the page cache
#                          (no throttle, no cache): what the target can do
# For each cached run: steady state (median IOPS of the last quarter), the
# first second at >= 90% of it, and the ratios to the origin alone, to the
# unthrottled cached LUN (same block size) and to "ram".
# Not part of `make check`. Results: $HL_OUT/summary.md (a table for
# docs/benchmarks.md), per-run CSV and SVG.
#
# usage: tests/bench/cache_field.sh [BUILDDIR]
# environment: TIME (default 60), RANGE (default 64M), SIZE (LUN, default 1G),
#              IOPS_LIST (default "200 4000"), BS_LIST (default "4K 64K"),
#              REFS (default 1; 0 skips the reference runs), HL_OUT (default ./cache-field),
#              CACHE_DIR (where the cache device file lives; default the run's
#              temp dir on the local disk; /dev/shm makes it a RAM-speed "SSD")
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export HL_SRCDIR=$SRC HL_BUILDDIR=${1:-${HL_BUILDDIR:-$SRC/build}}
. "$SRC/tests/functional/lib.sh"
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_error "$BENCH not built"
TIME=${TIME:-60}
RANGE=${RANGE:-64M}
SIZE=${SIZE:-1G}
IOPS_LIST=${IOPS_LIST:-200 4000}
BS_LIST=${BS_LIST:-4K 64K}
REFS=${REFS:-1} # 0: only the cached runs (the origin alone counts as its nominal IOPS)
OUT=${HL_OUT:-$PWD/cache-field}
mkdir -p "$OUT"
T=$(hl_tmpdir)
CDIR=${CACHE_DIR:-$T}
CDEV=$CDIR/hotlun-cache-field.$$.img
trap 'rm -f "$CDEV" "$CDEV.map"; hl_cleanup' EXIT
IQN=$HL_IQN_PREFIX:cache-field

DISK=$T/origin.img
hl_log "writing $SIZE of random data to $DISK"
head -c "$SIZE" /dev/urandom >"$DISK" || hl_error "cannot write $DISK"
cat "$DISK" >/dev/null

# run LABEL IOPS CACHE_BS: one hotlund, one hotlun-bench run; prints the summary line.
run() {
	local label=$1 iops=$2 cbs=$3 port st conf
	port=$(hl_free_port)
	st=$T/state-$label
	rm -rf "$st" "$CDEV" "$CDEV.map"
	mkdir -p "$st"
	conf=$T/$label.conf
	{
		printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s\ncontrol_socket = %s/ctl.sock\n' \
			"$port" "$st" "$st"
		printf 'log_level = notice\nthreads = 2\n\n'
		if [ "$cbs" != - ]; then
			printf '[cache ssd]\ndevice = %s\nsize = 1G\nblock_size = %s\n\n' "$CDEV" "$cbs"
		fi
		printf '[disk d]\norigin = file:%s\n' "$DISK"
		[ "$iops" != 0 ] && printf 'origin_iops = %s\n' "$iops"
		[ "$cbs" != - ] && printf 'cache = ssd\n'
		printf '\n[target %s]\nlun.0 = d\nallow = ALL\n' "$IQN"
	} >"$conf"
	hl_start_hotlund "$conf"
	"$BENCH" --workload hotset:90/10 --range "$RANGE" --bs 4K --qd 64 --time "$TIME" --seed 7 \
		--label "$label" --csv "$OUT/$label.csv" --svg "$OUT/$label.svg" --quiet \
		"iscsi://127.0.0.1:$port/$IQN/0" 2>"$OUT/$label.err" | tail -1 >"$OUT/$label.summary"
	hl_stop "$HL_PID"
	cp "$HL_LOG" "$OUT/$label.hotlund.log"
	cat "$OUT/$label.summary" >&2
}

# iops_col CSV: the IOPS column of the measured rows, one per line.
iops_col() {
	awk -F, '!/^#/ && $1 != "t_s" && $2 != "warmup" {print $3}' "$1"
}

# steady CSV: median IOPS of the last quarter of the run.
steady() {
	local n
	n=$(iops_col "$1" | wc -l)
	n=$((n / 4 > 0 ? n / 4 : 1))
	iops_col "$1" | tail -n "$n" | sort -n |
		awk '{a[NR] = $1} END {if (!NR) print 0; else if (NR % 2) printf "%d\n", a[(NR + 1) / 2];
			else printf "%d\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# t90 CSV STEADY: first second at >= 90% of STEADY ("-" if never).
t90() {
	iops_col "$1" | awk -v s="$2" '$1 >= 0.9 * s {print NR; f = 1; exit} END {if (!f) print "-"}'
}

RAM=0
declare -A REF
if [ "$REFS" = 1 ]; then
	run ram 0 -
	RAM=$(steady "$OUT/ram.csv")
	for bs in $BS_LIST; do
		run "cached-$bs" 0 "$bs"
		REF[$bs]=$(steady "$OUT/cached-$bs.csv")
	done
fi
{
	echo "| origin IOPS | cache block | origin alone (IOPS) | steady state (IOPS) | x origin | % of unthrottled cached LUN | % of RAM LUN | s to 90% of steady |"
	echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} >"$OUT/summary.md"
for iops in $IOPS_LIST; do
	ORIG=$iops
	if [ "$REFS" = 1 ]; then
		run "origin-$iops" "$iops" -
		ORIG=$(steady "$OUT/origin-$iops.csv")
	fi
	for bs in $BS_LIST; do
		l=cache$bs-$iops
		run "$l" "$iops" "$bs"
		S=$(steady "$OUT/$l.csv")
		awk -v i="$iops" -v b="$bs" -v o="$ORIG" -v s="$S" -v f="${REF[$bs]:-0}" -v r="$RAM" \
			-v t="$(t90 "$OUT/$l.csv" "$S")" \
			'BEGIN {printf "| %s | %s | %d | %d | %.1fx | %.0f%% | %.0f%% | %s |\n", i, b, o, s,
				o ? s / o : 0, f ? 100 * s / f : 0, r ? 100 * s / r : 0, t}' >>"$OUT/summary.md"
	done
done
{
	echo
	echo "Unthrottled origin with a warm cache (the cache's ceiling here):"
	for bs in $BS_LIST; do echo "- block $bs: ${REF[$bs]:-not measured} IOPS"; done
	echo "- unthrottled LUN in the page cache, no cache: $RAM IOPS"
	echo "hotset:90/10 over $RANGE, 4 KiB random reads, qd 64, ${TIME} s per run, $(nproc) CPUs"
} >>"$OUT/summary.md"
cat "$OUT/summary.md"
