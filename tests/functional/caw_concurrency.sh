#!/bin/bash
# caw_concurrency.sh - COMPARE AND WRITE is atomic against other COMPARE AND
# WRITEs and against plain writes next door, on every session and portal:
# CLIENTS sessions (alternating between two portals) increment a counter
# block with read + CAW(old -> old + 1) while writing their own neighbouring
# blocks. hl_scsi_tool checks: no lost update (counter = successful CAWs =
# CLIENTS x ITERATIONS), no false miscompare, neighbours hold their owners'
# last writes.
. "$(dirname "$0")/lib.sh"
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
[ -x "$TOOL" ] || hl_missing "$TOOL not built (make check builds it)"

CLIENTS=${HL_CAW_CLIENTS:-4}
ITER=${HL_CAW_ITERATIONS:-200}
hl_target_start --size 64M --portal2
URL2=iscsi://127.0.0.1:$HL_PORT2/$HL_IQN/$HL_LUN
T=$(hl_tmpdir)
if ! "$TOOL" caw "$HL_URL,$URL2" "$CLIENTS" "$ITER" >"$T/caw.out" 2>"$T/caw.err"; then
	cat "$T/caw.out" "$T/caw.err" >&2
	hl_fail "COMPARE AND WRITE hammer: $(cat "$T/caw.out")"
fi
hl_log "$(cat "$T/caw.out")"
grep -q " miscompares 0 " "$T/caw.out" && [ "$CLIENTS" -gt 1 ] &&
	hl_log "note: no miscompare at all (the clients never raced)"
hl_check_alive
hl_target_stop
hl_log "PASS"
