#!/bin/bash
# sessions_scale.sh - issue 25 item 5: hotlund with many sessions, and the
# CPU one I/O costs with one and with two reactor threads.
#
#   tests/bench/sessions_scale.sh [SESSIONS]        (default 4096)
#
# 1. sessions: a plain 256 MiB LUN (file origin in the page cache),
#    hotlun-bench logs SESSIONS sessions in (queue depth 1 each, 4 KiB random
#    reads) and reads for SECONDS; one line:
#      sessions n=N login_s=L iops=I cpu_us_per_io=C rss_mb=R rss_kb_per_session=K errors=E
#    login_s: from the bench's start until hotlund counts all N sessions;
#    rss: hotlund's resident memory with them all in.
# 2. reactors: the same LUN read by iscsi-perf (4 KiB random, 64 in flight)
#    for SECONDS, with `threads = 1` and then `threads = 2`; one line each:
#      reactors threads=T iops=I cpu_us_per_io=C
#    cpu_us_per_io: hotlund's user+system CPU over the run / I/Os.
# Environment: BUILD (default ./build), SECONDS_PER_RUN (default 10).
# Needs hotlun-bench, iscsi-perf, python3; raises its own open-file limit.
set -euo pipefail
N=${1:-4096}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
DUR=${SECONDS_PER_RUN:-10}
tmp=$(mktemp -d /tmp/hotlun-sessions-scale.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
ulimit -n $((N * 2 + 1024)) # the bench holds one socket per session
iqn=iqn.2026-11.io.hotlun:sessions-scale
head -c 256M /dev/urandom >"$tmp/origin.img"
cat "$tmp/origin.img" >/dev/null

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# start THREADS: hotlund on a free port; sets port, pid
start() {
	port=$(free_port)
	cat >"$tmp/hotlun.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/st
log_level = warning
threads = $1
max_sessions = $((N + 64))
max_sessions_per_addr = $((N + 64))

[disk d]
origin = file:$tmp/origin.img

[target $iqn]
lun.0 = d
allow = ALL
CONF
	mkdir -p "$tmp/st"
	prlimit --nofile=$((N * 2 + 1024)) "$BUILD/hotlund" --config "$tmp/hotlun.conf" \
		>>"$tmp/hotlund.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do
		python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), 0.2)" \
			2>/dev/null && return 0
		sleep 0.1
	done
	echo "sessions_scale: hotlund did not start: $(tail -3 "$tmp/hotlund.log")" >&2
	exit 1
}
stop() {
	kill -TERM "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
}
url() { echo "iscsi://127.0.0.1:$port/$iqn/0"; }

# ---- 1. many sessions
start 2
c0=$(cpu_ticks "$pid")
t0=$(date +%s.%N)
"$BUILD/hotlun-bench" --quiet --sessions "$N" --qd 1 --bs 4K --read 100 --time "$DUR" \
	"$(url)" >"$tmp/bench.out" 2>&1 &
bpid=$!
# all sessions in: hotlund counts them
n=0
while [ "$n" -lt "$N" ] && kill -0 "$bpid" 2>/dev/null; do
	n=$("$BUILD/hotlunctl" --socket "$tmp/st/hotlund.sock" stats --json 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["sessions"])' 2>/dev/null || echo 0)
	sleep 0.1
done
t1=$(date +%s.%N)
rss_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
wait "$bpid" || true
c1=$(cpu_ticks "$pid")
sum=$(tail -1 "$tmp/bench.out")
ios=$(echo "$sum" | tr ' ' '\n' | sed -n 's/^ios=//p')
iops=$(echo "$sum" | tr ' ' '\n' | sed -n 's/^iops=//p')
errors=$(echo "$sum" | tr ' ' '\n' | sed -n 's/^errors=//p')
awk -v n="$N" -v t0="$t0" -v t1="$t1" -v c="$((c1 - c0))" -v hz="$hz" -v ios="${ios:-0}" \
	-v iops="${iops:-0}" -v rss="$rss_kb" -v e="${errors:-?}" 'BEGIN {
	printf "sessions n=%d login_s=%.1f iops=%s cpu_us_per_io=%.1f rss_mb=%.0f rss_kb_per_session=%.1f errors=%s\n",
	    n, t1 - t0, iops, ios ? c * 1e6 / hz / ios : 0, rss / 1024, rss / n, e }'
stop

# ---- 2. CPU per I/O with one and two reactors
for threads in 1 2; do
	start "$threads"
	c0=$(cpu_ticks "$pid")
	timeout -s INT "$DUR" iscsi-perf -r -m 64 -b 8 "$(url)" >"$tmp/perf.out" 2>&1 || true
	c1=$(cpu_ticks "$pid")
	iops=$(tr '\r' '\n' <"$tmp/perf.out" | grep -o 'iops average [0-9]*' | tail -1 | awk '{print $3}')
	awk -v t="$threads" -v c="$((c1 - c0))" -v hz="$hz" -v iops="${iops:-0}" -v d="$DUR" 'BEGIN {
		printf "reactors threads=%d iops=%d cpu_us_per_io=%.1f\n", t, iops,
		    iops ? c * 1e6 / hz / (iops * d) : 0 }'
	stop
done
