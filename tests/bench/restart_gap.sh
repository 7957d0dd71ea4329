#!/bin/bash
# restart_gap.sh - issue 18 benchmark: how long a restart of hotlund stalls an
# initiator, with a warm 1 GiB cache. A 1 GiB file origin behind a 1 GiB
# cache file (64 KiB blocks) is read once at random until the cache holds it
# all; then hotlun-bench (libiscsi, 4 KiB random reads, queue depth 8, with
# --verify off: reads only) runs while hotlund gets SIGTERM and is started
# again. Prints one line per round:
#   restart gap_s=G stop_s=S start_s=T errors=E hit_pct_after=H
# gap_s   the longest I/O of the run: it was sent before the SIGTERM (the
#         drain answers what is in flight, then the initiator logs out) and
#         completed through the new process, so it spans SIGTERM to the first
#         I/O completed after the restart;
# stop_s  SIGTERM to the old process's exit; start_s  exec to the portal
#         accepting; errors  I/O errors the client saw (goal 0);
# hit_pct_after  the read hit ratio of the new process over its first 5 s.
#
#   tests/bench/restart_gap.sh [ROUNDS]      (default 3)
#
# Needs a build (BUILD=dir, default ./build), python3.
set -euo pipefail
ROUNDS=${1:-3}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
tmp=$(mktemp -d /tmp/hotlun-restart-gap.XXXXXX)
pid=
fake=
cleanup() {
	[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	[ -n "$fake" ] && kill -TERM "$fake" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
iqn=iqn.2026-11.io.hotlun:restart-gap
url=iscsi://127.0.0.1:$port/$iqn/0
truncate -s 1G "$tmp/origin.img"
cat >"$tmp/hotlun.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/st
log_level = notice

[cache ssd]
device = $tmp/cache.img
size = 1G
block_size = 64K

[disk d]
origin = file:$tmp/origin.img
cache = ssd

[target $iqn]
lun.0 = d
allow = ALL
CONF

now() { date +%s.%N; }
start() {
	local t0
	t0=$(now)
	"$BUILD/hotlund" --config "$tmp/hotlun.conf" >>"$tmp/hotlund.log" 2>&1 &
	pid=$!
	until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.005; done
	start_s=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(now)")
}
stat() {
	"$BUILD/hotlunctl" --socket "$tmp/st/hotlund.sock" stats --json |
		python3 -c 'import json, sys; d = json.load(sys.stdin)["caches"]["ssd"]["disks"]["d"]; print(d["read_hits"], d["read_reqs"])'
}

start
echo "warming the 1 GiB cache (random 64 KiB reads over the whole LUN)..." >&2
"$BUILD/hotlun-bench" --quiet --workload uniform --bs 64K --qd 32 --count 65536 --seed 1 "$url" >/dev/null
read -r h r < <(stat)
echo "cache after warm-up: $h hits of $r reads; $(du -h "$tmp/cache.img" | cut -f1) on disk" >&2

for i in $(seq 1 "$ROUNDS"); do
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs 4K --qd 8 --time 8 "$url" >"$tmp/run.out" 2>"$tmp/run.err" &
	bench=$!
	sleep 3
	t0=$(now)
	kill -TERM "$pid"
	wait "$pid" || true
	stop_s=$(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(now)")
	start
	wait "$bench" || true
	sum=$(tail -n 1 "$tmp/run.out")
	max_us=$(sed -n 's/.* max_us=\([0-9]*\).*/\1/p' <<<"$sum")
	errors=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$sum")
	read -r h0 r0 < <(stat)
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs 4K --qd 8 --time 5 "$url" >/dev/null
	read -r h1 r1 < <(stat)
	python3 -c "import sys
g, e, s, t, h0, r0, h1, r1 = sys.argv[1:]
print('restart mode=plain gap_s=%.2f stop_s=%s start_s=%s errors=%s hit_pct_after=%.1f' % (
    int(g) / 1e6, s, t, e or '?', 100.0 * (int(h1) - int(h0)) / max(1, int(r1) - int(r0))))" \
		"${max_us:-0}" "$errors" "$stop_s" "$start_s" "$h0" "$r0" "$h1" "$r1"
done
kill -TERM "$pid"
wait "$pid" || true
pid=

# The same under a (stand-in) systemd with the fd store: the listening socket
# goes to it at SIGTERM and comes back to the next process.
mkfifo "$tmp/ctl"
python3 "$SRC/tests/functional/fake_systemd.py" "$tmp/notify.log" -- "$BUILD/hotlund" \
	--config "$tmp/hotlun.conf" <"$tmp/ctl" >"$tmp/systemd.out" 2>>"$tmp/hotlund.log" &
fake=$!
exec 7>"$tmp/ctl"
until grep -q '^READY' "$tmp/systemd.out"; do sleep 0.05; done
for i in $(seq 1 "$ROUNDS"); do
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs 4K --qd 8 --time 8 "$url" >"$tmp/run.out" 2>"$tmp/run.err" &
	bench=$!
	sleep 3
	n=$(grep -c '^RESTARTED' "$tmp/systemd.out" || true)
	echo restart >&7
	until [ "$(grep -c '^RESTARTED\|^NOT-READY' "$tmp/systemd.out")" -gt "$n" ]; do sleep 0.05; done
	wait "$bench" || true
	sum=$(tail -n 1 "$tmp/run.out")
	max_us=$(sed -n 's/.* max_us=\([0-9]*\).*/\1/p' <<<"$sum")
	errors=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$sum")
	ms=$(tail -n 1 "$tmp/systemd.out" | sed -n 's/.*gap_ms=\([0-9]*\).*/\1/p')
	read -r h0 r0 < <(stat)
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs 4K --qd 8 --time 5 "$url" >/dev/null
	read -r h1 r1 < <(stat)
	python3 -c "import sys
g, e, ms, h0, r0, h1, r1 = sys.argv[1:]
print('restart mode=handover gap_s=%.2f sigterm_to_ready_s=%.2f errors=%s hit_pct_after=%.1f' % (
    int(g) / 1e6, int(ms or 0) / 1e3, e or '?', 100.0 * (int(h1) - int(h0)) / max(1, int(r1) - int(r0))))" \
		"${max_us:-0}" "$errors" "$ms" "$h0" "$r0" "$h1" "$r1"
done
echo stop >&7
exec 7>&-
wait "$fake" || true
