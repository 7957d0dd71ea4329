#!/bin/bash
# service_notify.sh - hotlund under a service manager, without systemd as
# PID 1: a listener on NOTIFY_SOCKET (notify_listener.py) records what the
# daemon says, and the test checks that
#   - READY=1 comes once the portal accepts connections and the cache is
#     loaded, with a STATUS= line (sessions, disks, hit ratio);
#   - RELOADING=1 ... READY=1 bracket a SIGHUP reload, and READY=1 comes
#     after the reloaded configuration runs;
#   - WATCHDOG=1 pings arrive (WATCHDOG_USEC set), stop while a reactor is
#     stalled (test hook HL_TEST_STALL_REACTOR + SIGUSR1), and resume after;
#   - STATUS= is refreshed on its own every few seconds;
#   - STOPPING=1 on SIGTERM.
. "$(dirname "$0")/lib.sh"

hl_need python3
[ "$HL_TARGET" = tgt ] && hl_skip "tests hotlund's own notifications"
HOTLUND=$HL_BUILDDIR/hotlund
[ -x "$HOTLUND" ] || hl_error "no $HOTLUND"
"$HOTLUND" --version | grep -q '^systemd: sd_notify' ||
	hl_missing "hotlund built without libsystemd (install libsystemd-dev, reconfigure)"

tmp=$(hl_tmpdir)
st=$tmp/state
mkdir -p "$st"
hl_make_disk "$tmp/d0.img" 64M
hl_make_disk "$tmp/d1.img" 64M
port=$(hl_free_port) || hl_error "no free port"
conf=$tmp/hotlun.conf
cat >"$conf" <<EOF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $st/ctl.sock
log_level = info
threads = 2

[cache ssd]
device = $tmp/cache.img
size = 32M
block_size = 64K

[disk d0]
origin = file:$tmp/d0.img
cache = ssd

[target $HL_IQN_PREFIX:notify]
lun.0 = d0
allow = ALL
EOF

sock=$tmp/notify.sock
nlog=$tmp/notify.log
hl_spawn notify-listener "$tmp/listener.out" python3 "$HL_SRCDIR/tests/functional/notify_listener.py" \
	"$sock" "$nlog" --portal "127.0.0.1:$port" --timeout 120
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || hl_error "the listener did not bind $sock: $(cat "$tmp/listener.out")"

# count PATTERN: how many datagrams so far match the extended regex.
count() { grep -cE "$1" "$nlog" || true; }
# wait_for PATTERN N SECONDS: until N datagrams match.
wait_for() {
	local i
	for i in $(seq 1 $(($3 * 10))); do
		[ "$(count "$1")" -ge "$2" ] && return 0
		hl_alive "$HL_PID" || hl_fail "hotlund died: $(tail -5 "$HL_LOG")"
		sleep 0.1
	done
	hl_fail "after $3 s, $(count "$1") datagram(s) match '$1', want $2: $(cat "$nlog")"
}

# The watchdog interval: 2 s, so pings every 0.5 s and a reactor counts as
# stuck after 1 s without progress.
HL_LOG=$tmp/hotlund.log
hl_spawn hotlund "$HL_LOG" env NOTIFY_SOCKET="$sock" WATCHDOG_USEC=2000000 HL_TEST_STALL_REACTOR=1 \
	"$HOTLUND" --config "$conf"
HL_PID=$HL_LAST_PID

# ---- readiness
wait_for 'READY=1' 1 30
ready=$(grep -m1 'READY=1' "$nlog")
hl_log "ready: $ready"
grep -q 'portal=open' <<<"$ready" || hl_fail "READY=1 before the portal accepted connections: $ready"
grep -qE 'STATUS=0 sessions, 1 disk, cache hit ratio' <<<"$ready" ||
	hl_fail "READY=1 without the expected STATUS= line: $ready"
[ -S "$st/ctl.sock" ] || hl_fail "READY=1 before the control socket was up"
[ "$(count 'RELOADING=1|STOPPING=1')" -eq 0 ] || hl_fail "unexpected notifications: $(cat "$nlog")"

# ---- watchdog pings while everything runs
wait_for '^[0-9.]+ WATCHDOG=1$' 3 15

# ---- reload: add a disk and a LUN, SIGHUP
sed -i "s/^lun.0 = d0$/lun.0 = d0\nlun.1 = d1/" "$conf"
printf '\n[disk d1]\norigin = file:%s/d1.img\n' "$tmp" >>"$conf"
kill -HUP "$HL_PID"
wait_for 'READY=1' 2 30
seq_lines=$(grep -E 'READY=1|RELOADING=1' "$nlog" | sed 's/^[0-9.]* //; s/ portal=.*//')
hl_log "sequence: $(tr '\n' ' ' <<<"$seq_lines")"
order=$(grep -oE 'READY=1|RELOADING=1' <<<"$seq_lines" | tr '\n' ' ')
[ "$order" = "READY=1 RELOADING=1 READY=1 " ] || hl_fail "reload not bracketed: $order"
grep -m1 'RELOADING=1' "$nlog" | grep -q 'MONOTONIC_USEC=' || hl_fail "RELOADING=1 without MONOTONIC_USEC"
grep 'READY=1' "$nlog" | tail -1 | grep -q 'STATUS=0 sessions, 2 disks' ||
	hl_fail "READY=1 after the reload does not show the reloaded disks: $(grep READY=1 "$nlog" | tail -1)"
ls_out=$("$HL_BUILDDIR/hotlunctl" --socket "$st/ctl.sock" ls 2>&1)
grep -q 'd1' <<<"$ls_out" || hl_fail "reloaded disk d1 not running: $ls_out"

# ---- a stalled reactor stops the pings
kill -USR1 "$HL_PID"
for _ in $(seq 1 100); do grep -q 'reactor1 stalls' "$HL_LOG" && break; sleep 0.1; done
grep -q 'reactor1 stalls' "$HL_LOG" || hl_fail "the test hook did not stall reactor1: $(tail -5 "$HL_LOG")"
sleep 1.5 # past the 1 s of no progress (and a ping that was already on its way)
before=$(count '^[0-9.]+ WATCHDOG=1$')
sleep 3
after=$(count '^[0-9.]+ WATCHDOG=1$')
[ "$after" -eq "$before" ] ||
	hl_fail "$((after - before)) WATCHDOG=1 ping(s) while reactor1 was stalled"
grep -q 'reactor1 has made no progress' "$HL_LOG" || hl_fail "the stuck reactor was not logged"

# ... and come back once it runs again
kill -USR1 "$HL_PID"
wait_for '^[0-9.]+ WATCHDOG=1$' $((after + 2)) 15

# ---- the status line is refreshed on its own (every 5 s; we are past that)
wait_for '^[0-9.]+ STATUS=[0-9]+ sessions?, 2 disks, cache hit ratio' 1 15

# ---- stop
kill -TERM "$HL_PID"
wait_for 'STOPPING=1' 1 15
hl_stop "$HL_PID"
hl_log "datagrams: $(wc -l <"$nlog")"
exit 0
