#!/bin/bash
# journal_log.sh - logging for journald and syslog:
#   - with JOURNAL_STREAM naming stderr (what systemd sets when stderr is
#     the journal), hotlund and hotlun-snmp write "<N>component: message"
#     lines (sd-daemon(3) priorities: <3> err, <4> warning, <5> notice ...)
#     without timestamps, net-snmp's own messages included;
#   - with JOURNAL_STREAM naming another file (a child whose stderr was
#     redirected), the usual timestamped lines;
#   - a session's lines name its initiator and target, and what one
#     initiator does (a login, a logout, a connection reset) stays below
#     warning, so `journalctl -p warning` does not show it;
#   - hotlun-snmp --syslog logs under its own name, not hotlund's (a
#     private /dev/log in a mount namespace catches what it sends).
. "$(dirname "$0")/lib.sh"

hl_need python3 unshare mount timeout iscsi-inq
[ "$HL_TARGET" = tgt ] && hl_skip "tests hotlun's own logging"
HOTLUND=$HL_BUILDDIR/hotlund
SNMP=$HL_BUILDDIR/hotlun-snmp
[ -x "$HOTLUND" ] || hl_error "no $HOTLUND"
[ -x "$SNMP" ] || hl_missing "$SNMP not built"
tmp=$(hl_tmpdir)

# stream_id FILE: FILE's dev:ino as systemd writes JOURNAL_STREAM.
stream_id() { stat -c '%d:%i' "$1"; }

# every_line_prefixed FILE: each line starts with a <0-7> priority.
every_line_prefixed() {
	local bad
	bad=$(grep -vE '^<[0-7]>[A-Za-z0-9_-]+: ' "$1" | head -3)
	[ -z "$bad" ] || hl_fail "lines without a priority prefix in $1: $bad"
}

# ---- hotlund: a clean start and stop
hl_make_disk "$tmp/d.img" 64M
port=$(hl_free_port) || hl_error "no free port"
mkdir -p "$tmp/state"
printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s/state\ncontrol_socket = %s/state/ctl.sock\nlog_level = info\n[disk d]\norigin = file:%s/d.img\n[target %s:journal]\nlun.0 = d\nallow = ALL\n' \
	"$port" "$tmp" "$tmp" "$tmp" "$HL_IQN_PREFIX" >"$tmp/ok.conf"
log=$tmp/hotlund-journal.log
: >"$log"
JOURNAL_STREAM=$(stream_id "$log") "$HOTLUND" --config "$tmp/ok.conf" 2>>"$log" >/dev/null </dev/null &
pid=$!
HL_PIDS+=("$pid")
HL_PID_NAMES+=(hotlund)
HL_PID=$pid HL_LOG=$log
for _ in $(seq 1 100); do hl_port_open 127.0.0.1 "$port" && break; hl_check_alive; sleep 0.1; done
hl_port_open 127.0.0.1 "$port" || hl_fail "hotlund did not start: $(cat "$log")"
for _ in $(seq 1 50); do grep -q 'running' "$log" && break; sleep 0.1; done
# one session that logs in and out, one connection reset by its peer (RST)
iqn=$HL_IQN_PREFIX:journal
ini=iqn.2026-11.io.hotlun.test:journal-initiator
iscsi-inq -i "$ini" "iscsi://127.0.0.1:$port/$iqn/0" >/dev/null || hl_fail "iscsi-inq failed"
python3 -c '
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()' "$port"
sleep 0.5
hl_stop "$pid"
cat "$log" >&2
grep -qE '^<5>daemon: hotlund .* running' "$log" || hl_fail "no <5> notice for the start: $(head -3 "$log")"
grep -qE '^<5>daemon: SIGTERM: stopping' "$log" || hl_fail "no <5> notice for the stop"
grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2} ' "$log" && hl_fail "timestamps in journal mode: $(head -2 "$log")"
every_line_prefixed "$log"
grep -qE "^<[0-7]>iscsi: 127\.0\.0\.1:[0-9]+ $ini -> $iqn: " "$log" ||
	hl_fail "no session line names initiator and target: $(grep iscsi "$log")"
noisy=$(grep -E '^<[0-4]>' "$log")
[ -z "$noisy" ] || hl_fail "a session's login, logout or reset logged at warning or above: $noisy"

# ---- hotlund: a start-up error is <3>
printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s/state\n[disk d]\norigin = file:%s/missing.img\n[target %s:journal]\nlun.0 = d\nallow = ALL\n' \
	"$port" "$tmp" "$tmp" "$HL_IQN_PREFIX" >"$tmp/missing.conf"
log=$tmp/hotlund-error.log
: >"$log"
JOURNAL_STREAM=$(stream_id "$log") timeout 10 "$HOTLUND" --config "$tmp/missing.conf" 2>>"$log" >/dev/null </dev/null
grep -qE '^<3>[a-z]+: .*missing\.img' "$log" || hl_fail "start-up error not at <3>: $(cat "$log")"

# ---- a configuration error (hotlund.service's ExecStartPre=--check-config) is <3> too
log=$tmp/check-config.log
: >"$log"
printf '[global]\nportal = 127.0.0.1:1\nbogus_key = 1\n' >"$tmp/bad.conf"
JOURNAL_STREAM=$(stream_id "$log") "$HOTLUND" --check-config "$tmp/bad.conf" 2>>"$log" >/dev/null </dev/null
grep -qE "^<3>hotlund: .*bad\.conf:3: unknown key 'bogus_key'" "$log" ||
	hl_fail "--check-config error not at <3>: $(cat "$log")"

# ---- JOURNAL_STREAM that names another file: plain lines
log=$tmp/hotlund-plain.log
: >"$log"
JOURNAL_STREAM=$(stream_id "$tmp/ok.conf") timeout 10 "$HOTLUND" --config "$tmp/missing.conf" 2>>"$log" >/dev/null </dev/null
# (a missing origin is found by the start-up check, which names FILE:LINE)
grep -qE '^hotlund: .*missing\.conf:5: .*missing\.img' "$log" || hl_fail "no plain start-up error: $(cat "$log")"
grep -qE '^<[0-7]>' "$log" && hl_fail "priority prefix though stderr is not the journal: $(cat "$log")"

# ---- hotlun-snmp in journal mode: hotlund unreachable is a warning; net-snmp's lines too
log=$tmp/snmp-journal.log
: >"$log"
JOURNAL_STREAM=$(stream_id "$log") timeout -s TERM 3 "$SNMP" --socket "$tmp/nothing.sock" \
	--agentx "$tmp/no-agentx.sock" --log-level info 2>>"$log" >/dev/null </dev/null
cat "$log" >&2
grep -qE '^<4>snmp: hotlund unreachable' "$log" || hl_fail "hotlun-snmp: no <4> line for an unreachable hotlund"
grep -qE '^<[0-7]>net-snmp: ' "$log" || hl_fail "hotlun-snmp: net-snmp's messages bypass the sink"
every_line_prefixed "$log"

# ---- hotlun-snmp --syslog names itself
# A mount namespace gets a /dev of its own whose "log" is our listener, so
# nothing reaches (or needs) the machine's syslog.
sock=$tmp/devlog.sock
slog=$tmp/syslog.log
hl_spawn syslog-listener "$tmp/listener.out" python3 "$HL_SRCDIR/tests/functional/notify_listener.py" \
	"$sock" "$slog" --timeout 60
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || hl_error "the listener did not bind $sock"
unshare -m bash -c '
	set -e
	mkdir -p "$1/dev"
	for n in null zero random urandom; do
		touch "$1/dev/$n"
		mount --bind "/dev/$n" "$1/dev/$n"
	done
	ln -s "$2" "$1/dev/log"
	mount --rbind "$1/dev" /dev
	exec timeout -s TERM 3 "$3" --syslog --socket "$1/nothing.sock" --agentx "$1/no-agentx.sock"
' _ "$tmp" "$sock" "$SNMP" >"$tmp/snmp-syslog.out" 2>&1
rc=$?
[ $rc -eq 124 ] || [ $rc -eq 0 ] ||
	hl_missing "cannot run hotlun-snmp in a mount namespace (status $rc): $(cat "$tmp/snmp-syslog.out")"
for _ in $(seq 1 20); do grep -q 'snmp: ' "$slog" 2>/dev/null && break; sleep 0.1; done
cat "$slog" >&2
grep -qE '> ?[A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} hotlun-snmp\[[0-9]+\]: snmp: hotlun-snmp ' "$slog" ||
	hl_fail "hotlun-snmp does not log under its own name: $(grep -m2 'snmp' "$slog")"
grep -q 'hotlund\[' "$slog" && hl_fail "hotlun-snmp logs as hotlund: $(grep -m1 'hotlund\[' "$slog")"
exit 0
