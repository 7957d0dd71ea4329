#!/bin/bash
# compliance.sh - libiscsi's SCSI/iSCSI conformance suite (iscsi-test-cu)
# against hotlund: the families the project claims must run with no failure
# but the known test defects of docs/compliance.md (none today).
# Tests that skip themselves ("[SKIPPED] ...") pass in CUnit's count, so every
# skip is collected and must be listed, with its reason, in the known-skips
# table of docs/compliance.md; an undocumented skip fails this test.
# The family list lives in tests/functional/compliance.families (shared with
# tests/bench/compliance_vs_tgt.sh). The run and its verdict are cu_check.sh's,
# as for the other iscsi-test-cu tests.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cu_check.sh"
hl_need iscsi-test-cu

T=$(hl_tmpdir)
FAMILIES=$(grep -v '^#' "$HL_SRCDIR/tests/functional/compliance.families" | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
[ -n "$FAMILIES" ] || hl_error "no families listed"

hl_target_start --size 128M
hl_log "iscsi-test-cu -d -t $FAMILIES $HL_URL"
# The selected families take ~10 s; a hang (e.g. a command never answered)
# is reported with the test it happened in.
hl_cu_run "$T/cu.out" "${HL_CU_TIMEOUT:-300}" -d -t "$FAMILIES" "$HL_URL"
hl_check_alive
hl_target_stop
# At least 100 tests: guards against a family list that silently selects little.
hl_cu_check "$T/cu.out" "$CU_RC" 100
hl_log "PASS"
