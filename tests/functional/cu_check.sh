# tests/functional/cu_check.sh - sourced after lib.sh: judge one iscsi-test-cu
# output the way compliance.sh does. CUnit counts a test that skipped part of
# itself ("[SKIPPED] ...") as passed, so every skip is collected and must be
# listed (as "| Suite.Test |") in docs/compliance.md, or the run fails.
# A failed test fails the run unless it is listed in the "Known failures"
# section of docs/compliance.md (test defects, each with its reason).
# HL_CU_SKIP_REASONS names another section of docs/compliance.md whose
# table lists skip *reasons* (as "| reason |") accepted for every test in
# this run: a setup that does not offer a whole command set (a shared SAN
# disk and reservations) skips it everywhere the suite probes for it.

# hl_cu_check OUTFILE STATUS MIN_TESTS: fail on a missing summary, a failed
# test not listed as a known failure, a test that did not run, fewer than
# MIN_TESTS tests, or an undocumented skip. Sets CU_TOTAL CU_PASSED CU_FAILED
# CU_SKIPS CU_KNOWN_FAILED.
hl_cu_check() {
	local out=$1 rc=$2 min=$3 doc=$HL_SRCDIR/docs/compliance.md
	local total ran passed failed inactive key reason undocumented=0
	read -r total ran passed failed inactive < <(awk '$1 == "tests" && NF == 6 {print $2, $3, $4, $5, $6}' "$out")
	if [ -z "${total:-}" ]; then
		tail -n 40 "$out" >&2
		hl_fail "$out: no CUnit run summary (iscsi-test-cu status $rc)"
	fi
	awk '
		/^Suite: / { suite = $2 }
		/^  Test: / { test = $2 }
		/\[SKIPPED\]/ {
			r = $0; sub(/.*\[SKIPPED\] */, "", r)
			key = suite "." test
			if (!(key in seen)) { seen[key] = 1; print key "\t" r }
		}' "$out" >"$out.skips"
	: >"$out.reasons"
	if [ -n "${HL_CU_SKIP_REASONS:-}" ]; then
		awk -v h="## $HL_CU_SKIP_REASONS" '$0 == h { on = 1; next } /^## / { on = 0 } on' \
			"$doc" >"$out.reasons"
	fi
	while IFS=$'\t' read -r key reason; do
		if [ -s "$out.reasons" ] && grep -Fq "| $reason |" "$out.reasons"; then
			continue
		fi
		if ! grep -Fq "| $key |" "$doc" 2>/dev/null; then
			echo "UNDOCUMENTED SKIP: $key: $reason" >&2
			undocumented=$((undocumented + 1))
		fi
	done <"$out.skips"
	CU_TOTAL=$total CU_PASSED=$passed CU_FAILED=$failed CU_SKIPS=$(wc -l <"$out.skips")
	# failed tests: "  Test: X ...FAILED", or "FAILED" alone after logged lines
	awk '
		/^Suite: / { suite = $2 }
		/^  Test: / { test = $2 }
		/\.\.\.FAILED$/ || /^FAILED$/ { print suite "." test }' "$out" >"$out.failed"
	awk '/^## Known failures/ { on = 1; next } /^## / { on = 0 } on' "$doc" >"$out.known"
	local unknown=0 nfailed
	nfailed=$(wc -l <"$out.failed")
	while read -r key; do
		if grep -Fq "| $key |" "$out.known"; then
			hl_log "known failure (test defect, docs/compliance.md): $key"
		else
			echo "FAILED: $key" >&2
			unknown=$((unknown + 1))
		fi
	done <"$out.failed"
	CU_KNOWN_FAILED=$((nfailed - unknown))
	hl_log "$(basename "$out"): $total tests, $ran ran, $passed passed, $failed failed ($CU_KNOWN_FAILED known), $inactive inactive, $CU_SKIPS skipped inside a test (status $rc)"
	if [ "$unknown" != 0 ] || [ "$nfailed" != "$failed" ] || { [ "$failed" = 0 ] && [ "$rc" != 0 ]; }; then
		grep -E -A6 '\.\.\.FAILED|^FAILED$' "$out" >&2
		hl_fail "$unknown conformance test(s) failed that are not known test defects ($failed failed in all; iscsi-test-cu status $rc)"
	fi
	[ "$ran" = "$total" ] && [ "$inactive" = 0 ] || hl_fail "not every selected test ran"
	[ "$total" -ge "$min" ] || hl_fail "only $total tests selected (want >= $min)"
	[ "$undocumented" = 0 ] || hl_fail "$undocumented skip(s) not listed in docs/compliance.md"
}

# hl_cu_run OUTFILE TIMEOUT ARGS...: iscsi-test-cu ARGS under a time limit;
# a hang fails with the test it happened in. Sets CU_RC.
hl_cu_run() {
	local out=$1 limit=$2
	shift 2
	CU_RC=0
	timeout -k 5 "$limit" iscsi-test-cu "$@" >"$out" 2>&1 || CU_RC=$?
	if [ $CU_RC = 124 ] || [ $CU_RC = 137 ]; then
		tail -n 20 "$out" >&2
		tail -n 20 "${HL_LOG:-/dev/null}" >&2
		hl_fail "iscsi-test-cu hung in $(grep -E '^Suite: |^  Test: ' "$out" | tail -2 | tr -s ' \n' ' ')(killed after $limit s)"
	fi
}
