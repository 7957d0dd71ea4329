#!/bin/bash
# compliance_vs_tgt.sh - run libiscsi's iscsi-test-cu against hotlund and
# against tgt (the Linux SCSI target framework, as a peer) on identical
# backing files, and print one line per test where the two differ plus
# per-target totals. Not part of `make check`: tgt is a reference point, not
# a pass/fail oracle.
#
# usage: tests/bench/compliance_vs_tgt.sh [--all] [BUILDDIR]
#   default: the families of tests/functional/compliance.families
#   --all:   every ALL.* family (some are destructive to the LUN; it is a
#            scratch file)
# Needs root (tgtd). Output also lands in $HL_OUT (default ./compliance-vs-tgt).
set -u
ALL=0
[ "${1:-}" = --all ] && { ALL=1; shift; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export HL_SRCDIR=$SRC HL_BUILDDIR=${1:-${HL_BUILDDIR:-$SRC/build}}
. "$SRC/tests/functional/lib.sh"
hl_need iscsi-test-cu tgtd
OUT=${HL_OUT:-$PWD/compliance-vs-tgt}
mkdir -p "$OUT"

if [ $ALL = 1 ]; then
	FAMILIES=ALL
else
	FAMILIES=$(grep -v '^#' "$SRC/tests/functional/compliance.families" | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
fi

# results FILE: "Suite.Test RESULT" with RESULT passed|FAILED|skipped
results() {
	awk '
		/^Suite: / { suite = $2 }
		/^  Test: / { test = $2; skip = 0 }
		/\[SKIPPED\]/ { skip = 1 }
		/\.\.\.passed$|^passed$/ { print suite "." test, (skip ? "skipped" : "passed") }
		/\.\.\.FAILED$|^FAILED$/ { print suite "." test, "FAILED" }' "$1" | sort
}

run_one() {
	local name=$1
	HL_TARGET=$name hl_target_start --size 256M
	hl_log "$name: iscsi-test-cu -d -t $FAMILIES $HL_URL"
	local t0=$SECONDS
	iscsi-test-cu -d -t "$FAMILIES" "$HL_URL" >"$OUT/$name.out" 2>&1
	hl_log "$name: done in $((SECONDS - t0)) s"
	HL_TARGET=$name hl_target_stop
	results "$OUT/$name.out" >"$OUT/$name.results"
	HL_IQN=
}

HL_IQN=
run_one hotlun
run_one tgt

join -a1 -a2 -e missing -o 0,1.2,2.2 "$OUT/hotlun.results" "$OUT/tgt.results" >"$OUT/joined"
printf '%-52s %-9s %-9s\n' TEST hotlund tgt
awk '$2 != $3 { printf "%-52s %-9s %-9s\n", $1, $2, $3 }' "$OUT/joined"
for n in hotlun tgt; do
	printf '%s: %s passed, %s failed, %s skipped (of %s)\n' "$n" \
		"$(grep -c ' passed$' "$OUT/$n.results")" "$(grep -c ' FAILED$' "$OUT/$n.results")" \
		"$(grep -c ' skipped$' "$OUT/$n.results")" "$(wc -l <"$OUT/$n.results")"
done
echo "raw outputs: $OUT/{hotlun,tgt}.out"
