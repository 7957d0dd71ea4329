#!/bin/bash
# hotlund-vs-tgt.sh - side by side: the same backing file served by tgt and
# by hotlund (with a cache), the same load from hotlun-bench, one chart; and
# iscsi-perf against both as an independent yardstick.
#
# Also shows hotlun-bench's own headroom: the last run reads a range that
# fits hotlund's cache after a warm-up (a fully cached LUN), which must reach
# well above what tgt serves from the page cache.
#
#   contrib/scenarios/hotlund-vs-tgt.sh          (about 3 minutes, needs root for tgtd)
#   TIME=10 contrib/scenarios/hotlund-vs-tgt.sh
#
# Knobs: SIZE (1G) CACHE_SIZE (1G) TIME (30) WARMUP (10) QD (64) SESSIONS (1)
# WORKLOAD (uniform) HOT_RANGE (256M) PERF=0 (skip iscsi-perf) FILL=0 (sparse)
# CACHE_DEV (ram: hotlund's cache in a /dev/shm file, as tgt
# reads from the page cache; file: on disk).
. "$(dirname "$0")/common.sh"
SIZE=${SIZE:-1G}
CACHE_SIZE=${CACHE_SIZE:-1G}
TIME=${TIME:-30}
WARMUP=${WARMUP:-10}
QD=${QD:-64}
SESSIONS=${SESSIONS:-1}
WORKLOAD=${WORKLOAD:-uniform}
HOT_RANGE=${HOT_RANGE:-256M}
FILL=${FILL:-1}
# tgt serves the file from the page cache; give hotlund's cache RAM too
CACHE_DEV=${CACHE_DEV:-ram}
load=(--workload "$WORKLOAD" --bs 4K --qd "$QD" --sessions "$SESSIONS")

make_image "$OUT/origin.img" "$SIZE"
PORT=$(free_port)

perf() { # RUN URL BLOCKS
	[ "${PERF:-1}" = 1 ] && command -v iscsi-perf >/dev/null || return 0
	iscsi-perf -t "$TIME" -m "$QD" -b "$3" -r "$2" 2>&1 | tr '\r' '\n' |
		sed -n 's/.*iops average \([0-9]*\).*/\1/p' | tail -n 1 >"$OUT/$1.perf"
	say "iscsi-perf on $1: $(cat "$OUT/$1.perf") IOPS"
}

start_tgt tgt "$PORT" "$OUT/origin.img"
run_bench tgt "tgt" "${load[@]}" --warmup "$WARMUP" --time "$TIME" --seed 1 "$URL"
perf tgt "$URL" 8
stop_pid "$LAST_PID"

start_hotlund vs-tgt "$PORT" "$OUT/origin.img" "$CACHE_SIZE"
run_bench hotlund "hotlund" "${load[@]}" --warmup "$WARMUP" --time "$TIME" --seed 1 "$URL"
BLK=$(sed -n 's/.* in \([0-9]*\)-byte blocks.*/\1/p' "$OUT/hotlund.out" 2>/dev/null || true)
perf hotlund "$URL" $((4096 / ${BLK:-512}))
run_bench cached "hotlund, $HOT_RANGE fully cached" "${load[@]}" --range "$HOT_RANGE" \
	--warmup "$WARMUP" --time "$TIME" --seed 2 "$URL"
stop_pid "$LAST_PID"

plot hotlund-vs-tgt.svg "hotlund vs tgt: $WORKLOAD 4K reads, QD $QD x $SESSIONS" tgt hotlund cached

tgt_iops=$(field tgt iops)
{
	echo
	echo "hotlund vs tgt ($WORKLOAD, 4K reads, QD $QD x $SESSIONS, ${TIME}s)"
	printf '  %-28s %9s IOPS  p50 %6s us  p99 %6s us   iscsi-perf %s\n' \
		tgt "$tgt_iops" "$(field tgt p50_us)" "$(field tgt p99_us)" "$(cat "$OUT/tgt.perf" 2>/dev/null)"
	printf '  %-28s %9s IOPS  p50 %6s us  p99 %6s us   iscsi-perf %s\n' \
		hotlund "$(field hotlund iops)" "$(field hotlund p50_us)" "$(field hotlund p99_us)" \
		"$(cat "$OUT/hotlund.perf" 2>/dev/null)"
	printf '  %-28s %9s IOPS  p50 %6s us  p99 %6s us\n' "hotlund, $HOT_RANGE cached" \
		"$(field cached iops)" "$(field cached p50_us)" "$(field cached p99_us)"
	awk -v a="$(field cached iops)" -v b="$tgt_iops" \
		'BEGIN { if (b > 0) printf "  fully cached hotlund / tgt: %.2fx\n", a / b }'
	echo "  chart: $OUT/hotlund-vs-tgt.svg"
} | tee -a "$OUT/summary.txt"
