#!/bin/bash
# net_fd_limits.sh - descriptors (issue 19, item 1). hotlund is started with
# an open-file limit of 64 (soft) / 96 (hard):
# 1. it raises its soft limit to the hard one (/proc/PID/limits) and says so,
#    and warns that its caps allow more connections than the limit has room
#    for (max_pending_logins is raised to 1,000 here; issue 24 item 4);
# 2. 150 idle TCP connections reach the descriptors it keeps for its own
#    files (the pending-login caps are lifted here so they do not stop them
#    first; issue 24 item 3: before, they took every descriptor): the
#    portal stops accepting, the reactor must not spin on the ready
#    listening socket (CPU over 2 s < 0.5 s) nor flood the log (hotlund
#    before issue 19 burnt a whole core retrying accept);
#    a hotlunctl started meanwhile must not make the control thread spin
#    either (its accept had the same loop);
# 3. a real iscsi-inq started meanwhile waits in the listen backlog and logs
#    in promptly once the idle connections go away, and hotlunctl answers;
#    then exactly as many idle connections as there is room for: the pause
#    after the last of them (nobody waiting) ends once they close, and its
#    episode's end is logged;
# 4. with the usual soft limit of 1,024 (hard 4,096), a config of 1,100
#    disks starts (it did not before: every disk takes a descriptor).
. "$(dirname "$0")/lib.sh"
hl_need python3 iscsi-inq prlimit
[ "$HL_TARGET" = tgt ] && hl_skip "hotlund's own descriptor handling; nothing to check on tgt"

T=$(hl_tmpdir)
PY=(python3 "$HL_SRCDIR/tests/functional/pdu_client.py")
HL_WRAPPER="prlimit --nofile=64:96" \
	HL_GLOBAL_EXTRA=$'max_pending_logins = 1000\nmax_pending_logins_per_addr = 1000' \
	hl_target_start --size 64M

# 1. the soft limit is raised to the hard one
read -r soft hard < <(awk '/^Max open files/ {print $4, $5}' "/proc/$HL_PID/limits")
hl_log "open-file limits of hotlund: soft $soft hard $hard"
[ "$soft" = 96 ] && [ "$hard" = 96 ] || hl_fail "soft open-file limit not raised to the hard one ($soft/$hard)"
grep -q 'open-file limit raised from 64 to 96' "$HL_LOG" || hl_fail "no log line about the raised open-file limit"
grep -q 'the caps allow [0-9]* connections, more than the room' "$HL_LOG" ||
	hl_fail "no warning that the caps allow more connections than the open-file limit has room for"

# 2. exhaust the descriptors with idle connections
hl_spawn idle "$T/idle.out" "${PY[@]}" idle --portal "$HL_PORTAL" --count 150 --hold 6
IDLE=$HL_LAST_PID
for _ in $(seq 1 100); do
	grep -q '^idle:' "$T/idle.out" && break
	hl_alive "$IDLE" || { cat "$T/idle.out" >&2; hl_error "the idle client failed"; }
	sleep 0.1
done
cat "$T/idle.out"
grep -q 'are kept for the daemon' "$HL_LOG" || hl_fail "hotlund never stopped accepting at its descriptor reserve (the test did not exhaust them)"
hl_spawn hotlunctl "$T/ctl.out" "$HL_BUILDDIR/hotlunctl" --socket "$(hl_tmpdir)/state/ctl.sock" / get max_pending_logins
CTLPID=$HL_LAST_PID
sleep 0.5
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$HL_PID/stat"; }
c0=$(cpu)
sleep 2
c1=$(cpu)
hl_log "hotlund used $((c1 - c0)) ticks (of $tck a second) in 2 s while out of descriptors"
[ $((c1 - c0)) -lt $((tck / 2)) ] || hl_fail "hotlund spins while out of descriptors: $((c1 - c0)) ticks in 2 s"
n=$(grep -c 'accept' "$HL_LOG")
[ "$n" -le 3 ] || { grep 'accept' "$HL_LOG" | tail -5 >&2; hl_fail "$n log lines about accept: one per episode expected"; }

# 3. a real login started now succeeds once the idle connections are gone
hl_spawn iscsi-inq "$T/inq.out" iscsi-inq "$HL_URL"
INQ=$HL_LAST_PID
wait "$IDLE" 2>/dev/null
hl_forget "$IDLE"
t0=$SECONDS
for _ in $(seq 1 150); do
	hl_alive "$INQ" || break
	sleep 0.1
done
hl_alive "$INQ" && hl_fail "iscsi-inq still waits $((SECONDS - t0)) s after descriptors were freed"
wait "$INQ"
rc=$?
hl_forget "$INQ"
[ $rc -eq 0 ] || { cat "$T/inq.out" >&2; hl_fail "iscsi-inq failed (status $rc) after descriptors were freed"; }
grep -q 'DIRECT_ACCESS' "$T/inq.out" || hl_fail "iscsi-inq printed no INQUIRY data"
# the episode's end is logged once no pause happened for 10 s (a peer hovering at the
# reserve cannot make it log two lines per connection)
for _ in $(seq 1 150); do
	grep -q 'accepting again after' "$HL_LOG" && break
	sleep 0.1
done
grep -q 'accepting again after' "$HL_LOG" || hl_fail "no log line saying accepting resumed"
for _ in $(seq 1 100); do
	hl_alive "$CTLPID" || break
	sleep 0.1
done
wait "$CTLPID"
rc=$?
hl_forget "$CTLPID"
[ $rc -eq 0 ] && grep -qx 'max_pending_logins=1000' "$T/ctl.out" ||
	{ cat "$T/ctl.out" >&2; hl_fail "hotlunctl failed (status $rc) after descriptors were freed"; }

# 3b. a pause with nobody waiting ends too: exactly as many idle connections as
# there is room for, so the portal pauses at the reserve right after the last
# one with an empty backlog; once they close, it accepts again and the
# episode's end is logged (before, only a next connection ended the pause)
nfd=$(find "/proc/$HL_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)
reserve=$(sed -n 's/.*of the open-file limit 96 held by the daemon, \([0-9]*\) kept.*/\1/p' "$HL_LOG" | head -1)
[ -n "$reserve" ] || hl_fail "3b. no start line giving the descriptors kept for the daemon"
room=$((96 - reserve - nfd))
hl_log "3b. $nfd descriptors open: room for $room connections"
[ "$room" -gt 0 ] || hl_fail "3b. no room left to test with ($nfd descriptors open)"
pauses0=$(grep -c 'are kept for the daemon' "$HL_LOG")
ends0=$(grep -c 'accepting again after' "$HL_LOG")
"${PY[@]}" idle --portal "$HL_PORTAL" --count "$room" --hold 1 >"$T/idle2.out" 2>&1 ||
	{ cat "$T/idle2.out" >&2; hl_error "the second idle client failed"; }
[ "$(grep -c 'are kept for the daemon' "$HL_LOG")" -gt "$pauses0" ] ||
	hl_fail "3b. $room idle connections did not reach the reserve (the check below would prove nothing)"
for _ in $(seq 1 160); do
	[ "$(grep -c 'accepting again after' "$HL_LOG")" -gt "$ends0" ] && break
	sleep 0.1
done
[ "$(grep -c 'accepting again after' "$HL_LOG")" -gt "$ends0" ] ||
	hl_fail "3b. a pause after the last connection never ended: no second 'accepting again' line"
hl_log "3b. $(grep 'accepting again after' "$HL_LOG" | tail -1 | sed 's/.*notice *//')"
hl_check_alive
hl_target_stop

# 4. more disks than the usual soft limit
mkdir -p "$T/many" "$T/many-state"
port=$(hl_free_port)
{
	printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s\ncontrol_socket = %s/ctl.sock\n' \
		"$port" "$T/many-state" "$T/many-state"
	printf 'threads = 1\nlog_level = notice\n'
	for i in $(seq 0 1099); do
		truncate -s 1M "$T/many/$i.img"
		printf '\n[disk d%s]\norigin = file:%s/many/%s.img\n' "$i" "$T" "$i"
	done
	printf '\n[target %s]\nlun.0 = d0\nallow = ALL\n' "$HL_IQN"
} >"$T/many.conf"
HL_WRAPPER="prlimit --nofile=1024:4096" hl_start_hotlund "$T/many.conf"
grep 'open-file limit' "$HL_LOG"
grep -q 'open-file limit raised from 1024 to 4096' "$HL_LOG" || hl_fail "no log line about the raised limit"
iscsi-inq "iscsi://127.0.0.1:$port/$HL_IQN/0" >"$T/inq2.out" 2>&1 ||
	{ cat "$T/inq2.out" >&2; hl_fail "iscsi-inq against the 1,100-disk daemon failed"; }
hl_stop "$HL_PID"
hl_log "PASS"
