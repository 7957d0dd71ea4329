# contrib/scenarios/warmup-curve.sh - the body of the three field-test
# scenarios (sourced after common.sh with ORIGIN_IOPS, ORIGIN_LAT_MS, NAME and
# TITLE set): an origin throttled to behave like the field's storage, first
# alone, then behind hotlund with a cold cache (the warm-up curve), then warm;
# all three in one chart, and the numbers the field reports quote.

SIZE=${SIZE:-4G}
CACHE_SIZE=${CACHE_SIZE:-1G}
TIME=${TIME:-300}
WARM_TIME=${WARM_TIME:-60}
BASE_TIME=${BASE_TIME:-30}
QD=${QD:-32}
SESSIONS=${SESSIONS:-1}
WORKLOAD=${WORKLOAD:-hotset:90/10}
BS=${BS:-4K}
READ=${READ:-100}

make_image "$OUT/origin.img" "$SIZE"
PORT=$(free_port)
load=(--workload "$WORKLOAD" --bs "$BS" --read "$READ" --qd "$QD" --sessions "$SESSIONS")

# 1. The origin alone: hotlund without a cache, same throttle.
start_hotlund "$NAME-origin" "$PORT" "$OUT/origin.img" 0 "origin_iops=$ORIGIN_IOPS" \
	"origin_latency_ms=$ORIGIN_LAT_MS"
run_bench origin "origin alone ($ORIGIN_IOPS IOPS)" "${load[@]}" --time "$BASE_TIME" --seed 1 \
	"$URL"
stop_pid "$LAST_PID"

# 2. and 3. The same origin behind hotlund with a cache: cold, then warm.
start_hotlund "$NAME" "$PORT" "$OUT/origin.img" "$CACHE_SIZE" "origin_iops=$ORIGIN_IOPS" \
	"origin_latency_ms=$ORIGIN_LAT_MS"
run_bench cold "hotlund, cold cache" "${load[@]}" --time "$TIME" --seed 2 "$URL"
run_bench warm "hotlund, warm cache" "${load[@]}" --time "$WARM_TIME" --seed 3 "$URL"
stop_pid "$LAST_PID"

plot "$NAME.svg" "$TITLE: $WORKLOAD, $BS, QD $QD x $SESSIONS" origin cold warm

# IOPS of the first and last 10 measured seconds of the cold run.
edge() { # CSV head|tail
	grep -v '^#' "$OUT/cold.csv" | awk -F, 'NR > 1 && $2 == "m" { print $3 }' | "$2" -n 10 |
		awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n; else print 0 }'
}
{
	echo
	echo "$TITLE"
	echo "  origin alone:          $(field origin iops) IOPS, p99 $(field origin p99_us) us"
	echo "  hotlund cold, first 10 s: $(edge cold head) IOPS"
	echo "  hotlund cold, last 10 s:  $(edge cold tail) IOPS"
	echo "  hotlund warm:          $(field warm iops) IOPS, p99 $(field warm p99_us) us"
	echo "  chart: $OUT/$NAME.svg"
} | tee -a "$OUT/summary.txt"
