#!/bin/bash
# origin_iscsi_own.sh - ownership among gateways on the iscsi:// origin
# (SCSI-3 persistent reservations) against a SAN in its own process: a
# hotlund with a file LUN (or tgtd with HL_TARGET=tgt). The checks are those
# of tests/unit/origin/iscsi_own_ut.c (two gateway origins and a lone one:
# acquire, -EBUSY, request seen at renew, release and handover, a forced
# takeover that the SAN enforces, warm restart proofs), run with
# HL_OWN_SAN_URL pointing at this SAN instead of the unit test's own.
. "$(dirname "$0")/lib.sh"

UT=$HL_BUILDDIR/tests/unit/origin/iscsi_own_ut
[ -x "$UT" ] || hl_error "$UT is not built (make check builds it)"

hl_target_start --size 16M
out=$(hl_tmpdir)/ut.out
HL_OWN_SAN_URL=$HL_URL timeout 120 "$UT" >"$out" 2>&1
rc=$?
if [ $rc != 0 ]; then
	cat "$out" >&2
	hl_fail "iscsi_own_ut against the $HL_TARGET SAN at $HL_URL: exit $rc"
fi
grep -q "Run Summary" "$out" || { cat "$out" >&2; hl_fail "no CUnit summary"; }
hl_target_stop
hl_log "PASS ($HL_TARGET SAN)"
