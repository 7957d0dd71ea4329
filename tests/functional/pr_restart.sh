#!/bin/bash
# pr_restart.sh - persistent reservations on the real daemon, and APTPL:
# A registers with APTPL=1 and takes a Write Exclusive reservation, B (an
# unregistered nexus) gets RESERVATION CONFLICT on a write and may read,
# B registers and preempts A, hotlund restarts, and B's reservation, the
# keys and the generation are still there (state_dir), A still conflicts.
# Then APTPL=0 and another restart: nothing is kept.
. "$(dirname "$0")/lib.sh"
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
[ -x "$TOOL" ] || hl_missing "$TOOL not built (make check builds it)"

hl_target_start --size 16M
A=1
B=2
# expect ISID OP... -- WANT: run one command as nexus ISID, compare its one-line answer
expect() {
	local isid=$1 want=${*: -1} out
	local args=("${@:2:$(($# - 2))}")
	out=$("$TOOL" pr "$HL_URL" "$isid" "${args[@]}" 2>"$(hl_tmpdir)/tool.err") ||
		{ cat "$(hl_tmpdir)/tool.err" >&2; hl_fail "hl_scsi_tool pr $isid ${args[*]}: status $?"; }
	out=${out% ms=*} # how long a PR OUT took: not compared
	[ "$out" = "$want" ] || hl_fail "nexus $isid ${args[*]}: got '$out', want '$want'"
	hl_log "ok: nexus $isid ${args[*]} -> $out"
}

expect $A caps "ptpl_c 1 ptpl_a 0 sip_c 1"
expect $A register 0 0xaaaa 1 GOOD
expect $A caps "ptpl_c 1 ptpl_a 1 sip_c 1"
expect $A reserve 0xaaaa 1 GOOD
expect $A write 100 GOOD
expect $B write 100 CONFLICT
expect $B read 100 GOOD
expect $B reserve 0xbbbb 1 CONFLICT
expect $B register 0 0xbbbb 1 GOOD
expect $A read-keys "gen 2 keys 0xaaaa 0xbbbb"
expect $B preempt 0xbbbb 0xaaaa 3 GOOD
expect $A write 100 CONFLICT
expect $A read 100 CONFLICT
expect $B write 100 GOOD
expect $B read-rsv "gen 3 type 3 key 0xbbbb"
[ -n "$(ls "$(hl_tmpdir)"/state/pr-* 2>/dev/null)" ] || hl_fail "no PR state file in state_dir"

hl_target_restart
hl_log "restarted hotlund"
expect $B read-rsv "gen 3 type 3 key 0xbbbb"
expect $A read-keys "gen 3 keys 0xbbbb"
expect $A write 100 CONFLICT
expect $B write 100 GOOD
expect $B caps "ptpl_c 1 ptpl_a 1 sip_c 1"

# APTPL=0: the next restart keeps nothing
expect $B register 0xbbbb 0xbbbc 0 GOOD
expect $B caps "ptpl_c 1 ptpl_a 0 sip_c 1"
hl_target_restart
hl_log "restarted hotlund"
expect $A read-rsv "gen 0 none"
expect $A read-keys "gen 0 keys"
expect $A write 100 GOOD
hl_check_alive
hl_target_stop
hl_log "PASS"
