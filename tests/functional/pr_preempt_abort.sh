#!/bin/bash
# pr_preempt_abort.sh - PERSISTENT RESERVE OUT / PREEMPT AND ABORT across
# sessions (SPC-4 5.12.11.2.4), the way a failover cluster fences a node:
# node A holds a WRITE EXCLUSIVE reservation and has a write in flight to a
# slow origin (1.5 s per I/O); node B preempts A's key with abort.
# Pass: B's command is answered only after A's write has left the target
# (so it cannot land after B was told it owns the LU); A's write is
# aborted (no response: TAS=0) and A's next command gets UNIT ATTENTION
# REGISTRATIONS PREEMPTED; the target logs the abort.
. "$(dirname "$0")/lib.sh"
[ "$HL_TARGET" = tgt ] && hl_skip "tests hotlund's task abort; nothing to run against tgt"
SESSION=$HL_BUILDDIR/tests/functional/hl_session_cmds
[ -x "$SESSION" ] || hl_missing "$SESSION not built"

T=$(hl_tmpdir)
PORT=$(hl_free_port) || hl_error "no free port"
IQN=$HL_IQN_PREFIX:pr-preempt-abort
mkdir -p "$T/state"
hl_make_disk "$T/disk.img" 16M
cat >"$T/hotlund.conf" <<EOF
# written by $HL_TEST_NAME
[global]
portal = 127.0.0.1:$PORT
state_dir = $T/state
control_socket = $T/state/ctl.sock
log_level = info

[disk slow]
origin = file:$T/disk.img
origin_latency_ms = 1500

[target $IQN]
lun.0 = slow
allow = ALL
EOF
hl_start_hotlund "$T/hotlund.conf"
URL=iscsi://127.0.0.1:$PORT/$IQN/0

# Node A: register, reserve, and leave a write running.
hl_pr_holder "$URL"

# Node B: preempt A's key with abort while A's write is in the origin.
printf 'register b\npreempt-abort b a 1\n' |
	HL_INITIATOR=$HL_IQN_PREFIX:node-b "$SESSION" "$URL" >"$T/b.out" 2>&1 ||
	hl_fail "node B's session failed: $(cat "$T/b.out")"
pa=$(sed -n 2p "$T/b.out")
[[ $pa =~ ^GOOD\ ms=([0-9]+)$ ]] || hl_fail "PREEMPT AND ABORT: $pa"
ms=${BASH_REMATCH[1]}
hl_log "PREEMPT AND ABORT answered after $ms ms (A's write had up to 1500 ms left)"
[ "$ms" -ge 700 ] ||
	hl_fail "PREEMPT AND ABORT answered after $ms ms, before node A's write could have left the origin"

# Node A: its write is never answered; its next command reports the preemption.
printf 'wait 2500\ntur\n' >&3
exec 3>&-
wait "$APID"
hl_forget "$APID"
grep -q '^WAITED pending=1$' "$T/a.out" ||
	hl_fail "node A's aborted write was answered: $(cat "$T/a.out")"
tail -n 1 "$T/a.out" | grep -q '^CHECK 6/2a/05' ||
	hl_fail "node A's next command: $(tail -n 1 "$T/a.out") (want UNIT ATTENTION 2A/05)"
grep -q "PREEMPT AND ABORT: aborting the tasks of 1 preempted nexus" "$HL_LOG" ||
	hl_fail "no abort in the target's log"
hl_check_alive "$HL_PID"
hl_log "PASS: node A's write aborted, node B answered after it left (${ms} ms)"
