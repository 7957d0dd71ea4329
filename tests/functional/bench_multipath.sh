#!/bin/bash
# bench_multipath.sh - hotlun-bench as a multipath client (issue 17 item 6):
# one LUN through two portals of hotlund, path 0 through a TCP forwarder.
#  1. the forwarder is killed mid-run: the session moves to the other path,
#     the commands in flight go again there; 0 errors, 0 verify mismatches;
#     a forwarder started again on the same port makes the path come back;
#  2. the forwarder is stopped (SIGSTOP, a hung gateway): after
#     --path-timeout the path is declared down and the session moves; the
#     longest I/O spans the timeout; 0 errors, 0 mismatches;
#  3. both paths through forwarders, both killed: no path is usable, the I/O
#     waits (parked, retried with a growing backoff) instead of failing; the
#     forwarders come back after 2.5 s: 0 errors, 0 mismatches, and the
#     summary's no_path_max_s covers the outage;
#  4. the same outage with --failover-timeout 1: the parked I/O fails after
#     1 s without a usable path (errors, exit status 1), still 0 mismatches.
# Each path's target port group and ALUA state come from VPD 83h and REPORT
# TARGET PORT GROUPS and are printed.
. "$(dirname "$0")/lib.sh"

hl_need python3
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_missing "$BENCH not built"
T=$(hl_tmpdir)
hl_target_start --size 128M --portal2
PX=$(hl_free_port)
url=iscsi://127.0.0.1:$PX/$HL_IQN/0

# forward N [LISTEN TARGET_PORT]: a forwarder (default: $PX to the first portal); sets FWD
forward() {
	hl_spawn tcp_forward "$T/fwd.$1.log" python3 "$HL_SRCDIR/tests/functional/tcp_forward.py" \
		"${2:-$PX}" "127.0.0.1:${3:-$HL_PORT}"
	FWD=$HL_LAST_PID
	for _ in $(seq 1 100); do
		grep -q ready "$T/fwd.$1.log" && return 0
		sleep 0.05
	done
	hl_fail "the forwarder did not start: $(cat "$T/fwd.$1.log")"
}

unforward() {
	kill -KILL "$1"
	wait "$1" 2>/dev/null
	hl_forget "$1"
}

field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2"; }

# bench_start NAME ARGS...: hotlun-bench --verify --quiet --read 70 ARGS in
# the background, to $T/NAME.out and $T/NAME.err; bench_wait: its exit
# status in rc, stderr shown, the summary line in sum
bench_start() {
	local name=$1
	shift
	"$BENCH" --verify --quiet --read 70 "$@" >"$T/$name.out" 2>"$T/$name.err" &
	bench=$!
	bench_name=$name
	HL_PIDS+=("$bench")
	HL_PID_NAMES+=(hotlun-bench)
}
bench_wait() {
	wait "$bench"
	rc=$?
	hl_forget "$bench"
	cat "$T/$bench_name.err" >&2
	sum=$(tail -n 1 "$T/$bench_name.out")
	hl_log "$bench_name: $sum"
}

# ---- 1. path lost
forward 1
# 12 s: the lost path is back after 4 s and tried every 2 s; a loaded
# machine (CI at load 13) can take seconds to start the new forwarder
bench_start kill --qd 8 --range 32M --time 12 --path "127.0.0.1:$HL_PORT2" "$url"
sleep 2.5
kill -KILL "$FWD"
wait "$FWD" 2>/dev/null
hl_forget "$FWD"
sleep 1.5
forward 2
bench_wait
[ $rc = 0 ] || hl_fail "hotlun-bench exited $rc across a lost path"
grep -q "path 0 127.0.0.1:$PX: target port group 1, active/optimized (in use)" "$T/kill.err" ||
	hl_fail "path 0's target port group and ALUA state not read"
grep -q "moves from 127.0.0.1:$PX to 127.0.0.1:$HL_PORT2 (connection lost" "$T/kill.err" ||
	hl_fail "the session did not move to the other path"
grep -q "127.0.0.1:$PX is back" "$T/kill.err" || hl_fail "the lost path did not come back"
[ "$(field errors "$sum")" = 0 ] && [ "$(field verify_errors "$sum")" = 0 ] ||
	hl_fail "errors across a lost path: $sum"
[ "$(field failovers "$sum")" -ge 1 ] || hl_fail "no failover counted: $sum"
kill -KILL "$FWD"
wait "$FWD" 2>/dev/null
hl_forget "$FWD"

# ---- 2. path hung (SIGSTOP): --path-timeout
forward 3
bench_start stop --qd 8 --range 32M --time 8 --path-timeout 1.5 --path "127.0.0.1:$HL_PORT2" "$url"
sleep 2.5
kill -STOP "$FWD"
bench_wait
kill -KILL "$FWD" # never continued: what it holds must not reach the target later
wait "$FWD" 2>/dev/null
hl_forget "$FWD"
[ $rc = 0 ] || hl_fail "hotlun-bench exited $rc across a hung path"
grep -q "127.0.0.1:$PX is down (a command unanswered for too long)" "$T/stop.err" ||
	hl_fail "the hung path was not declared down"
[ "$(field errors "$sum")" = 0 ] && [ "$(field verify_errors "$sum")" = 0 ] ||
	hl_fail "errors across a hung path: $sum"
max=$(field max_us "$sum")
[ "$max" -ge 1500000 ] || hl_fail "the longest I/O ($max us) does not span the 1.5 s path timeout"
[ "$max" -lt 10000000 ] || hl_fail "the longest I/O took $max us: the move took too long"

# ---- 2b. a path that looked dead delivers the writes it held, late
# The forwarder holds what the client sends (SIGUSR1; answers still flow),
# so the commands sent after that wait in it; after --path-timeout the
# session moves and sends them again; then the forwarder lets them go
# (SIGUSR2) and the first copies reach hotlund after newer writes to the
# same blocks (QD 64 on 64 blocks: many are read before they are written over).
# --verify must count them in late_writes, not as mismatches.
forward 4
bench_start late --qd 64 --range 256K --time 7 --path-timeout 1 --path "127.0.0.1:$HL_PORT2" "$url"
sleep 2
kill -USR1 "$FWD"
for _ in $(seq 1 100); do # until the session has moved on
	grep -q "127.0.0.1:$PX is down" "$T/late.err" && break
	sleep 0.05
done
sleep 0.5
kill -USR2 "$FWD"
bench_wait
unforward "$FWD"
[ $rc = 0 ] || hl_fail "hotlun-bench exited $rc when a hung path's writes landed late"
[ "$(field errors "$sum")" = 0 ] && [ "$(field verify_errors "$sum")" = 0 ] ||
	hl_fail "a late write of a lost path was reported as an error: $sum"
[ "$(field late_writes "$sum")" -ge 1 ] || hl_fail "no late write of the hung path was seen: $sum"
grep -q "sent on a path that was lost and executed after the newer write" "$T/late.err" ||
	hl_fail "the late writes were not shown"

# ---- 3. every path lost for a while: the I/O waits for one to come back
PY=$(hl_free_port)
outage() { # outage NAME EXTRA-OPTIONS...: both forwarders killed at 2.5 s, back at 5 s
	local name=$1
	shift
	forward "$name.a"
	fa=$FWD
	forward "$name.b" "$PY" "$HL_PORT2"
	fb=$FWD
	bench_start "$name" --qd 8 --range 32M --time 8 --path "127.0.0.1:$PY" "$@" "$url"
	sleep 2.5
	unforward "$fa"
	unforward "$fb"
	sleep 2.5
	forward "$name.c"
	fa=$FWD
	forward "$name.d" "$PY" "$HL_PORT2"
	fb=$FWD
	bench_wait
	unforward "$fa"
	unforward "$fb"
}
outage lost
[ $rc = 0 ] || hl_fail "hotlun-bench exited $rc across an outage of every path"
[ "$(field errors "$sum")" = 0 ] && [ "$(field verify_errors "$sum")" = 0 ] ||
	hl_fail "errors across an outage of every path: $sum"
nopath=$(field no_path_max_s "$sum")
awk -v n="$nopath" 'BEGIN { exit !(n >= 1.5 && n < 8) }' ||
	hl_fail "no_path_max_s=$nopath does not match a 2.5 s outage: $sum"
[ "$(field stpg "$sum")" = 0 ] || hl_fail "STPG sent to a target without explicit ALUA: $sum"

# ---- 4. the same outage with --failover-timeout 1: the parked I/O fails, no mismatch
outage fail --failover-timeout 1
[ $rc = 1 ] || hl_fail "hotlun-bench exited $rc, not 1, when I/O failed for want of a path"
[ "$(field errors "$sum")" -ge 1 ] || hl_fail "no I/O failed after --failover-timeout: $sum"
[ "$(field verify_errors "$sum")" = 0 ] || hl_fail "mismatches after failed I/O: $sum"
grep -q "failed: no usable path for" "$T/fail.err" || hl_fail "the failed I/O was not reported"
hl_target_stop
exit 0
