#!/bin/bash
# restart_drain.sh - a planned stop costs initiators no I/O error (issue 18
# item 4). On SIGTERM hotlund stops accepting, asks every initiator to log out
# (Async Message event 1), answers the commands still executing before the
# Logout Response (Time2Wait 1), then saves the cache and exits.
#  1. raw PDUs: a READ in flight on a slow origin completes before the Logout
#     Response, and the log says every session logged out;
#  2. libiscsi (hotlun-bench --verify, reads and writes) across a restart of
#     hotlund with a cache: 0 errors, 0 mismatches;
#  3. the warm cache: the read hit ratio after the restart is >= 90% of the
#     ratio before it;
#  4. logout_timeout = 0, set live: the stop asks nobody to log out;
#  5. a stop while cache-device writes (fills) are in flight (delayed by
#     HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS) waits for them;
#  6. no stop left cache requests in flight at the cache's close.
. "$(dirname "$0")/lib.sh"

hl_need python3 iscsi-inq
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_missing "$BENCH not built"
T=$(hl_tmpdir)
IQN=$HL_IQN_PREFIX:drain

# ---- 1. the protocol, on a 1.5 s origin (throttle latency), no cache
port=$(hl_free_port)
hl_make_disk "$T/slow.img" 64M
mkdir -p "$T/st1"
cat >"$T/slow.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $T/st1
control_socket = $T/st1/ctl.sock
log_level = info

[disk slow]
origin = file:$T/slow.img
origin_latency_ms = 1500

[target $IQN]
lun.0 = slow
allow = ALL
CONF
hl_start_hotlund "$T/slow.conf"
python3 "$HL_SRCDIR/tests/functional/drain_client.py" --portal "127.0.0.1:$port" \
	--target "$IQN" --time2wait 1 --within 5 >"$T/client.out" 2>&1 &
client=$!
HL_PIDS+=("$client")
HL_PID_NAMES+=(drain_client)
for _ in $(seq 1 200); do
	grep -q SENT "$T/client.out" && break
	hl_alive "$client" || break
	sleep 0.05
done
grep -q SENT "$T/client.out" || hl_fail "the raw client did not get its READ out: $(cat "$T/client.out")"
log1=$HL_LOG
hl_stop "$HL_PID"
wait "$client"
crc=$?
hl_forget "$client"
cat "$T/client.out" >&2
[ $crc = 0 ] || hl_fail "the planned stop was not clean for the initiator: $(tail -n 1 "$T/client.out")"
grep -q 'asked 1 session(s) to log out' "$log1" || hl_fail "no 'asked ... to log out' in the log"
grep -q 'all 1 session(s) logged out' "$log1" || hl_fail "the session did not log out before the stop"

# ---- 2 and 3. libiscsi across a restart of a cached hotlund
port=$(hl_free_port)
hl_make_disk "$T/origin.img" 256M
mkdir -p "$T/st2"
hl_cache_front_conf "$T/front.conf" "$port" "$T/st2" "$IQN" "file:$T/origin.img" \
	"device=$T/cache.img" size=128M block_size=4K
url=iscsi://127.0.0.1:$port/$IQN/0
sock=$T/st2/ctl.sock
hl_front_start "$T/front.conf"

"$BENCH" --verify --workload uniform --range 64M --read 70 --qd 8 --time 12 --quiet \
	"$url" >"$T/verify.out" 2>"$T/verify.err" &
bench=$!
HL_PIDS+=("$bench")
HL_PID_NAMES+=(hotlun-bench)
sleep 4
hl_stop "$FRONT_PID"
hl_front_start "$T/front.conf"
wait "$bench"
brc=$?
hl_forget "$bench"
tail -n 2 "$T/verify.out" >&2
[ $brc = 0 ] || hl_fail "verified load across the restart: status $brc: $(tail -n 3 "$T/verify.err")"
sum=$(tail -n 1 "$T/verify.out")
for k in errors verify_errors; do
	v=$(sed -n "s/.* $k=\([0-9]*\).*/\1/p" <<<"$sum")
	[ "$v" = 0 ] || hl_fail "$k=$v across the restart: $sum"
done
ios=$(sed -n 's/.* ios=\([0-9]*\).*/\1/p' <<<"$sum")
[ "${ios:-0}" -gt 1000 ] || hl_fail "too little I/O across the restart: $sum"

# Hit ratio of a hot-set read run: before a restart, then after it.
hit_ratio() {
	local h0 r0 h1 r1
	h0=$(hl_cache_stat "$sock" ssd read_hits san)
	r0=$(hl_cache_stat "$sock" ssd read_reqs san)
	"$BENCH" --workload hotset:90/10 --range 32M --read 100 --qd 8 --count 20000 --seed 7 --quiet \
		"$url" >"$T/hot.out" 2>&1 || hl_fail "hot-set read run failed: $(tail -n 2 "$T/hot.out")"
	h1=$(hl_cache_stat "$sock" ssd read_hits san)
	r1=$(hl_cache_stat "$sock" ssd read_reqs san)
	python3 -c "import sys; h0,r0,h1,r1 = map(int, sys.argv[1:]); print('%.4f' % ((h1-h0)/max(1, r1-r0)))" \
		"$h0" "$r0" "$h1" "$r1"
}
for _ in 1 2 3; do hit_ratio >/dev/null; done # warm the hot set
before=$(hit_ratio)
hl_stop "$FRONT_PID"
hl_front_start "$T/front.conf"
after=$(hit_ratio)
hl_log "read hit ratio before the restart $before, after $after"
python3 -c "import sys; b, a = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if b > 0.5 and a >= 0.9 * b else 1)" \
	"$before" "$after" || hl_fail "hit ratio after the restart $after, before $before (need >= 90% of it, before > 50%)"

# stop_under_load SECONDS OUT BENCH-ARGS...: hotlun-bench with those
# arguments, and SECONDS later a SIGTERM to the front hotlund under it (its
# log in $log), then the client stopped.
stop_under_load() {
	local secs=$1 out=$2 held
	shift 2
	"$BENCH" --quiet "$@" >"$out" 2>&1 &
	held=$!
	HL_PIDS+=("$held")
	HL_PID_NAMES+=(hotlun-bench)
	sleep "$secs"
	log=$FRONT_LOG
	hl_stop "$FRONT_PID"
	kill -TERM "$held" 2>/dev/null
	wait "$held" 2>/dev/null
	hl_forget "$held"
}

# ---- 4. logout_timeout = 0 (set live): a stop closes sessions at once, asks nobody
"$HL_BUILDDIR/hotlunctl" --socket "$sock" / set logout_timeout=0 >/dev/null ||
	hl_fail "set logout_timeout=0 refused"
[ "$("$HL_BUILDDIR/hotlunctl" --socket "$sock" / get logout_timeout)" = "logout_timeout=0" ] ||
	hl_fail "get logout_timeout: $("$HL_BUILDDIR/hotlunctl" --socket "$sock" / get logout_timeout)"
stop_under_load 1.5 "$T/held.out" --read 100 --qd 4 --time 20 "$url"
grep -q 'log out' "$log" && hl_fail "logout_timeout=0 still asked the session to log out"
grep -q 'normal session .* established' "$log" || hl_fail "the held session never logged in"

# ---- 5. a stop with cache-device writes in flight: every cache-device write
# waits 300 ms (HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS), so the fills and
# promotions of reads that replied are still out when the SIGTERM comes. The stop must let them
# finish (the reactors run until they did), not close the cache on them.
port=$(hl_free_port)
mkdir -p "$T/st3"
hl_cache_front_conf "$T/fill.conf" "$port" "$T/st3" "$IQN" "file:$T/origin.img" \
	"device=$T/cache3.img" size=64M block_size=4K admission=always update_buffer=0
url=iscsi://127.0.0.1:$port/$IQN/0
sock=$T/st3/ctl.sock
export HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS=300
hl_front_start "$T/fill.conf"
unset HOTLUN_TEST_CACHE_DEV_WRITE_DELAY_MS
"$HL_BUILDDIR/hotlunctl" --socket "$sock" / set logout_timeout=0 >/dev/null ||
	hl_fail "set logout_timeout=0 refused"
# 48 MiB: three times the RAM window (16 MiB), most of the device (63 MiB):
# blocks leave the window for device slots (writes) all the time
stop_under_load 2 "$T/fill.out" --read 100 --qd 8 --range 48M --time 20 "$url"
grep -q 'test knob: cache device writes delayed by 300 ms' "$log" || hl_fail "the latency knob did not act"
! grep -q 'still in flight at close' "$log" ||
	hl_fail "the stop closed the cache on requests in flight: $(grep 'still in flight at close' "$log")"
line=$(grep 'request(s) in flight at the stop finished in' "$log") ||
	hl_fail "no cache request was in flight at the stop (the test provoked nothing)"
hl_log "$line"

# ---- 6. every stop above drained the cache: no request (a fill of a read
# that replied, a write-back) was left in flight when the cache closed (the
# reactors stopped before its I/O came back: leaked requests, issue hD).
for f in "$T"/hotlund.*.log; do
	! grep -q 'still in flight at close\|did not finish within' "$f" ||
		hl_fail "$(basename "$f"): $(grep 'still in flight at close\|did not finish within' "$f")"
	! grep -q 'io_uring leaves .* pending' "$f" ||
		hl_fail "$(basename "$f"): $(grep 'io_uring leaves .* pending' "$f")"
done
exit 0
