#!/bin/bash
# gateway_san.sh - two hotlund gateways serve one SAN LUN (an iscsi://
# origin: a third hotlund with a file LUN plays the SAN) under ALUA (issue
# 17; docs/gateways.md). Ownership is a SCSI-3 persistent reservation on the
# SAN LUN; the owner's heartbeat is a counter in its reservation key, moved
# at every renew: a standby takes over when it stands still for dead, when
# the owner releases, or when asked (hotlun-bench's SET TARGET PORT GROUPS
# after its path to the owner failed); a takeover PREEMPTs the old owner's
# key (the SAN refuses its writes).
#  0. one owner, one standby (NOT READY 04h/0Bh at login), one LU;
#  1. kill: the owner SIGKILLed under verified load; 0 errors, 0 mismatches;
#  2. planned: the new owner stopped (SIGTERM) under load; 0 errors;
#  3. split brain: the owner frozen (SIGSTOP) under load, the peer takes
#     over on request, new data written through it; the frozen gateway
#     thawed and read through its own path at once: never the old data;
#     it ends up a standby by itself (its key preempted);
#  4. failback: the first gateway owns the LUN again after 1% of it was
#     rewritten through the peer; an iscsi origin cannot tell what changed,
#     so its cache starts cold for that LUN (0 kept) and nothing is stale;
#  5. warm restart: the owner, its cache warm and quiet, is killed and
#     started again; the new process takes its earlier run's reservation
#     (by force, with the lease wait) and, since nobody else changed the PR
#     state meanwhile, keeps its cached blocks (kept > 0) and nothing read
#     through it is stale;
#  6. silent owner: the owner frozen (SIGSTOP) while no client asks the
#     standby anything: the standby takes the LUN by itself (the owner's key
#     stood still for dead) within dead + lease + margin + a look (+ 1.5 s
#     of slack), new data written through it; the thawed owner's queued
#     read is never the old data, and it ends up a standby.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-img qemu-io iscsi-inq bc
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"
CTL=$HL_BUILDDIR/hotlunctl

T=$(hl_tmpdir)
# the SAN: a hotlund with a 64 MiB file LUN (PERSISTENT RESERVE with PREEMPT, APTPL)
HL_IQN=$HL_IQN_PREFIX:gw-san-backend hl_target_start --size 64M
SAN_PID=$HL_PID
SAN_URL=$HL_URL
trap 'rc=$?; for p in "${HL_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; done; (exit $rc); hl_cleanup' EXIT

IQN=$HL_IQN_PREFIX:gw-san
GW_ORIGIN=$SAN_URL
# scenario 3: the frozen owner's CLOCK_MONOTONIC stands still (a suspend), BOOTTIME runs on
GW_FREEZE_CLOCKS=mono
# the LU's identity: set alike on both gateways (an iscsi origin has none to share)
GW_DISK_EXTRA="serial = gwsan0001\nnaa = 6001405aa0000000000000000000beef"
. "$HL_SRCDIR/tests/functional/gateway_lib.sh"
gw_setup
gw_scenarios
ws=$GW_WARM
kept=$(sed -n 's/^kept \([0-9]*\), dropped \([0-9]*\).*/\1/p' <<<"$ws")
[ "$kept" = 0 ] || hl_fail "an iscsi origin cannot tell what changed, yet the failback kept blocks: $ws"
gw_no_stale

# ---- 5. the owner killed with a warm, quiet cache and started again: warm
# (one path: a transitioning moment of a loaded host fails a pass, the next one goes on)
for i in 1 2 3; do
	"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time 3 "$(url 1)" >"$T/warm5.out" 2>&1 && break
	[ $i = 3 ] && hl_fail "warming through gateway 1: $(tail -3 "$T/warm5.out")"
done
sleep 3 # a proof of the quiet LUN recorded (twice, meta_interval_ms apart)
kill -KILL "${PID[1]}"
wait "${PID[1]}" 2>/dev/null
hl_forget "${PID[1]}"
start_gw 1
wait_owner 1 20
ws=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["caches"]["ssd"]["disks"]["san"]["warm_start"])' \
	"$("$CTL" --socket "${SOCK[1]}" stats --json)")
hl_log "5: restart after a kill: $ws"
kept=$(sed -n 's/^kept \([0-9]*\), dropped \([0-9]*\).*/\1/p' <<<"$ws")
[ -n "$kept" ] && [ "$kept" -gt 0 ] || hl_fail "the restarted owner kept nothing of its warm cache: $ws"
gw_no_stale "5: restart"

# ---- 6. the owner frozen, and nobody asks: the standby sees the owner's
# heartbeat (its reservation key's counter) stand still and takes the LUN
# by itself within dead + lease (+ margin, a look, the revalidation); the
# thawed owner answers the read queued on its path with nothing stale.
LEASE_S=2 DEAD_S=4 # hotlund's defaults (gateway_lease_ms, gateway_dead_ms)
gw_cached_reader qio6 58M
[ "$(own 2 state)" = standby ] && [ "$(own 2 owner)" = 1 ] ||
	hl_fail "6: gateway 2 is not a standby of gateway 1: $(own 2 state), owner $(own 2 owner)"
t_stop=$(date +%s%N)
kill -STOP "${PID[1]}"
gw_stopped "${PID[1]}"
echo "read -P 0x6b 58M 64k" >&"$QFD"
# no client talks to gateway 2: no SET TARGET PORT GROUPS, no hotlunctl takeover
for i in $(seq 1 $(((DEAD_S + LEASE_S + 6) * 10))); do
	[ "$(own 2 state)" = owner ] && [ "$(own 2 alua)" = active/optimized ] && break
	sleep 0.1
done
[ "$(own 2 state)" = owner ] ||
	hl_fail "6: gateway 2 did not take the frozen owner's LUN by itself: $(own 2 state), last: $(own 2 last)"
last=$(own 2 last)
grep -q "silent for" <<<"$last" || hl_fail "6: gateway 2 took it, but not for the owner's silence: $last"
# when it began to serve, by its own log (polling hotlunctl lags on a busy host)
served=$(grep "disk san: this gateway (2) owns it now (gateway 1 silent" "$LOG2" | tail -1 | cut -c1-23)
[ -n "$served" ] || hl_fail "6: gateway 2 logged no takeover from a silent owner"
took=$(echo "($(date -d "$served" +%s%N) - $t_stop) / 1000000000" | bc -l)
# the bound: the owner's last heartbeat (at most lease/4 and a round trip before the
# stop) + dead + a look (0.25 s) + lease + margin (0.5 s) + the revalidation; 1.5 s
# of it for this 2-core host shared with other work
bound=$(echo "$DEAD_S + $LEASE_S + 0.5 + 0.5 + 0.25 + 1.5" | bc -l)
[ "$(echo "$took <= $bound" | bc)" = 1 ] ||
	hl_fail "6: gateway 2 served $(printf %.2f "$took") s after the freeze (bound $bound s): $last"
hl_log "6: frozen owner, no request: gateway 2 serves $(printf %.2f "$took") s after the freeze (bound $bound s; $last)"
qemu-io -f raw -c 'write -P 0x6b 58M 64k' "$(url 2)" >"$T/w6.out" 2>&1 ||
	hl_fail "6: write through gateway 2: $(cat "$T/w6.out")"
gw_clock_freeze $(($(date +%s%N) - t_stop)) # its MONOTONIC clock stood still (a suspend)
kill -CONT "${PID[1]}"
gw_after_thaw qio6 0x6b 58M 6
qemu-io -f raw -r -c 'read -P 0x6b 58M 64k' "$(url 2)" >"$T/r6b.out" 2>&1 ||
	hl_fail "6: the new data through gateway 2: $(cat "$T/r6b.out")"
exit 0
