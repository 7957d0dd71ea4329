#!/bin/bash
# cache_remove_many.sh - a reload that removes three cached disks whose fills
# are held (HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS=6000, past three drain
# bounds of HOTLUN_TEST_CACHE_DRAIN_MS=1500):
#  1. the three detaches wait at the same time: the reload answers in about
#     one bound (< 2 bounds), not three one after the other (4.5 s);
#  2. the control socket answers meanwhile: `hotlunctl stats` and a scrape
#     of /metrics (its snapshot is taken on the control reactor) return
#     within 1 s while the reload waits, and a second reload is refused
#     with a clear error (disks still closing), nothing changed;
#  3. the abandoned fills land later and install nothing: once they have,
#     nothing is in flight, the cache's orphan_drops (hotlunctl stats
#     --json, and hotlun_cache_orphan_drops_total in /metrics) counts
#     their drops, and the disks re-added serve their origins' data (0
#     blocks differ);
#  3b. the same removal by SIGHUP closes in the background too: a request
#     meanwhile is answered at once (a change refused while fills are held);
#  4. a stop (SIGTERM) while such a reload's closes run waits for them,
#     the reload gets its reply, and hotlund exits cleanly.
. "$(dirname "$0")/lib.sh"

hl_need python3 qemu-img curl
hl_cache_front_prereqs
CTL=$HL_BUILDDIR/hotlunctl
T=$(hl_tmpdir)
IQN=$HL_IQN_PREFIX:rmmany
BOUND=1500
port=$(hl_free_port)
MP=$(hl_free_port)
while [ "$MP" = "$port" ]; do MP=$(hl_free_port); done
mkdir -p "$T/st"
sock=$T/st/ctl.sock

for i in 0 1 2; do
	head -c 64M /dev/urandom >"$T/o$i.img" || hl_error "cannot write $T/o$i.img"
done

# conf FILE yes|no: the cache, with or without the three disks and their target
conf() {
	{
		printf '[global]\nportal = 127.0.0.1:%s\n' "$port"
		printf 'state_dir = %s\ncontrol_socket = %s\nlog_level = info\nthreads = 2\n' \
			"$T/st" "$sock"
		printf 'metrics_listen = 127.0.0.1:%s\n\n' "$MP"
		printf '[cache ssd]\ndevice = %s\nsize = 192M\nblock_size = 4K\nadmission = always\n\n' \
			"$T/cache.img"
		if [ "$2" = yes ]; then
			for i in 0 1 2; do
				printf '[disk d%s]\norigin = file:%s\ncache = ssd\n\n' "$i" "$T/o$i.img"
			done
			printf '[target %s]\nlun.0 = d0\nlun.1 = d1\nlun.2 = d2\nallow = ALL\n' "$IQN"
		fi
	} >"$1"
}
conf "$T/with.conf" yes
conf "$T/none.conf" no
cp "$T/with.conf" "$T/live.conf"

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# Abandoned requests are never freed (a late completion would find them): an
# ASan build's leak check would list them at exit; the other checks stay on.
asan=${ASAN_OPTIONS:-}
export HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS=6000 HOTLUN_TEST_CACHE_DRAIN_MS=$BOUND
export ASAN_OPTIONS=${asan:+$asan:}detect_leaks=0
hl_front_start "$T/live.conf"
unset HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS HOTLUN_TEST_CACHE_DRAIN_MS
if [ -n "$asan" ]; then export ASAN_OPTIONS=$asan; else unset ASAN_OPTIONS; fi

# reads_all SECS: reads on the three LUNs at once for SECS seconds (random
# 4K over 48 MiB: misses that fill, their fills held)
reads_all() {
	for i in 0 1 2; do
		hl_spawn "bench$i" "$T/bench$i.out" "$BENCH" --quiet --read 100 --qd 8 --range 48M \
			--time "$1" "iscsi://127.0.0.1:$port/$IQN/$i"
		bench[$i]=$HL_LAST_PID
	done
	for i in 0 1 2; do
		wait "${bench[$i]}" || hl_fail "reads on LUN $i failed: $(tail -n 3 "$T/bench$i.out")"
		hl_forget "${bench[$i]}"
	done
}
reads_all 2
n=$(hl_cache_stat "$sock" ssd inflight)
[ "${n:-0}" -gt 0 ] || hl_fail "nothing in flight: the test proves little"
[ "$(hl_cache_stat "$sock" ssd orphan_drops)" = 0 ] || hl_fail "orphan_drops moved before any removal"
hl_log "$n request(s) in flight before the reload"

# ---- 1 and 2: the reload, and the control socket while it waits
cp "$T/none.conf" "$T/live.conf"
t0=$(date +%s%N)
hl_spawn reload "$T/reload.out" "$CTL" --socket "$sock" reload
rpid=$HL_LAST_PID
sleep 0.3
# The second reload first: the closes last one bound (1.5 s) and on a loaded
# machine the stats and the scrape below took that long together (CI run
# 2026-12-07: the second reload came after the closes had ended).
busy=$(timeout 5 "$CTL" --socket "$sock" reload 2>&1) &&
	hl_fail "a second reload while disks close was accepted: $busy"
grep -q 'still closing' <<<"$busy" || hl_fail "the second reload's refusal does not say why: $busy"
ts=$(date +%s%N)
timeout 5 "$CTL" --socket "$sock" stats --json >"$T/stats.out" 2>&1 ||
	hl_fail "hotlunctl stats during the reload failed: $(head -c 300 "$T/stats.out")"
stats_ms=$(ms_since "$ts")
python3 -c 'import json,sys; json.load(open(sys.argv[1]))["caches"]["ssd"]' "$T/stats.out" ||
	hl_fail "stats during the reload is not the cache's: $(head -c 300 "$T/stats.out")"
[ "$stats_ms" -lt 1000 ] || hl_fail "stats took $stats_ms ms during the reload (the control socket was blocked)"
tm=$(date +%s%N)
timeout 5 curl -sf "http://127.0.0.1:$MP/metrics" >"$T/metrics-during.txt" ||
	hl_fail "no scrape of /metrics during the reload"
metrics_ms=$(ms_since "$tm")
grep -q '^hotlun_cache_inflight_requests{cache="ssd"}' "$T/metrics-during.txt" ||
	hl_fail "the scrape during the reload has no cache: $(head -c 300 "$T/metrics-during.txt")"
[ "$metrics_ms" -lt 1000 ] || hl_fail "/metrics took $metrics_ms ms during the reload"
wait "$rpid" || hl_fail "the reload failed: $(cat "$T/reload.out")"
hl_forget "$rpid"
reload_ms=$(ms_since "$t0")
hl_log "reload removing 3 disks took $reload_ms ms (bound $BOUND ms; the daemon's closes: $(sed -n 's/.* 3 disk(s) closed in \([0-9]*\) ms.*/\1/p' "$FRONT_LOG" | tail -n 1) ms); stats answered in $stats_ms ms, /metrics in $metrics_ms ms meanwhile; second reload: $busy"
n=$(grep -c 'disk d[0-2]: [0-9]* request(s) did not finish within 1500 ms: abandoned' "$FRONT_LOG")
[ "$n" = 3 ] || hl_fail "not every disk waited its bound and abandoned ($n of 3): $(grep 'disk d' "$FRONT_LOG" | tail -6)"
# The daemon's own figure for the closes: at load average 13 the wall
# clock around hotlunctl added 1.7 s (3,252 ms in a CI run) to closes that
# waited together; one after the other they take 3 bounds at least.
close_ms=$(sed -n 's/.* 3 disk(s) closed in \([0-9]*\) ms.*/\1/p' "$FRONT_LOG" | tail -n 1)
[ -n "$close_ms" ] || hl_fail "no line for the closes: $(tail -n 5 "$FRONT_LOG")"
[ "$close_ms" -lt $((2 * BOUND)) ] ||
	hl_fail "the closes took $close_ms ms: the detaches waited one after the other (bound $BOUND ms)"
[ "$reload_ms" -lt $((3 * BOUND)) ] ||
	hl_fail "the reload took $reload_ms ms (closes $close_ms ms): three bounds or more"

# ---- 3. the held fills land and install nothing; the disks come back clean
sleep 6.5
hl_check_alive "$FRONT_PID"
[ "$(hl_cache_stat "$sock" ssd inflight)" = 0 ] || hl_fail "the abandoned requests never ended"
drops=$(hl_cache_stat "$sock" ssd orphan_drops)
[ "$drops" -gt 0 ] || hl_fail "the abandoned fills landed but orphan_drops is $drops"
curl -sf "http://127.0.0.1:$MP/metrics" >"$T/metrics.txt" || hl_fail "no scrape of /metrics"
prom=$(sed -n 's/^hotlun_cache_orphan_drops_total{cache="ssd"} \([0-9]*\)$/\1/p' "$T/metrics.txt")
[ "$prom" = "$drops" ] ||
	hl_fail "hotlun_cache_orphan_drops_total is '$prom', stats say $drops: $(grep orphan "$T/metrics.txt")"
hl_log "after the held fills landed: orphan_drops $drops (stats and /metrics)"
cp "$T/with.conf" "$T/live.conf"
out=$("$CTL" --socket "$sock" reload 2>&1) || hl_fail "re-adding the disks refused: $out"
for i in 0 1 2; do
	n=$(hl_stale_blocks "iscsi://127.0.0.1:$port/$IQN/$i" "$T/o$i.img" 4096)
	[ "$n" = 0 ] || hl_fail "$n block(s) of disk d$i differ from its origin after the re-add"
done
hl_check_alive "$FRONT_PID"

# ---- 3b. the same removal by SIGHUP: closes in the background too
reads_all 1
inflight=$(hl_cache_stat "$sock" ssd inflight)
[ "$inflight" -gt 0 ] || hl_fail "3b. nothing in flight before the SIGHUP: the step proves little"
cp "$T/none.conf" "$T/live.conf"
kill -HUP "$FRONT_PID"
sleep 0.3
ts=$(date +%s%N)
out=$(timeout 5 "$CTL" --socket "$sock" reload 2>&1)
rc=$?
ms=$(ms_since "$ts")
[ "$ms" -lt 1000 ] || hl_fail "a request during the SIGHUP's closes took $ms ms"
[ $rc != 0 ] && grep -q 'still closing' <<<"$out" ||
	hl_fail "a reload during the SIGHUP's closes ($inflight request(s) held) was not refused: $out"
for i in $(seq 1 100); do
	[ "$(grep -c '3 disk(s) closed in' "$FRONT_LOG")" = 2 ] && break
	sleep 0.1
done
[ "$(grep -c '3 disk(s) closed in' "$FRONT_LOG")" = 2 ] || hl_fail "the SIGHUP's closes did not end"
hl_log "3b. SIGHUP removing 3 disks ($inflight request(s) in flight): a reload during its closes answered in $ms ms: $out"
cp "$T/with.conf" "$T/live.conf"
out=$("$CTL" --socket "$sock" reload 2>&1) || hl_fail "re-adding the disks after the SIGHUP refused: $out"

# ---- 4. a stop during such a reload waits for its closes, answers it, exits cleanly
reads_all 1
cp "$T/none.conf" "$T/live.conf"
hl_spawn reload "$T/reload2.out" "$CTL" --socket "$sock" reload
rpid=$HL_LAST_PID
sleep 0.3
t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$(ms_since "$t0")
wait "$rpid" || hl_fail "the reload under way at the stop got no good reply: $(cat "$T/reload2.out")"
hl_forget "$rpid"
n=$(grep -c '3 disk(s) closed in' "$FRONT_LOG")
[ "$n" = 3 ] || hl_fail "the closes under way at the stop did not end ($n of 3 lines): $(tail -n 8 "$FRONT_LOG")"
hl_log "4. a stop 300 ms into a reload removing 3 disks took $ms ms; the reload answered ok"
exit 0
