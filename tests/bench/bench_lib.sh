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
#
# PIN=irq (bench_client_setup DIR): hotlund on the CPU that takes most of
# the interrupts of the disk under DIR (the cache device's completions), the
# client on the other CPUs; PIN is set to what it chose. On this 2-vCPU VM
# the virtio disk's one request queue interrupts CPU 1 only, so PIN=0:1 put
# every hit's completion interrupt on the client's CPU (3-5 µs of the
# client's CPU per hit that the uncached run does not pay) and made
# hotlund's reactor complete its reads from another CPU; in a deployment
# the initiator is another host and an NVMe drive completes on the
# submitting CPU. docs/bench-hit-device.md, "What bounds 4K QD64 hits".
bench_irq_cpu() {
	local dev irqs i best
	dev=$(readlink -f "/sys/block/$(basename "$(df --output=source "$1" | tail -1)")/device" 2>/dev/null)
	while [ -n "$dev" ] && [ "$dev" != / ] && [ ! -d "$dev/msi_irqs" ]; do
		dev=$(dirname "$dev")
	done
	[ -d "$dev/msi_irqs" ] || return 1
	irqs=$(ls "$dev/msi_irqs")
	best=$(for i in $irqs; do grep "^ *$i:" /proc/interrupts; done |
		awk -v n="$(nproc)" '{for (c = 0; c < n; c++) s[c] += $(c + 2)}
		END {b = -1; for (c = 0; c < n; c++) if (b < 0 || s[c] > s[b]) b = c; if (s[b] > 0) print b}')
	[ -n "$best" ] || return 1
	echo "$best"
}

bench_client_setup() {
	local c
	CPIN=()
	SPIN_PIDS=
	PIN_IRQ=
	if [ "${PIN:-}" = irq ]; then
		c=$(bench_irq_cpu "${1:-.}") || hl_error "PIN=irq: no interrupts found for the disk under ${1:-.}"
		PIN=$c:$(seq 0 $(($(nproc) - 1)) | grep -vx "$c" | paste -sd,)
		hl_log "PIN=irq: the disk's interrupts land on CPU $c: PIN=$PIN"
		PIN_IRQ=" (PIN=irq: hotlund on the cache disk's interrupt CPU)"
	fi
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
