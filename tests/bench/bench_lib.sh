# tests/bench/bench_lib.sh - what hit_path.sh and hit_ab.sh share, sourced
# after tests/functional/lib.sh.
#
# bench_client_setup: from PIN=HOTLUND_CPUS:CLIENT_CPUS and NICE=N, the
# command prefix of every client (taskset -c CLIENT_CPUS, nice -n N) in the
# array CPIN; with NOHALT=1 a SCHED_IDLE busy loop on every CPU for the
# whole run (their PIDs in SPIN_PIDS, for the caller's EXIT trap), so that
# no CPU halts when its task sleeps. On a VM whose guest does not poll
# before halting (cpuidle haltpoll, guest_halt_poll_ns = 0), waking a task
# on a halted vCPU costs 10-20 µs more, and at QD1 the hits' client (which
# sleeps through the device read), the uncached LUN's client (which mostly
# does not) and fio (on the CPU that takes the device IRQ) pay it
# differently: the QD1 column compares like with like only with NOHALT=1
# (docs/bench-hit-device.md, "The QD1 hit's addition"). Any other task preempts
# the loops at once.
bench_client_setup() {
	local c
	CPIN=()
	SPIN_PIDS=
	if [ -n "${PIN:-}" ]; then
		case "$PIN" in
		*:*) CPIN=(taskset -c "${PIN#*:}") ;;
		*) hl_error "PIN wants HOTLUND_CPUS:CLIENT_CPUS, e.g. 0:1, not '$PIN'" ;;
		esac
	fi
	if [ "${NOHALT:-0}" = 1 ]; then
		command -v chrt >/dev/null || hl_error "NOHALT=1 needs chrt (util-linux)"
		for c in $(seq 0 $(($(nproc) - 1))); do
			chrt -i 0 taskset -c "$c" sh -c 'while :; do :; done' &
			SPIN_PIDS="$SPIN_PIDS $!"
		done
	fi
	if [ -n "${NICE:-}" ]; then
		CPIN=(nice -n "$NICE" "${CPIN[@]}")
	fi
}
