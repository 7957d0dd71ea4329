#!/bin/bash
# send_uring.sh - [global] send_uring = yes: iSCSI sends through io_uring
# (src/iscsi/tx_uring.c). A real initiator writes 128 MiB of random data with
# qemu-img and compares it back; with perf available, the daemon must have
# made no sendmsg call while the compare read it all (the sends went through
# io_uring_enter). Then clients killed while 1 MiB READs are on their way
# out (sends in flight in the kernel when the connection goes), several
# times: the daemon stays up, every connection is freed, and the data still
# compares identical.
. "$(dirname "$0")/lib.sh"
hl_need qemu-img
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"
[ "$HL_TARGET" = tgt ] && hl_skip "send_uring is a hotlund switch"
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_missing "$BENCH not built"
unset HOTLUN_SEND_URING # the config line decides here

T=$(hl_tmpdir)
SIZE=$((128 * 1024 * 1024))
HL_GLOBAL_EXTRA="send_uring = yes" hl_target_start --size $SIZE
SOCK=$T/state/ctl.sock

head -c $SIZE /dev/urandom >"$T/src.img"
qemu-img convert -n -f raw -O raw "$T/src.img" "$HL_URL" >"$T/qemu.out" 2>&1 ||
	{ cat "$T/qemu.out" >&2; hl_fail "qemu-img convert to the LUN failed"; }
grep -q "iSCSI sends through io_uring" "$HL_LOG" ||
	hl_fail "send_uring = yes, but no reactor sent through io_uring (log: $HL_LOG)"

# compare: count the daemon's sendmsg and io_uring_enter calls meanwhile
PERF_PID=
if perf stat -e syscalls:sys_enter_sendmsg -p "$HL_PID" -o /dev/null -- true >/dev/null 2>&1; then
	perf stat -x, -e syscalls:sys_enter_sendmsg,syscalls:sys_enter_io_uring_enter \
		-p "$HL_PID" -o "$T/perf.out" >/dev/null 2>&1 &
	PERF_PID=$!
	sleep 0.5
fi
qemu-img compare -f raw -F raw "$T/src.img" "$HL_URL" >"$T/qemu.out" 2>&1 ||
	{ cat "$T/qemu.out" >&2; hl_fail "qemu-img compare: the LUN differs from what was written"; }
grep -q 'Images are identical' "$T/qemu.out" || { cat "$T/qemu.out" >&2; hl_fail "compare"; }
if [ -n "$PERF_PID" ]; then
	kill -INT "$PERF_PID"
	wait "$PERF_PID"
	sends=$(awk -F, '$3 ~ /sys_enter_sendmsg/ {print $1}' "$T/perf.out")
	enters=$(awk -F, '$3 ~ /sys_enter_io_uring_enter/ {print $1}' "$T/perf.out")
	hl_log "128 MiB compared identical: the daemon made $sends sendmsg and $enters io_uring_enter calls"
	[ "$sends" = 0 ] || hl_fail "$sends sendmsg calls with send_uring = yes"
	[ "${enters:-0}" -gt 0 ] || hl_fail "no io_uring_enter call while 128 MiB were read"
else
	hl_log "128 MiB compared identical (perf unavailable: syscalls not counted)"
fi

# connections that go while their sends are in flight
for i in 1 2 3 4 5; do
	"$BENCH" --workload uniform --bs 1M --qd 16 --time 10 --quiet "$HL_URL" >/dev/null 2>&1 &
	bpid=$!
	sleep 1.5
	kill -KILL "$bpid"
	wait "$bpid" 2>/dev/null
	hl_check_alive
done
conns=
for _ in $(seq 1 50); do
	conns=$("$HL_BUILDDIR/hotlunctl" --socket "$SOCK" stats --json |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["iscsi"]["connections"])') ||
		hl_fail "hotlunctl stats failed"
	[ "$conns" = 0 ] && break
	sleep 0.1
done
[ "$conns" = 0 ] || hl_fail "$conns connections left 5 s after their clients were killed"
qemu-img compare -f raw -F raw "$T/src.img" "$HL_URL" >"$T/qemu.out" 2>&1 ||
	{ cat "$T/qemu.out" >&2; hl_fail "compare after the killed clients"; }
hl_log "5 clients killed with 1 MiB READs in flight: daemon up, no connection left, data identical"
hl_target_stop
hl_log "PASS"
