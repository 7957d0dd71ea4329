#!/bin/bash
# cache_dead_remove.sh - a cached disk removed (SIGHUP reload) while the cache
# device stops answering the metadata thread (HOTLUN_TEST_CACHE_META_HOLD: a
# record sync waits, holding sync_lock, while a file exists):
#  1. the disk's close does not wait for ever for the held sync: within about
#     two bounds (HOTLUN_TEST_CACHE_DRAIN_MS=1000: the drain, then the wait
#     for the records' lock) the disk is closed, the metadata thread is
#     declared stuck and the map sealed "failed" (the records it could not
#     sync are not trusted);
#  1b. re-adding the disk to that cache is refused within the bound (the
#     attach waited for ever for sync_lock on the control reactor);
#  2. the control socket answers meanwhile, and a stop (SIGTERM) after it
#     ends within its bounds (before: the close sat in co_close's
#     pthread_mutex_lock(sync_lock) for ever, so the stop, which waits for
#     the closes, never ended);
#  3. the restart formats the cache and no block differs from the origin
#     (changed while hotlund was down).
. "$(dirname "$0")/lib.sh"

hl_need python3 qemu-img
hl_cache_front_prereqs
. "$(dirname "$0")/cache_dead_lib.sh"
T=$(hl_tmpdir)
dead_setup deadrm "$T/with.conf"
# the same without the disk and its target
sed '/^\[disk san\]/,$d' "$T/with.conf" >"$T/none.conf"
grep -q '^\[cache ssd\]' "$T/none.conf" && ! grep -q 'disk san' "$T/none.conf" ||
	hl_error "cannot write $T/none.conf"
cp "$T/with.conf" "$T/live.conf"


start_held "$T/live.conf"
grep -q "test knob: record syncs wait while $T/hold exists" "$FRONT_LOG" || hl_fail "the hold knob did not act"
reads 2 32M
hl_cache_settle "$sock" ssd
touch "$T/hold"
reads 2 64M # new fills past 32M: changes, and the next sync waits
sleep 2.5   # two meta intervals: the thread is in the held sync now
[ "$(hl_cache_stat "$sock" ssd meta_dirty)" = True ] || hl_fail "nothing left to sync: the test proves little"

# ---- 1. the removal
cp "$T/none.conf" "$T/live.conf"
t0=$(date +%s%N)
kill -HUP "$FRONT_PID"
hl_wait_grep "$FRONT_LOG" 'disk san closed' $((5 * BOUND / 1000)) ||
	hl_fail "the disk was not closed within $((5 * BOUND)) ms of the reload: $(tail -n 6 "$FRONT_LOG")"
ms=$(ms_since "$t0")
grep -q 'says failed: the next start formats the device' "$FRONT_LOG" ||
	hl_fail "the close did not seal the map failed: $(tail -n 6 "$FRONT_LOG")"
grep -qx 'state failed' "$T/st/cache-ssd.map" ||
	hl_fail "the map does not say failed: $(head -n 3 "$T/st/cache-ssd.map")"
hl_log "1. the disk's close with the metadata thread held took $ms ms"

# ---- 1b. re-adding the disk to that cache is refused, within the bound
# (hl_cache_attach took sync_lock unbounded on the control reactor: the
# change, the control socket and the stop after it hung for ever)
cp "$T/with.conf" "$T/live.conf"
t0=$(date +%s%N)
out=$(timeout 10 "$CTL" --socket "$sock" reload 2>&1) &&
	hl_fail "re-adding the disk to a cache whose metadata thread is stuck was accepted: $out"
ms=$(ms_since "$t0")
[ "$ms" -lt $((3 * BOUND)) ] || hl_fail "the refused re-add took $ms ms (bound $BOUND ms): $out"
echo "$out" | grep -q 'disk san' || hl_fail "the refusal does not name the disk: $out"
hl_log "1b. re-adding the disk refused in $ms ms: $out"
cp "$T/none.conf" "$T/live.conf"

# ---- 2. the control socket, then the stop
ts=$(date +%s%N)
timeout 5 "$CTL" --socket "$sock" stats --json >"$T/stats.out" 2>&1 ||
	hl_fail "hotlunctl stats after the removal failed: $(head -c 300 "$T/stats.out")"
hl_log "2. stats answered in $(ms_since "$ts") ms"
log=$FRONT_LOG
t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$(ms_since "$t0")
hl_log "2. the stop took $ms ms"
[ "$ms" -lt $((4 * BOUND)) ] || hl_fail "the stop took $ms ms with bounds of $BOUND ms"
grep -qx 'state failed' "$T/st/cache-ssd.map" ||
	hl_fail "2. the map does not say failed: $(head -n 3 "$T/st/cache-ssd.map")"

# ---- 3. the restart trusts nothing of it; the origin changed while down
rm -f "$T/hold"
python3 - "$T/o.img" <<'PY'
import os, sys
with open(sys.argv[1], 'r+b') as f:  # 8 MiB inside the cached range, new data
    f.seek(4 << 20)
    f.write(os.urandom(8 << 20))
PY
cp "$T/with.conf" "$T/live.conf"
restart_formats 3 "$T/live.conf"
hl_stop "$FRONT_PID"
exit 0
