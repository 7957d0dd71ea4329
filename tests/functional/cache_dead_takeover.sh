#!/bin/bash
# cache_dead_takeover.sh - a takeover (docs/gateways.md rule 4) while the
# new owner's cache device does not answer its metadata writes
# (HOTLUN_TEST_CACHE_META_HOLD: a record sync waits, holding sync_lock,
# while a file exists). Two gateways on a SAN LUN (an iscsi: origin, which
# cannot tell what changed: a takeover drops every cached block of the disk
# and must write those records before it serves):
#  1. gateway 1 owns the LUN, its cache warm; handed over to gateway 2, which
#     rewrites 640 KiB of it in 10 places;
#  2. gateway 1's record syncs are held, gateway 2 hands the LUN back: gateway
#     1 serves it within about one bound (HOTLUN_TEST_CACHE_DRAIN_MS=1000;
#     before, its revalidation waited for the held sync for ever and the LUN
#     was never served), its map sealed "failed", its cache in pass-through;
#  3. everything read through gateway 1 is what the SAN holds (0 stale
#     blocks, no cache hit), and a write through it completes (pass-through
#     writes do not wait for the kill the stuck metadata thread cannot do);
#  4. the hold lifted, gateway 1 stopped and started again: it formats its
#     cache.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-img qemu-io python3
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"
. "$(dirname "$0")/cache_dead_lib.sh"
CTL=$HL_BUILDDIR/hotlunctl
BOUND=1000

T=$(hl_tmpdir)
HL_IQN=$HL_IQN_PREFIX:deadtk-backend hl_target_start --size 64M
SAN_URL=$HL_URL
IQN=$HL_IQN_PREFIX:deadtk
GW_ORIGIN=$SAN_URL
GW_DISK_EXTRA="serial = deadtk001\nnaa = 6001405aa0000000000000000000dead"
. "$HL_SRCDIR/tests/functional/gateway_lib.sh"
gw_setup

# gateway 1 with record syncs held while $T/hold exists (never joined: no leak check)
asan=${ASAN_OPTIONS:-}
export HOTLUN_TEST_CACHE_META_HOLD=$T/hold HOTLUN_TEST_CACHE_DRAIN_MS=$BOUND
export ASAN_OPTIONS=${asan:+$asan:}detect_leaks=0
start_gw 1
unset HOTLUN_TEST_CACHE_META_HOLD HOTLUN_TEST_CACHE_DRAIN_MS
if [ -n "$asan" ]; then export ASAN_OPTIONS=$asan; else unset ASAN_OPTIONS; fi
grep -q "test knob: record syncs wait while $T/hold exists" "$LOG1" || hl_fail "the hold knob did not act"
wait_owner 1 20

# ---- 1. gateway 1 warm, then the LUN is gateway 2's and changes there
head -c $((64 * 1024 * 1024)) /dev/urandom >"$T/want.img"
timeout 120 qemu-img convert -n -f raw -O raw "$T/want.img" "$(url 1)" ||
	hl_fail "could not write the image through gateway 1"
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time 3 "$(url 1)" >"$T/warm.out" 2>&1 ||
	hl_fail "warming through gateway 1: $(tail -3 "$T/warm.out")"
hl_cache_settle "${SOCK[1]}" ssd
blocks=$(hl_cache_stat "${SOCK[1]}" ssd used_slots)
[ "$blocks" -gt 0 ] || hl_fail "gateway 1 cached nothing: the test proves little"
start_gw 2
wait_standby 2 1 10
"$CTL" --socket "${SOCK[1]}" handover /disks/san >"$T/ho.out" 2>&1 || hl_fail "handover: $(cat "$T/ho.out")"
wait_owner 2 10
gw_rewrite_tenth 2
hl_log "1. gateway 1 had $blocks block(s) of the LUN cached; gateway 2 rewrote 10 x 64 KiB"

# ---- 2. gateway 1's record syncs held; the LUN handed back to it
touch "$T/hold"
t0=$(date +%s%N)
"$CTL" --socket "${SOCK[2]}" handover /disks/san >"$T/ho.out" 2>&1 || hl_fail "handover: $(cat "$T/ho.out")"
wait_owner 1 20
ms=$(ms_since "$t0")
gained=$(grep -o 'disk san: this gateway (1) owns it now.*' "$LOG1" | tail -n 1)
# the acquisition itself (the SAN's preempt, the revalidation, a renew); the
# wait before it is the hold (gateway 1 released the LUN less than 10 s ago)
took=$(sed -n 's/.* after \([0-9]*\) ms$/\1/p' <<<"$gained")
[ -n "$took" ] && [ "$took" -lt $((3 * BOUND)) ] || hl_fail "gateway 1's takeover took too long: $gained"
grep -q "the takeover's record update did not end within $BOUND ms" "$LOG1" ||
	hl_fail "gateway 1's takeover did not give up on its record sync: $(tail -n 8 "$LOG1")"
grep -qx 'state failed' "$T/gw1/cache-ssd.map" ||
	hl_fail "gateway 1's map does not say failed: $(head -n 3 "$T/gw1/cache-ssd.map")"
[ "$(hl_cache_stat "${SOCK[1]}" ssd passthrough)" = True ] || hl_fail "gateway 1's cache is not in pass-through"
ws=$(hl_cache_stat "${SOCK[1]}" ssd warm_start san)
grep -q "pass-through" <<<"$ws" || hl_fail "gateway 1's warm_start does not say pass-through: $ws"
hl_log "2. the takeover with the records held took $took ms (bound $BOUND ms; $ms ms after the handover command, the hold included): $ws"

# ---- 3. nothing stale, no hit; writes pass
hits0=$(hl_cache_stat "${SOCK[1]}" ssd read_hits)
gw_no_stale "3. the takeover with the records held"
hits1=$(hl_cache_stat "${SOCK[1]}" ssd read_hits)
[ "$hits1" = "$hits0" ] || hl_fail "gateway 1 served $((hits1 - hits0)) hit(s) after the takeover"
t0=$(date +%s%N)
timeout 20 qemu-io -f raw -c 'write -P 0x6b 8M 64k' "$(url 1)" >"$T/w1.out" 2>&1 ||
	hl_fail "a write through gateway 1 failed or hung: $(cat "$T/w1.out")"
ms=$(ms_since "$t0")
python3 - "$T/want.img" <<-'PY'
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(8 << 20)
    f.write(b'\x6b' * 65536)
PY
qemu-io -f raw -r -c 'read -P 0x6b 8M 64k' "$(url 1)" >"$T/r1.out" 2>&1
grep -qi "pattern verification failed\|error" "$T/r1.out" && hl_fail "gateway 1 reads its own write wrong: $(cat "$T/r1.out")"
hl_log "3. no hit after the takeover ($hits0 before, $hits1 after); a write through gateway 1 took $ms ms"

# ---- 4. the hold lifted: gateway 1 stopped (it hands the LUN to gateway 2), started again: formatted
rm -f "$T/hold"
kill -TERM "${PID[1]}"
for _ in $(seq 1 200); do hl_alive "${PID[1]}" || break; sleep 0.1; done
hl_alive "${PID[1]}" && hl_fail "gateway 1 did not stop within 20 s"
wait "${PID[1]}" 2>/dev/null
hl_forget "${PID[1]}"
start_gw 1
hl_wait_grep "$LOG1" 'cache ssd: .*formatted\|warm restart' 10 || hl_fail "gateway 1's cache did not start: $(tail -n 5 "$LOG1")"
grep -q 'cache ssd: .*formatted' "$LOG1" || hl_fail "gateway 1 restarted its cache warm: $(grep 'cache ssd' "$LOG1" | head -5)"
wait_standby 1 2 10
hl_log "4. gateway 1 restarted: its cache formatted"
exit 0
