#!/bin/bash
# gateway_san.sh - two hotlund gateways serve one SAN LUN (an iscsi://
# origin: a third hotlund with a file LUN plays the SAN) under ALUA (issue
# 17; docs/gateways.md). Ownership is a SCSI-3 persistent reservation on the
# SAN LUN; a SAN gives no heartbeat, so a standby takes over only when asked:
# here by hotlun-bench's SET TARGET PORT GROUPS after its path to the owner
# failed, which the standby turns into a request and, unanswered for 3 s,
# into a PREEMPT of the old owner's key (the SAN refuses its writes).
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
#     through it is stale.
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
exit 0
