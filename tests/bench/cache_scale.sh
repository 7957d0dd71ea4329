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
# FULL=1: every slot warm instead (issue 25 item 5, a full cache). A cold
# start formats the device and names the LUN id, a clean stop, then
# tests/bench/cache_fill.c (built by make check, else here) writes
# every slot's record through the engine's encoder (hl_cache_meta_forge),
# slot i claiming block i; cache device and origin (a sparse file of the
# cache's size) both read zeroes, so no forged block is stale. Then: a
# warm restart waited to the end of its restore (RSS watched every 0.25 s:
# over RSS_KILL_MB, default 20000 MiB, hotlund is killed by its PID and the
# run ends), a write of 0xa5 to one block, 32 reads spread over the LUN
# that must be hits of zeroes (qemu-io read -P 0, stats read_hits and
# read_misses), the written block read back; a clean stop; a start killed
# (SIGKILL) once 40% of the record pages are read, after a write of 0x5a
# to a block near the end (its record not restored yet) and two periodic
# syncs; a start after it, waited to the end, the same hit check, that
# block must read 0x5a (never the forged zeroes), the origin file holds it.
# KILL=0 leaves the kill out. One line per size:
#
#   full size=1T bs=4K slots=N forged_N_records_in_S_s start_s=.. rss_start_mb=..
#        restart_s=.. restore_end_s=.. restore_log_s=.. restored=.. blocks_per_s=..
#        rss_end_mb=.. stop_s=.. killed_after=RESTORED/STATE kill_restart_s=..
#        kill_restore_end_s=.. kill_restore_log_s=.. kill_restored=..
#        kill_rss_end_mb=.. rss_max_mb=.. rss_b_per_block=.. written_mb=.. hits=ok stale=0
#
# (blocks_per_s: restored / restore_log_s, hotlund's own "restore done in"
# figure; rss_b_per_block: rss_max_mb per slot.) Before it, two lines of
# the hit loop (HITLOAD=1, the default; HIT_RANGE, default 1G; HIT_AFTER_S,
# default 20; HIT_QD and HIT_SESSIONS, default 1, for the loop during the
# restore: e.g. 64 and 2 keep both reactors contending for the cache lock):
# a QD1 4K uniform read loop over the first HIT_RANGE of the
# LUN during the warm restart's restore (once those blocks are restored:
# every read a hit), then as long again after it:
#
#   hitload size=1T during_restore|after_restore hit_ios=.. hit_p50_us=..
#        hit_p99_us=.. hit_p999_us=.. hit_max_us=.. hit_reads=.. hit_misses=..
#        max_lock_us=.. read_lock_wait_max_us=.. read_lock_waits_over_1ms=..
#
# (max_lock_us: stats restore_max_lock_us; read_lock_*: what reads'
# lookups waited for the cache lock since the start.) FULL=1 needs qemu-io and
# about 8 GiB of disk per TiB of cache (the records).
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
HIT_RANGE=${HIT_RANGE:-1G}
DIR=${DIR:-/tmp}
[ $# -gt 0 ] || set -- 256G 4T
[ "$(id -u)" = 0 ] || { echo "cache_scale.sh: needs root (losetup)" >&2; exit 2; }
tmp=$(mktemp -d "$DIR/hotlun-scale.XXXXXX")
pid=
loop=
cleanup() {
	if [ -n "${hit_pid:-}" ]; then
		kill -TERM "$hit_pid" 2>/dev/null || true
		wait "$hit_pid" 2>/dev/null || true
	fi
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

# ---- FULL=1: a full warm cache, forged (tests/bench/cache_fill.c) ----
stat_of() {
	"$BUILD/hotlunctl" --socket "$tmp/st/ctl.sock" stats --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["caches"]["ssd"].get(sys.argv[1], 0))' "$1"
}
rss_max=0
# watch: the largest VmRSS seen (MiB); over RSS_KILL_MB hotlund is killed
# (SIGKILL, by its PID) and the run ends: other work on the machine first
watch_rss() {
	local r
	r=$(rss_mb 2>/dev/null || echo 0)
	[ -n "$r" ] || r=0
	[ "$r" -le "$rss_max" ] || rss_max=$r
	if [ "$r" -gt "$RSS_KILL_MB" ]; then
		echo "cache_scale.sh: hotlund's RSS $r MiB > $RSS_KILL_MB MiB: killed" >&2
		kill -KILL "$pid"
		exit 1
	fi
}
# wait_full [FRACTION]: poll the restore every 0.25 s (RSS watched) until it
# ends, or until FRACTION of the record pages are read; sets restore_s
wait_full() {
	local st left pages
	while :; do
		watch_rss
		read -r st left pages < <("$BUILD/hotlunctl" --socket "$tmp/st/ctl.sock" stats --json |
			python3 -c 'import json, sys
c = json.load(sys.stdin)["caches"]["ssd"]
print(c.get("restore_state", "none"), c.get("restore_pages_left", 0), c.get("restore_pages", 0))')
		[ "$st" = running ] || break
		if [ -n "${1:-}" ] && python3 -c "import sys; sys.exit(0 if $left <= (1 - $1) * $pages else 1)"; then
			break
		fi
		sleep 0.25
	done
	restore_s=$(since "$t_start")
}
# hitload_start: during the restore of step 3 (HITLOAD=1, the default), a
# QD1 4K uniform read loop over the first HIT_RANGE (default 1G) of the LUN,
# started once the restore gave those blocks back: every read is a hit that
# takes the cache lock while the loader restores the rest.
hitload_start() {
	local need i
	hit_pid=
	[ "${HITLOAD:-1}" = 1 ] || return 0
	need=$(($(bytes "$HIT_RANGE") / bsb))
	for i in $(seq 1 6000); do
		[ "$(stat_of restore_restored)" -ge "$need" ] && break
		[ "$(stat_of restore_state)" = running ] || break
		sleep 0.02
	done
	hit_h0=$(stat_of read_hits)
	hit_m0=$(stat_of read_misses)
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs 4K --qd "${HIT_QD:-1}" \
		--sessions "${HIT_SESSIONS:-1}" --range "$HIT_RANGE" \
		--time 100000 --seed 3 "$url" >"$tmp/hitload.out" 2>&1 &
	hit_pid=$!
}
# hitload_stop: end the read loop (SIGINT: it prints its summary); sets
# hitload (the fields of the result line)
hitload_stop() {
	local sum
	hitload="hitload=off"
	[ -n "${hit_pid:-}" ] || return 0
	kill -INT "$hit_pid" 2>/dev/null || true # (done already after --time)
	wait "$hit_pid" 2>/dev/null || true
	hit_pid=
	sum=$(tail -1 "$tmp/hitload.out")
	hitload=$(python3 -c "import sys, re
f = dict(re.findall(r'(\w+)=(\S+)', sys.argv[1]))
print('hit_ios=%s hit_p50_us=%s hit_p99_us=%s hit_p999_us=%s hit_max_us=%s hit_reads=%d '
      'hit_misses=%d max_lock_us=%s read_lock_wait_max_us=%s read_lock_waits_over_1ms=%s' % (
      f.get('ios', '?'), f.get('p50_us', '?'), f.get('p99_us', '?'), f.get('p999_us', '?'),
      f.get('max_us', '?'), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5],
      sys.argv[6]))" "$sum" \
		$(($(stat_of read_hits) - hit_h0)) $(($(stat_of read_misses) - hit_m0)) \
		"$(stat_of restore_max_lock_us)" "$(stat_of read_lock_wait_max_us)" \
		"$(stat_of read_lock_waits_over_1ms)")
}
# the log's "restore done in S s" of the last restore after line $1
restore_log_s() {
	sed -n "$1,\$p" "$tmp/hotlund.log" | sed -n 's/.* block(s) restored (restore done in \([0-9.]*\) s.*/\1/p' | tail -1
}
# qio CMD...: qemu-io commands against the LUN; fails on a pattern mismatch
qio() {
	local args=() c out
	for c in "$@"; do args+=(-c "$c"); done
	out=$(qemu-io -f raw "${args[@]}" "$url" 2>&1) || { echo "$out" >&2; return 1; }
	if echo "$out" | grep -qiE 'pattern verification failed|error|fail'; then
		echo "$out" >&2
		return 1
	fi
}
# hit_check N PATTERN_BLOCK PATTERN: N sample blocks spread over the LUN
# (not PATTERN_BLOCK) read back zeroes as hits, PATTERN_BLOCK reads PATTERN
hit_check() {
	local n=$1 pb=$2 pat=$3 h0 m0 h1 m1 i b cmds=()
	h0=$(stat_of read_hits)
	m0=$(stat_of read_misses)
	for i in $(seq 0 $((n - 1))); do
		b=$(((slots - 1) * i / (n - 1)))
		[ "$b" != "$pb" ] || b=$((b + 1))
		cmds+=("read -P 0 $((b * bsb)) $bsb")
	done
	qio "${cmds[@]}"
	h1=$(stat_of read_hits)
	m1=$(stat_of read_misses)
	hits=$((h1 - h0))
	misses=$((m1 - m0))
	[ "$misses" = 0 ] && [ "$hits" -ge "$n" ] || {
		echo "cache_scale.sh: hit check: $hits hit(s), $misses miss(es) for $n reads" >&2
		exit 1
	}
	qio "read -P $pat $((pb * bsb)) $bsb"
}

# restart WAIT: a start after what the log holds now, waited to the end of
# its restore with WAIT (wait_restore or wait_full); sets rs_start (start_s),
# rs_end (restore_s), rs_log (hotlund's "restore done in" seconds),
# rs_restored (its count of blocks restored) and rs_rss (VmRSS, MiB, then)
# wait_full_hitload: wait_full with the QD1 hit loop running (hitload_start)
wait_full_hitload() {
	hitload_start
	wait_full
	hitload_stop
	echo "hitload size=$size during_restore $hitload"
}

restart() {
	local mark
	mark=$(($(grep -c . "$tmp/hotlund.log") + 1))
	start
	rs_start=$start_s
	"$1"
	rs_end=$restore_s
	rs_log=$(restore_log_s "$mark")
	rs_restored=$(restored "$mark")
	rs_rss=$(rss_mb)
}

# fresh_cache SIZE: a loop device over $tmp/cache.img (already SIZE bytes,
# sparse) as the cache of disk d, its configuration, and an empty state
# folder and log.
fresh_cache() {
	local size=$1
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
}

full_run() {
	local size=$1 lun fill s1 r1 s2 e2 l2 n2 r2 stop2 s3 e3 l3 n3 r3 killed_at rmax pb1 pb2
	bsb=$(bytes "$BS")
	truncate -s 0 "$tmp/cache.img" "$tmp/origin.img"
	truncate -s "$size" "$tmp/cache.img" "$tmp/origin.img"
	fresh_cache "$size"
	# 1. a cold start formats the device and names the LUN id; a clean stop
	start
	s1=$start_s
	r1=$(rss_mb)
	slots=$(sed -n "s/.*cache ssd: [^,]*, \([0-9]*\) blocks of .*/\1/p" "$tmp/hotlund.log" | tail -1)
	lun=$(sed -n 's/.*disk d attached (lun id \([0-9]*\).*/\1/p' "$tmp/hotlund.log" | tail -1)
	stop TERM
	# 2. every slot's record, slot i claiming block i
	fill=$("$cache_fill" "$loop" "$bsb" "$lun" "$slots")
	echo "$fill" >&2
	# 3. warm restart: portal, the whole restore, RSS, hits, a write
	rss_max=0
	restart wait_full_hitload
	s2=$rs_start e2=$rs_end l2=$rs_log n2=$rs_restored r2=$rs_rss
	# the same loop as long again (HIT_AFTER_S, default 20 s) once the
	# restore is over: what the machine's load alone does to it
	if [ "${HITLOAD:-1}" = 1 ]; then
		hit_pid=
		hit_h0=$(stat_of read_hits)
		hit_m0=$(stat_of read_misses)
		"$BUILD/hotlun-bench" --quiet --workload uniform --bs 4K --qd 1 --range "$HIT_RANGE" \
			--time "${HIT_AFTER_S:-20}" --seed 4 "$url" >"$tmp/hitload.out" 2>&1 &
		hit_pid=$!
		wait "$hit_pid" || true
		hitload_stop
		echo "hitload size=$size after_restore $hitload"
	fi
	rmax=$rss_max
	pb1=$((slots / 3))
	qio "write -P 0xa5 $((pb1 * bsb)) $bsb"
	hit_check 32 "$pb1" 0xa5
	stop TERM
	stop2=$stop_s
	if [ "${KILL:-1}" = 0 ]; then
		full_line "$size" "$BS" "$slots" "$fill" "$s1" "$r1" "$s2" "$e2" "${l2:-0}" "${n2:-0}" \
			"$r2" "$stop2" - - - - - - "$rmax"
		return
	fi
	# 4. restart, kill -9 halfway through the restore after a write to a
	# block whose record is not restored yet, restart: restored again,
	# and that block reads what was written (never the forged zeroes)
	start
	pb2=$((slots - 7))
	wait_full 0.4
	qio "write -P 0x5a $((pb2 * bsb)) $bsb"
	# two periodic syncs (1 s each): the origin's proof after the write is
	# recorded (a file origin's proof older than a write makes the next
	# start cold: engine_proof.c), then SIGKILL
	sleep 3.5
	watch_rss
	killed_at=$(stat_of restore_restored)/$(stat_of restore_state)
	stop KILL
	restart wait_full
	s3=$rs_start e3=$rs_end l3=$rs_log n3=$rs_restored r3=$rs_rss
	[ "$rss_max" -le "$rmax" ] || rmax=$rss_max
	hit_check 32 "$pb1" 0xa5
	qio "read -P 0x5a $((pb2 * bsb)) $bsb"
	# the origin holds both writes
	cmp <(dd if="$tmp/origin.img" bs="$bsb" skip="$pb2" count=1 status=none) \
		<(head -c "$bsb" /dev/zero | tr '\0' '\132') >/dev/null
	stop TERM
	full_line "$size" "$BS" "$slots" "$fill" "$s1" "$r1" "$s2" "$e2" "${l2:-0}" "${n2:-0}" "$r2" \
		"$stop2" "$killed_at" "$s3" "$e3" "${l3:-0}" "${n3:-0}" "$r3" "$rmax"
}

# full_line FIELDS...: detach the loop device, print the result line, remove the files
full_line() {
	losetup -d "$loop"
	loop=
	written=$(du -m "$tmp/cache.img" | cut -f1)
	python3 -c "import sys
(size, bs, slots, fill, s1, r1, s2, e2, l2, n2, r2, stop2, killed, s3, e3, l3, n3, r3, rmax,
 written) = sys.argv[1:]
n = int(n2 or 0)
print('full size=%s bs=%s slots=%s %s start_s=%s rss_start_mb=%s restart_s=%s '
      'restore_end_s=%s restore_log_s=%s restored=%s blocks_per_s=%.0f rss_end_mb=%s stop_s=%s '
      'killed_after=%s kill_restart_s=%s kill_restore_end_s=%s kill_restore_log_s=%s '
      'kill_restored=%s kill_rss_end_mb=%s rss_max_mb=%s rss_b_per_block=%.2f '
      'written_mb=%s hits=ok stale=0' % (size, bs, slots, fill.replace(' ', '_'), s1, r1, s2,
      e2, l2, n, n / max(float(l2 or 0), 1e-9), r2, stop2, killed, s3, e3, l3, n3, r3, rmax,
      int(rmax) * 1048576.0 / max(1, int(slots)), written))" \
		"$@" "$written"
	rm -f "$tmp/cache.img" "$tmp/origin.img"
}

if [ -n "${FULL:-}" ]; then
	command -v qemu-io >/dev/null || { echo "cache_scale.sh: FULL=1 needs qemu-io" >&2; exit 2; }
	RSS_KILL_MB=${RSS_KILL_MB:-20000}
	# (make check builds it; else built here against the library)
	cache_fill=$BUILD/tests/bench/cache_fill
	if [ ! -x "$cache_fill" ]; then
		libs=$(sed -n 's/^LIBS = //p' "$BUILD/Makefile")
		cache_fill=$tmp/cache_fill
		cc -O2 -D_GNU_SOURCE -I "$BUILD" -I "$SRC/include" -I "$SRC/src" \
			"$SRC/tests/bench/cache_fill.c" "$BUILD/.libs/libhotlun.a" $libs -lm -pthread \
			-o "$cache_fill"
	fi
	for size in "$@"; do
		full_run "$size"
	done
	exit 0
fi

for size in "$@"; do
	truncate -s 0 "$tmp/cache.img"
	truncate -s "$size" "$tmp/cache.img"
	fresh_cache "$size"
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
	restart wait_restore
	s2=$rs_start e2=$rs_end n2=$rs_restored r2=$rs_rss
	# a little more I/O, then an unclean stop
	"$BUILD/hotlun-bench" --quiet --workload uniform --bs "$BS" --qd 64 \
		--count "$warm_blocks" --seed 2 "$url" >/dev/null
	sleep 2
	stop KILL
	restart wait_restore
	s3=$rs_start e3=$rs_end n3=$rs_restored r3=$rs_rss
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
