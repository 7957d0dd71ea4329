# tests/functional/bench_common.sh - what the hotlun-bench functional tests
# share on top of lib.sh: where the tool is, which target to use, and how to
# read the summary line. Sourced, never executed.
#
# Target: HL_TARGET=tgt or HL_TARGET=hotlun when the caller sets it;
# otherwise hotlund when it is built, else tgtd (hotlun-bench must work
# against any iSCSI target, and tgt is always there to test it with).

HL_BENCH_TARGET_REQUEST=${HL_TARGET:-}
# shellcheck source=tests/functional/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HL_BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$HL_BENCH" ] || hl_skip "$HL_BENCH not built"
if [ -z "$HL_BENCH_TARGET_REQUEST" ] && [ ! -x "$HL_HOTLUND" ]; then
	HL_TARGET=tgt
fi

# bench_field FILE KEY: the value of KEY= on the last line of FILE (the summary).
bench_field() {
	tail -n 1 "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# bench_run DESC EXPECTED_STATUS OUTFILE ARGS...: run hotlun-bench, stdout to
# OUTFILE (stderr to OUTFILE.err); fail unless it exits with EXPECTED_STATUS.
bench_run() {
	local desc=$1 want=$2 out=$3 rc
	shift 3
	# shellcheck disable=SC2086 # HL_BENCH_WRAP: a command prefix such as taskset
	${HL_BENCH_WRAP:-} "$HL_BENCH" --quiet "$@" >"$out" 2>"$out.err"
	rc=$?
	if [ "$rc" != "$want" ]; then
		cat "$out.err" "$out" >&2
		hl_fail "$desc: exit status $rc, expected $want: hotlun-bench $*"
	fi
	hl_log "ok: $desc: $(tail -n 1 "$out")"
}
