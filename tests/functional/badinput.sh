#!/bin/bash
# badinput.sh - bad input gets the protocol's answer and never hurts anyone
# else: pdu_client.py sends truncated, oversized, reserved-opcode, bad-digest
# and out-of-window PDUs, garbage login keys and wrong CHAP responses, and
# checks each answer (Reject reason, login status class/detail, CHECK
# CONDITION sense, or a closed connection where RFC 7143 allows it). Meanwhile
# a well-behaved initiator keeps reading and verifying data on the same
# target; it must never fail. At the end the daemon is alive, has closed every
# bad connection (no fd leak), and stops cleanly.
. "$(dirname "$0")/lib.sh"
hl_need python3 qemu-img iscsi-inq

PY=(python3 "$HL_SRCDIR/tests/functional/pdu_client.py")
T=$(hl_tmpdir)
head -c 4M /dev/urandom >"$T/pattern.img"

# The health region lives at 32 MiB, away from the LBAs the battery writes.
health_opts() {
	local o="driver=raw,offset=33554432,size=4194304,file.driver=iscsi,file.transport=tcp"
	o+=",file.portal=$HL_PORTAL,file.target=$HL_IQN,file.lun=$HL_LUN"
	[ -n "$HL_CHAP_USER" ] && o+=",file.user=$HL_CHAP_USER,file.password=$HL_CHAP_SECRET"
	echo "$o"
}

health_loop() {
	local opts n=0
	opts=$(health_opts)
	while :; do
		n=$((n + 1))
		if ! iscsi-inq "$HL_CHAP_URL" >"$T/health.inq" 2>&1; then
			echo "$(date +%T.%3N) iscsi-inq #$n failed: $(tail -1 "$T/health.inq")" >>"$T/health.fail"
		fi
		if ! qemu-img compare --image-opts "driver=raw,file.driver=file,file.filename=$T/pattern.img" \
			"$opts" >"$T/health.cmp" 2>&1; then
			echo "$(date +%T.%3N) compare #$n failed: $(tail -1 "$T/health.cmp")" >>"$T/health.fail"
		fi
		# rename, so the count read after the loop is stopped is never a torn write
		echo "$n" >"$T/health.count.new" && mv -f "$T/health.count.new" "$T/health.count"
	done
}

# Sockets the daemon holds (listeners + connections). Other fds (io_uring,
# eventfds) appear lazily when a reactor first does I/O and are not leaks.
sock_count() { find "/proc/$HL_PID/fd" -lname 'socket:*' 2>/dev/null | wc -l; }

battery() {
	local label=$1
	shift
	rm -f "$T/health.fail" "$T/health.count"
	qemu-img convert -n -f raw --target-image-opts "$T/pattern.img" "$(health_opts)" ||
		hl_fail "$label: cannot write the health pattern"
	local fd0
	fd0=$(sock_count)
	hl_spawn health "$T/health.log" health_loop
	local hpid=$HL_LAST_PID
	sleep 0.5
	# The battery connects from 127.0.0.2, another host than the health
	# client: its wrong CHAP answers throttle its own address, not others'.
	"${HL_PY_PREFIX[@]}" "${PY[@]}" badinput --portal "$HL_PORTAL" --target "$HL_IQN" --lun "$HL_LUN" \
		--source 127.0.0.2 "$@" | tee "$T/battery.$label.out"
	local brc=${PIPESTATUS[0]}
	# Let the health client run on for a moment after the last bad PDU.
	sleep 1
	hl_check_alive
	hl_stop "$hpid"
	local runs
	runs=$(cat "$T/health.count" 2>/dev/null || echo 0)
	if [ -s "$T/health.fail" ]; then
		cat "$T/health.fail" >&2
		hl_fail "$label: the well-behaved client failed during the bad-input battery"
	fi
	[ "$runs" -ge 2 ] || hl_fail "$label: the well-behaved client completed only $runs rounds"
	hl_log "$label: well-behaved client: $runs rounds of INQUIRY + 4 MiB compare, no failure"
	[ "$brc" -eq 0 ] || hl_fail "$label: $(grep -c '^FAIL' "$T/battery.$label.out") bad-input case(s) got a wrong answer (see above)"
	# Every bad connection is closed by now: sockets back where they were.
	local i fd1
	for i in $(seq 1 50); do
		fd1=$(sock_count)
		[ "$fd1" -le "$fd0" ] && break
		sleep 0.1
	done
	if [ "$fd1" -gt "$fd0" ]; then
		ls -l "/proc/$HL_PID/fd" >&2
		hl_fail "$label: hotlund holds $fd1 sockets, $fd0 before the battery (connection leak)"
	fi
	hl_log "$label: sockets before $fd0, after $fd1"
}

HL_PY_PREFIX=()
hl_target_start --size 64M
battery plain
hl_target_stop

hl_target_start --size 64M --chap alice s3cret-alice-12
battery chap --chap-user alice --chap-secret s3cret-alice-12
hl_target_stop
hl_log "PASS"
