#!/bin/bash
# compliance.sh - libiscsi's SCSI/iSCSI conformance suite (iscsi-test-cu)
# against hotlund: the families the project claims must run with 0 failures.
# Tests that skip themselves ("[SKIPPED] ...") pass in CUnit's count, so every
# skip is collected and must be listed, with its reason, in the known-skips
# table of docs/compliance.md; an undocumented skip fails this test.
# The family list lives in tests/functional/compliance.families (shared with
# tests/bench/compliance_vs_tgt.sh).
. "$(dirname "$0")/lib.sh"
hl_need iscsi-test-cu

T=$(hl_tmpdir)
FAMILIES=$(grep -v '^#' "$HL_SRCDIR/tests/functional/compliance.families" | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
DOC=$HL_SRCDIR/docs/compliance.md
[ -n "$FAMILIES" ] || hl_error "no families listed"

hl_target_start --size 128M
hl_log "iscsi-test-cu -d -t $FAMILIES $HL_URL"
rc=0
# The selected families take ~10 s; a hang (e.g. a command never answered)
# is reported with the test it happened in.
timeout -k 5 "${HL_CU_TIMEOUT:-300}" iscsi-test-cu -d -t "$FAMILIES" "$HL_URL" >"$T/cu.out" 2>&1 || rc=$?
if [ $rc = 124 ] || [ $rc = 137 ]; then
	tail -n 20 "$T/cu.out" >&2
	echo "---- hotlund log (last lines) ----" >&2
	tail -n 20 "$HL_LOG" >&2
	hl_fail "iscsi-test-cu hung in $(grep -E '^Suite: |^  Test: ' "$T/cu.out" | tail -2 | tr -s ' \n' ' ')(killed after ${HL_CU_TIMEOUT:-300} s)"
fi
hl_check_alive
hl_target_stop

# Summary: "tests   TOTAL   RAN   PASSED   FAILED   INACTIVE"
read -r total ran passed failed inactive < <(awk '$1 == "tests" && NF == 6 {print $2, $3, $4, $5, $6}' "$T/cu.out")
if [ -z "${total:-}" ]; then
	tail -n 40 "$T/cu.out" >&2
	hl_fail "no CUnit run summary (iscsi-test-cu status $rc)"
fi

# Skips: remember the suite and test each [SKIPPED] line belongs to.
awk '
	/^Suite: / { suite = $2 }
	/^  Test: / { test = $2 }
	/\[SKIPPED\]/ {
		r = $0; sub(/.*\[SKIPPED\] */, "", r)
		key = suite "." test
		if (!(key in seen)) { seen[key] = 1; print key "\t" r }
	}' "$T/cu.out" >"$T/skips"

# Failures with their assertion lines.
grep -E -A6 '\.\.\.FAILED' "$T/cu.out" >"$T/failures" || true

undocumented=0
while IFS=$'\t' read -r key reason; do
	if grep -Fq "| $key |" "$DOC" 2>/dev/null; then
		hl_log "known skip: $key ($reason)"
	else
		echo "UNDOCUMENTED SKIP: $key: $reason" >&2
		undocumented=$((undocumented + 1))
	fi
done <"$T/skips"

hl_log "iscsi-test-cu: $total tests, $ran ran, $passed passed, $failed failed, $inactive inactive, $(wc -l <"$T/skips") skipped inside a test (status $rc)"
if [ "$failed" != 0 ] || [ "$rc" != 0 ]; then
	cat "$T/failures" >&2
	hl_fail "$failed conformance test(s) failed (iscsi-test-cu status $rc)"
fi
[ "$ran" = "$total" ] && [ "$inactive" = 0 ] || hl_fail "not every selected test ran"
# Guard against a family list that silently selects little.
[ "$total" -ge 100 ] || hl_fail "only $total tests selected; the families did not resolve"
[ "$undocumented" = 0 ] || hl_fail "$undocumented skip(s) not listed in docs/compliance.md"
hl_log "PASS"
