#!/bin/bash
# ctl_socket.sh - issue 19 item 6: who owns the control socket path.
# A second hotlund given the same control_socket refuses to start (clear
# message, nothing opened) while the first answers; the first still answers
# hotlunctl after the second has gone. A stale socket file (nobody listens)
# is taken over. A daemon that stops unlinks the path only while it is still
# its own socket, not one another process bound there since.
. "$(dirname "$0")/lib.sh"
hl_need python3

CTL=$HL_BUILDDIR/hotlunctl
tmp=$(hl_tmpdir)
port=$(hl_free_port)
port2=$(hl_free_port)
hl_make_disk "$tmp/d.img" 16M
hl_make_disk "$tmp/d2.img" 16M
conf=$tmp/a.conf
hl_write_config "$conf" "$port" "$tmp/d.img"
sock=$tmp/state/ctl.sock
# the second daemon: its own portal and state folder, the same control socket
mkdir -p "$tmp/state2"
sed -e "s|127.0.0.1:$port|127.0.0.1:$port2|" -e "s|^state_dir = .*|state_dir = $tmp/state2|" \
	-e "s|file:$tmp/d.img|file:$tmp/d2.img|" "$conf" >"$tmp/b.conf"
grep -q "control_socket = $sock" "$tmp/b.conf" || hl_error "b.conf: $(cat "$tmp/b.conf")"

hl_start_hotlund "$conf"
first=$HL_PID
hl_run "first daemon answers" "$CTL" --socket "$sock" ls

hl_spawn hotlund-b "$tmp/b.log" "$HL_HOTLUND" --config "$tmp/b.conf"
second=$HL_LAST_PID
for _ in $(seq 150); do
	hl_alive "$second" || break
	sleep 0.1
done
if hl_alive "$second"; then
	hl_stop "$second"
	hl_fail "a second hotlund with the same control socket started (and ran 15 s)"
fi
wait "$second"
rc=$?
hl_forget "$second"
[ "$rc" != 0 ] || hl_fail "the second hotlund exited with status 0"
grep -q "control socket $sock answers: another hotlund runs with it" "$tmp/b.log" ||
	hl_fail "unclear refusal: $(cat "$tmp/b.log")"
hl_port_open 127.0.0.1 "$port2" && hl_fail "the refused daemon opened its portal"
[ -S "$sock" ] || hl_fail "the refused daemon removed the first one's socket"
hl_run "first daemon still answers after the second has gone" "$CTL" --socket "$sock" ls
hl_log "ok: second daemon refused: $(grep 'answers' "$tmp/b.log")"

# Another process binds the path while the first runs (its file was removed by
# hand): when the first stops, it leaves that socket alone.
rm -f "$sock"
hl_spawn listener "$tmp/listener.log" python3 -c '
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(1)
print("bound", flush=True)
time.sleep(120)' "$sock"
listener=$HL_LAST_PID
for _ in $(seq 100); do
	grep -q bound "$tmp/listener.log" && break
	sleep 0.1
done
[ -S "$sock" ] || hl_error "listener did not bind $sock"
ino=$(stat -c %i "$sock")
hl_stop "$first"
[ -S "$sock" ] || hl_fail "the stopping daemon deleted a socket that was no longer its own"
[ "$(stat -c %i "$sock")" = "$ino" ] || hl_fail "the socket file changed"
kill "$listener"
wait "$listener" 2>/dev/null
hl_forget "$listener"

# Now the file is stale (nobody listens): a daemon takes it over.
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$sock" 2>/dev/null &&
	hl_error "something still listens on $sock"
hl_start_hotlund "$conf"
hl_run "stale socket taken over" "$CTL" --socket "$sock" ls
hl_stop
[ -e "$sock" ] && hl_fail "a clean stop left its own socket file"
hl_log "PASS"
