#!/bin/bash
# cache_scale.sh - issue 25 item 5: how a big cache starts. For each size, a
# sparse file of that size behind a loop device is the cache device (4 KiB
# blocks by default); hotlund formats it, a part of it is warmed through
# iSCSI (4 KiB random reads of a file origin, admission = always), hotlund
# stops (SIGTERM: a clean stop) and starts again (warm restart), then is
# killed (SIGKILL) and starts again (unclean restart). One line per size:
#
#   scale size=4T bs=4K slots=N start_s=.. rss_start_mb=.. warm_blocks=..
#         stop_s=.. restart_s=.. restore_end_s=.. restored=.. rss_restart_mb=..
#         kill_restart_s=.. kill_restore_end_s=.. kill_restored=.. written_mb=..
#         rss_b_per_slot=..
#
# start_s      exec to the portal accepting, first start (format included);
# rss_*_mb     hotlund's VmRSS then; rss_b_per_slot the largest of the
#              three RSS figures per cache slot (the goal: <= 16 B/slot + 64 MiB);
# restart_s    exec to the portal accepting after the clean stop;
#              restore_end_s exec to the end of the background restore of the
#              records (stats restore_state no longer "running"); restored
#              the blocks it gave back (hotlund's log line);
# kill_*       the same after SIGKILL (records of the last sync only);
# written_mb   what the sparse file holds on disk at the end (formatting
#              must not write what it need not: a 4 TiB cache at 4K blocks
#              has 1 Gi slot records, 32 GiB).
#
#   tests/bench/cache_scale.sh [SIZE ...]        (default: 256G 4T)
#
# Environment: BUILD (default ./build), BS (cache block size, default 4K),
# WARM (bytes of the origin warmed, default 1G), DIR (where the sparse files
# go, default /tmp; they need the space of what is written: about WARM plus
# the records of the warmed blocks). Needs root (losetup) and python3; the
# lead can re-run it on another machine as is.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
BS=${BS:-4K}
WARM=${WARM:-1G}
DIR=${DIR:-/tmp}
[ $# -gt 0 ] || set -- 256G 4T
[ "$(id -u)" = 0 ] || { echo "cache_scale.sh: needs root (losetup)" >&2; exit 2; }
tmp=$(mktemp -d "$DIR/hotlun-scale.XXXXXX")
pid=
loop=
cleanup() {
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	[ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
[ -n "${KEEP_LOG:-}" ] && trap 'cp "$tmp/hotlund.log" "$KEEP_LOG"; cleanup' EXIT

bytes() { numfmt --from=iec "$1"; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now)"; }
rss_mb() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status"; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
iqn=iqn.2026-12.io.hotlun:scale
url=iscsi://127.0.0.1:$port/$iqn/0
truncate -s "$WARM" "$tmp/origin.img"
warm_blocks=$(($(bytes "$WARM") / $(bytes "$BS")))

# start LABEL: exec hotlund, wait for the portal; sets start_s
start() {
	local t0 i
	t0=$(now)
	"$BUILD/hotlund" --config "$tmp/hotlun.conf" >>"$tmp/hotlund.log" 2>&1 &
	pid=$!
	for i in $(seq 1 60000); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || { tail -20 "$tmp/hotlund.log" >&2; exit 1; }
		sleep 0.005
	done
	start_s=$(since "$t0")
	t_start=$t0
}
# wait_restore: wait for the background restore of a warm start to end; sets
# restore_s (exec to its end; the same as start_s when nothing was restored)
wait_restore() {
	local i st
	for i in $(seq 1 120000); do
		st=$("$BUILD/hotlunctl" --socket "$tmp/st/ctl.sock" stats --json |
			python3 -c 'import json, sys; print(json.load(sys.stdin)["caches"]["ssd"].get("restore_state", "none"))')
		[ "$st" = running ] || break
		sleep 0.02
	done
	restore_s=$(since "$t_start")
}
stop() {
	local t0
	t0=$(now)
	kill -"$1" "$pid"
	{ wait "$pid" || true; } 2>/dev/null
	pid=
	stop_s=$(since "$t0")
}
# restored: the count of hotlund's last "N block(s) restored" line (0 when cold)
restored() {
	local n
	n=$(grep -c . "$tmp/hotlund.log")
	sed -n "$1,${n}p" "$tmp/hotlund.log" | sed -n 's/.* \([0-9]*\) block(s) restored.*/\1/p' | tail -1
}
used_slots() {
	"$BUILD/hotlunctl" --socket "$tmp/st/ctl.sock" stats --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["caches"]["ssd"]["used_slots"])'
}

for size in "$@"; do
	truncate -s 0 "$tmp/cache.img"
	truncate -s "$size" "$tmp/cache.img"
	loop=$(losetup -f --show --direct-io=on "$tmp/cache.img")
	cat >"$tmp/hotlun.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/st
control_socket = $tmp/st/ctl.sock
log_level = notice

[cache ssd]
device = $loop
size = $size
block_size = $BS
admission = always

[disk d]
origin = file:$tmp/origin.img
cache = ssd

[target $iqn]
lun.0 = d
allow = ALL
CONF
	rm -rf "$tmp/st"
	mkdir -p "$tmp/st"
	: >"$tmp/hotlund.log"
	start
	s1=$start_s
	r1=$(rss_mb)
	slots=$(sed -n "s/.*cache ssd: [^,]*, \([0-9]*\) blocks of .*/\1/p" "$tmp/hotlund.log" | tail -1)
	# warm: random reads over the origin until most of it is cached
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs "$BS" --qd 64 \
		--count $((warm_blocks * 3)) --seed 1 "$url" >/dev/null
	sleep 2 # the metadata thread's periodic sync (1 s)
	used=$(used_slots)
	stop TERM
	s_stop=$stop_s
	mark=$(($(grep -c . "$tmp/hotlund.log") + 1))
	start
	s2=$start_s
	wait_restore
	e2=$restore_s
	r2=$(rss_mb)
	n2=$(restored "$mark")
	# a little more I/O, then an unclean stop
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs "$BS" --qd 64 \
		--count "$warm_blocks" --seed 2 "$url" >/dev/null
	sleep 2
	stop KILL
	mark=$(($(grep -c . "$tmp/hotlund.log") + 1))
	start
	s3=$start_s
	wait_restore
	e3=$restore_s
	n3=$(restored "$mark")
	r3=$(rss_mb)
	stop TERM
	losetup -d "$loop"
	loop=
	written=$(du -m "$tmp/cache.img" | cut -f1)
	python3 -c "import sys
size, bs, slots, s1, r1, used, s_stop, s2, e2, n2, r2, s3, e3, n3, r3, written = sys.argv[1:]
rss = max(int(r1), int(r2), int(r3 or 0))
print('scale size=%s bs=%s slots=%s start_s=%s rss_start_mb=%s warm_blocks=%s stop_s=%s '
      'restart_s=%s restore_end_s=%s restored=%s rss_restart_mb=%s kill_restart_s=%s '
      'kill_restore_end_s=%s kill_restored=%s written_mb=%s rss_b_per_slot=%.2f' % (size, bs,
      slots, s1, r1, used, s_stop, s2, e2, n2 or 0, r2, s3, e3, n3 or 0, written,
      rss * 1048576.0 / max(1, int(slots or 1))))" \
		"$size" "$BS" "${slots:-0}" "$s1" "$r1" "$used" "$s_stop" "$s2" "$e2" "${n2:-0}" "$r2" \
		"$s3" "$e3" "${n3:-0}" "$r3" "$written"
done
