#!/bin/bash
# demo.sh - the README's first quick-start command after its build step
# (contrib/hotlun-demo, which `contrib/hotlun-dev demo` runs): the demo target
# starts, its benchmark shows the cache in front of the 200-IOPS origin beat
# the origin alone, prints the hit ratio and an SVG chart, and the target then
# keeps serving both LUNs until SIGTERM, which stops hotlund too.
. "$(dirname "$0")/lib.sh"

hl_need iscsi-inq curl
DEMO=$HL_SRCDIR/contrib/hotlun-demo
[ -x "$DEMO" ] || hl_error "no $DEMO"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
url=iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:demo

mport=$(hl_free_port)
HL_DEMO_SECONDS=8 HL_DEMO_METRICS=127.0.0.1:$mport \
	hl_spawn hotlun-demo "$tmp/demo.out" "$DEMO" "$HL_BUILDDIR" "$tmp/state" "$port"
demo=$HL_LAST_PID
deadline=$((SECONDS + 90))
until grep -q 'Ctrl-C stops it' "$tmp/demo.out"; do
	if ! hl_alive "$demo"; then
		cat "$tmp/demo.out" >&2
		hl_fail "the demo exited before it was ready"
	fi
	[ $SECONDS -lt $deadline ] || { cat "$tmp/demo.out" >&2; hl_fail "the demo did not finish its benchmark in 90 s"; }
	sleep 0.2
done
cat "$tmp/demo.out" >&2

# Origin alone vs through the cache: the numbers printed are the benchmark's.
o=$(sed -n 's/^ *origin alone: *\([0-9]*\) IOPS.*/\1/p' "$tmp/demo.out")
c=$(sed -n 's/^ *through the cache: *\([0-9]*\) IOPS over the whole run.*/\1/p' "$tmp/demo.out")
[ -n "$o" ] && [ -n "$c" ] || hl_fail "no origin/cache IOPS lines in the demo's output"
[ "$o" -gt 0 ] && [ "$o" -le 260 ] || hl_fail "the origin alone gave $o IOPS; the demo throttles it to 200"
[ "$c" -ge $((o * 2)) ] || hl_fail "through the cache $c IOPS, not 2x the origin's $o"
grep -qE 'reads +[0-9]+: [0-9.]+% hits' "$tmp/demo.out" || hl_fail "no hit ratio from hotlunctl stats"
svg=$(sed -n 's/^ *warm-up chart: *//p' "$tmp/demo.out")
[ -s "$svg" ] && grep -q '<svg' "$svg" || hl_fail "no SVG chart at '$svg'"
grep -q "Connect to: *$url/0" "$tmp/demo.out" || hl_fail "the URL printed is not $url/0"

# The Prometheus endpoint it printed answers, with the cached disk's hit and
# miss latency and its cache's reads by result.
grep -q "Prometheus metrics: http://127.0.0.1:$mport/metrics" "$tmp/demo.out" ||
	hl_fail "the demo did not print its metrics URL"
curl -sf "http://127.0.0.1:$mport/metrics" >"$tmp/metrics.txt" || hl_fail "no metrics at the URL printed"
grep -q '^hotlun_disk_read_latency_seconds_count{disk="demo",source="hit"} [1-9]' "$tmp/metrics.txt" ||
	hl_fail "no cache hits in the demo's metrics"
grep -q '^hotlun_cache_reads_total{cache="demo-ssd",disk="demo",result="miss"} [1-9]' "$tmp/metrics.txt" ||
	hl_fail "no cache misses in the demo's metrics"

# Still serving: both LUNs answer, LUN 0 is the cached one.
iscsi-inq "$url/0" >/dev/null || hl_fail "LUN 0 does not answer after the demo's benchmark"
iscsi-inq "$url/1" >/dev/null || hl_fail "LUN 1 does not answer after the demo's benchmark"
hpid=$(pgrep -P "$demo" -x hotlund) || hl_fail "no hotlund under the demo"

# SIGTERM to the demo stops hotlund cleanly and frees the port.
kill -TERM "$demo"
for _ in $(seq 1 200); do hl_alive "$hpid" || break; sleep 0.05; done
hl_alive "$hpid" && hl_fail "hotlund $hpid still runs 10 s after the demo got SIGTERM"
wait "$demo" 2>/dev/null
hl_forget "$demo"
hl_port_open 127.0.0.1 "$port" && hl_fail "port $port still open after the demo stopped"
hl_log "demo: origin $o IOPS, cache $c IOPS"
exit 0
