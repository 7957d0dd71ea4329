#!/bin/bash
# cache_verify_default.sh - the concurrent verifier through a cached LUN with
# the product's default policy, where cache_verify.sh runs `admission =
# always` with aligned I/O only:
#   SAN   a first hotlund serving a file LUN (the slow origin),
#   front a hotlund whose disk is iscsi://SAN behind a 16 MiB cache with the
#         default admission (frequency: the RAM window, its ghost and
#         promotions of returning blocks, docs/cache-policy.md points 2-5)
#         and a 1 MiB RAM update buffer (point 8; small, so that write-backs
#         run all the time and race the writes and the kill).
# Two verified loads at once (every write carries its LBA and a generation,
# every read must return the last acknowledged write):
#   - hotset over 48 MiB with 3584-byte, 4K and 64K I/O: 3584-byte writes at
#     offsets that are not 4 KiB-aligned make the front read-modify-write
#     partly written cached sectors, on the SSD and in the RAM window;
#   - sequential 64K and 128K reads over the last 16 MiB (their own range:
#     a read that races another initiator's write to the same sector may see
#     it half done): a stream longer than the sequential threshold bypasses
#     the SSD (window only, never promoted unless re-read), competing with
#     the hot set for the window; every block must still hold its pattern.
# Halfway the front is killed (-9) and restarted at once; then its update
# buffer is resized and its write policy switched while the loads go on.
# Pass: no mismatch in either load, and before the kill the front had used
# the window, promoted from it, read-modify-written and bypassed.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs

T=$(hl_tmpdir)
RUNTIME=22

hl_target_start --size 64M
SAN_PORT=$HL_PORT SAN_IQN=$HL_IQN

FRONT_PORT=$(hl_free_port)
FRONT_IQN=$HL_IQN_PREFIX:cache-verify-default
URL=iscsi://127.0.0.1:$FRONT_PORT/$FRONT_IQN/0
ST=$T/front-state
mkdir -p "$ST"
hl_cache_front_conf "$T/front.conf" "$FRONT_PORT" "$ST" "$FRONT_IQN" \
	"iscsi://127.0.0.1:$SAN_PORT/$SAN_IQN/0" \
	device="$T/cache.img" size=16M block_size=64K update_buffer=1M
# Only the front writes the SAN: it may keep its blocks across restarts
# (an iscsi origin cannot prove that itself; docs/cache-engine.md).
sed -i 's/^cache = ssd$/&\nexclusive = yes/' "$T/front.conf"
hl_front_start "$T/front.conf"

# Every block gets a verify pattern first.
"$BENCH" --quiet --workload seq --read 0 --verify --bs 64K --qd 8 --count 1024 "$URL" \
	>"$T/fill.out" 2>&1 || hl_fail "verify fill: $(tail -3 "$T/fill.out")"

"$BENCH" --quiet --workload hotset:80/30 --read 60 --verify --sessions 3 --qd 8 \
	--bs 3584,4K,64K --range 48M --time $RUNTIME --seed 57 "$URL" >"$T/hot.out" 2>"$T/hot.err" &
HOT_PID=$!
HL_PIDS+=("$HOT_PID")
HL_PID_NAMES+=(hotlun-bench-hot)
"$BENCH" --quiet --workload seq --read 100 --verify --qd 4 --bs 64K,128K \
	--offset 48M --range 16M --time $RUNTIME --seed 56 "$URL" >"$T/seq.out" 2>"$T/seq.err" &
SEQ_PID=$!
HL_PIDS+=("$SEQ_PID")
HL_PID_NAMES+=(hotlun-bench-seq)

sleep 9
# The paths this test is about ran (counters of this front process, one read).
out=$("$HL_BUILDDIR/hotlunctl" --socket "$ST/ctl.sock" stats --json 2>&1) ||
	hl_fail "hotlunctl stats failed: $out"
counts=$(python3 -c '
import json, sys
c = json.loads(sys.argv[1])["caches"]["ssd"]
print(" ".join("%s=%d" % (k, c[k]) for k in sys.argv[2:]))' "$out" \
	window_fills promotions write_updates read_partial read_bypass read_hits \
	update_buffer_writebacks) ||
	hl_fail "no cache counters: $out"
hl_log "under load: $counts"
[[ " $counts" =~ =0( |$) ]] && hl_fail "a path of the default policy did not run: $counts"

kill -KILL "$FRONT_PID"
wait "$FRONT_PID" 2>/dev/null
hl_forget "$FRONT_PID"
hl_front_start "$T/front.conf"
hl_log "front killed (-9) and restarted"

# Then the update buffer is resized (written back while the loads go on)
# and the write policy switched, again and again, until the loads end.
CTL="$HL_BUILDDIR/hotlunctl --socket $ST/ctl.sock"
changes=0
for step in 0:update 256K:invalidate 1M:update 0:invalidate 64K:update 1M:update; do
	sleep 1
	kill -0 "$HOT_PID" 2>/dev/null || break
	$CTL /caches/ssd set update_buffer="${step%%:*}" write_policy="${step#*:}" \
		>"$T/set.out" 2>&1 || hl_fail "live change $step refused: $(cat "$T/set.out")"
	changes=$((changes + 1))
done
hl_log "$changes live changes of update_buffer and write_policy under load:"
grep -o 'update buffer now.*' "$FRONT_LOG" >&2
[ "$changes" -ge 4 ] || hl_fail "the loads ended before the live changes ran"
grep -q 'update buffer now 0 KiB ([1-9][0-9]* KiB written back)' "$FRONT_LOG" ||
	hl_fail "no resize wrote a buffer back under load"

fail=
for b in hot seq; do
	pid=HOT_PID
	[ $b = seq ] && pid=SEQ_PID
	wait "${!pid}"
	rc=$?
	hl_forget "${!pid}"
	summary=$(tail -n 1 "$T/$b.out")
	hl_log "$b: $summary"
	if ! [[ $summary =~ verify_errors=0 ]] || [ $rc != 0 ]; then
		grep -m 5 "MISMATCH\|error" "$T/$b.err" >&2
		fail+=" $b (status $rc: $summary)"
	fi
done
[ -z "$fail" ] || hl_fail "stale or wrong data, or I/O errors:$fail"
hl_check_alive "$FRONT_PID"
hl_log "PASS"
