#!/bin/bash
# cache_dead_stop.sh - a stop while the cache device stops answering the
# metadata thread (HOTLUN_TEST_CACHE_META_HOLD: a record sync waits, holding
# sync_lock, while a file exists, like a device write that never returns):
#  1. the stop ends within its bounds (HOTLUN_TEST_CACHE_DRAIN_MS=1000 for the
#     drain, the metadata thread and the workers) and says it abandoned the
#     metadata thread and closed without saving the records;
#  2. the restart does not trust the records it could not sync: the map says
#     failed, the device is formatted, and no block differs from the origin
#     (changed on disk while hotlund was down);
#  3. a clean stop after that restarts warm again (the check in 2 can tell);
#     then a stop whose close's own record save is held (the metadata thread
#     idle) also ends within the bound and seals the map failed;
#  4. the restart after it formats too; 0 blocks differ;
#  5. a stop while the warm start's lazy restore is held in a read
#     (HOTLUN_TEST_RESTORE_DELAY_MS slows it, the hold file stops it)
#     ends within the bounds, seals the map; the restart formats.
. "$(dirname "$0")/lib.sh"

hl_need python3 qemu-img
hl_cache_front_prereqs
. "$(dirname "$0")/cache_dead_lib.sh"
T=$(hl_tmpdir)
dead_setup deadstop "$T/f.conf"


# ---- 1. the stop with the metadata thread held in a sync
start_held "$T/f.conf"
grep -q "test knob: record syncs wait while $T/hold exists" "$FRONT_LOG" || hl_fail "the hold knob did not act"
reads 2 32M
hl_cache_settle "$sock" ssd
syncs=$(hl_cache_stat "$sock" ssd meta_syncs)
touch "$T/hold"
reads 2 64M # new fills past 32M: changes, and the next sync waits
sleep 2.5   # two meta intervals: the thread is in the held sync now
[ "$(hl_cache_stat "$sock" ssd meta_dirty)" = True ] || hl_fail "nothing left to sync: the test proves little"
now=$(hl_cache_stat "$sock" ssd meta_syncs)
[ "$now" = "$syncs" ] || [ "$now" = $((syncs + 1)) ] ||
	hl_fail "syncs went on while held ($syncs -> $now)"
log=$FRONT_LOG
t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$(ms_since "$t0")
line=$(grep "the metadata thread did not end within $BOUND ms" "$log") ||
	hl_fail "the stop did not abandon the metadata thread: $(tail -n 8 "$log")"
grep -q 'closed without saving its metadata' "$log" || hl_fail "the close did not say it saved nothing"
grep -q 'says failed: the next start formats the device' "$log" || hl_fail "the map was not sealed failed"
hl_log "1. stop with the metadata thread held took $ms ms: $line"
[ "$ms" -lt $((4 * BOUND)) ] || hl_fail "the stop took $ms ms with bounds of $BOUND ms"
grep -qx 'state failed' "$T/st/cache-ssd.map" ||
	hl_fail "the map does not say failed: $(head -n 3 "$T/st/cache-ssd.map")"

# ---- 2. the restart trusts nothing of it; the origin changed while down
rm -f "$T/hold"
python3 - "$T/o.img" <<'PY'
import os, sys
with open(sys.argv[1], 'r+b') as f:  # 8 MiB inside the cached range, new data
    f.seek(4 << 20)
    f.write(os.urandom(8 << 20))
PY
restart_formats 2 "$T/f.conf"

reads 2 32M
hl_cache_settle "$sock" ssd 1
hl_stop "$FRONT_PID"

# ---- 3. a clean stop restarts warm (the check in 2 can tell); then the
# close's own save held (the metadata thread idle: nothing to sync)
start_held "$T/f.conf"
wait_cache_start
grep -q 'cache ssd: .*warm restart' "$FRONT_LOG" ||
	hl_fail "a clean stop did not restart warm: $(grep 'cache ssd' "$FRONT_LOG" | head -5)"
hl_wait_restored "$FRONT_LOG" ssd
reads 2 48M
hl_cache_settle "$sock" ssd 1
touch "$T/hold"
log=$FRONT_LOG
t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$(ms_since "$t0")
line=$(grep "saving the metadata at close did not end within $BOUND ms" "$log") ||
	hl_fail "the close's save was not abandoned: $(tail -n 8 "$log")"
grep -q 'says failed: the next start formats the device' "$log" || hl_fail "3. the map was not sealed failed"
grep -qx 'state failed' "$T/st/cache-ssd.map" ||
	hl_fail "3. the map does not say failed: $(head -n 3 "$T/st/cache-ssd.map")"
hl_log "3. warm restart after a clean stop; then a stop with the close's save held took $ms ms: $line"
[ "$ms" -lt $((4 * BOUND)) ] || hl_fail "3. the stop took $ms ms with bounds of $BOUND ms"

# ---- 4. the restart after it trusts nothing either
rm -f "$T/hold"
restart_formats 4 "$T/f.conf"
hl_cache_settle "$sock" ssd 1
hl_stop "$FRONT_PID" # clean: the next start restores the blocks the check filled

# ---- 5. a stop while the warm start's lazy restore is held in a device read
touch "$T/hold"
start_held "$T/f.conf" HOTLUN_TEST_RESTORE_DELAY_MS=100
wait_cache_start
grep -q 'cache ssd: .*warm restart' "$FRONT_LOG" ||
	hl_fail "5. no warm restart to hold the restore of: $(grep 'cache ssd' "$FRONT_LOG" | head -5)"
sleep 0.5
[ "$(hl_cache_stat "$sock" ssd restore_state)" = running ] ||
	hl_fail "5. the restore is not running: $(hl_cache_stat "$sock" ssd restore_state)"
log=$FRONT_LOG
t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$(ms_since "$t0")
line=$(grep "the restore did not stop within $BOUND ms" "$log") ||
	hl_fail "5. the stop did not abandon the held restore: $(tail -n 8 "$log")"
grep -qx 'state failed' "$T/st/cache-ssd.map" ||
	hl_fail "5. the map does not say failed: $(head -n 3 "$T/st/cache-ssd.map")"
hl_log "5. stop with the restore held took $ms ms: $line"
[ "$ms" -lt $((5 * BOUND)) ] || hl_fail "5. the stop took $ms ms with bounds of $BOUND ms"
rm -f "$T/hold"
restart_formats 5 "$T/f.conf"
hl_stop "$FRONT_PID"
exit 0
