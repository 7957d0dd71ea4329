#!/bin/bash
# admin_shell.sh - issue 6: the interactive hotlunctl shell, driven through a
# pseudo-terminal (tmux), builds a disk, a target, a LUN and an ACL at run
# time; iscsi-ls then sees the new target; a session busy on another target
# is not disturbed; saveconfig, restart, and `hotlunctl ls` prints the same
# tree. Also: the issue's one-shot sequence, SIGHUP reload, refusing to
# remove a LUN in use unless forced, and global keys that apply at once
# (poll_us, discovery CHAP).
. "$(dirname "$0")/lib.sh"
hl_need tmux iscsi-ls iscsi-perf iscsi-inq

CTL=$HL_BUILDDIR/hotlunctl
[ -x "$CTL" ] || hl_error "no $CTL"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
HL_IQN=$HL_IQN_PREFIX:busy
hl_make_disk "$tmp/busy.img" 64M
hl_make_disk "$tmp/new.img" 32M
hl_make_disk "$tmp/d1.img" 16M
conf=$tmp/hotlun.conf
hl_write_config "$conf" "$port" "$tmp/busy.img"
sock=$tmp/state/ctl.sock
hl_start_hotlund "$conf"

# A session that stays busy on the other target for the whole test.
hl_spawn iscsi-perf "$tmp/perf.log" iscsi-perf -t 12 "iscsi://127.0.0.1:$port/$HL_IQN/0"
perf_pid=$HL_LAST_PID

# a LUN in use cannot go without force: asked while the session is surely
# there (the shell steps below can outlast iscsi-perf on a loaded machine)
for _ in $(seq 100); do
	"$CTL" --socket "$sock" ls /sessions | grep -q '\[1 session(s)\]' && break
	sleep 0.1
done
"$CTL" --socket "$sock" ls /sessions | grep -q '\[1 session(s)\]' ||
	hl_fail "the busy session did not log in: $("$CTL" --socket "$sock" ls /sessions)"
err=$("$CTL" --socket "$sock" /iscsi/$HL_IQN/tpg1/luns/lun0 delete 2>&1) && hl_fail "deleted a LUN in use"
grep -q 'in use' <<<"$err" || hl_fail "refusal does not say why: $err"

# --- the interactive shell in a pty ---
tmux_sock=$tmp/tmux.sock
tmux -S "$tmux_sock" new-session -d -s hl -x 200 -y 50 "$CTL --socket $sock"
tmux_pid=$(tmux -S "$tmux_sock" display-message -p '#{pid}')
# the tmux server is stopped by its PID too, whatever way the test ends
trap 'rc=$?; kill "$tmux_pid" 2>/dev/null; (exit $rc); hl_cleanup' EXIT
screen() { tmux -S "$tmux_sock" capture-pane -p -t hl -S -200; }
type_line() { tmux -S "$tmux_sock" send-keys -t hl -l "$1"; tmux -S "$tmux_sock" send-keys -t hl Enter; }
wait_screen() { # wait_screen REGEX: until the screen shows it (10 s)
	local shown
	for _ in $(seq 100); do
		shown=$(screen) # not piped into grep -q: pipefail would see capture-pane's SIGPIPE
		grep -qE -- "$1" <<<"$shown" && return 0
		sleep 0.1
	done
	screen >&2
	hl_fail "shell never showed /$1/"
}
wait_prompt() { # wait_prompt DIR: until the shell's last line is its prompt at DIR, waiting for input (10 s)
	local shown last
	for _ in $(seq 100); do
		shown=$(screen)
		last=$(sed '/^[[:space:]]*$/d' <<<"$shown" | tail -n 1)
		[ "$last" = "hotlun:$1>" ] && return 0
		sleep 0.1
	done
	screen >&2
	hl_fail "shell never came back to its prompt at $1"
}
wait_screen 'hotlun:/>'
type_line "cd /disks"
wait_screen 'hotlun:/disks>'
type_line "create new origin=file:$tmp/new.img"
wait_screen 'Created /disks/new'
type_line "cd /iscsi"
type_line "create iqn.2026-11.io.hotlun:shell"
wait_screen 'Created /iscsi/iqn.2026-11.io.hotlun:shell'
type_line "cd iqn.2026-11.io.hotlun:shell/tpg1/luns"
wait_screen 'hotlun:/iscsi/iqn.2026-11.io.hotlun:shell/tpg1/luns>'
type_line "create /disks/new"
wait_screen 'Created /iscsi/iqn.2026-11.io.hotlun:shell/tpg1/luns/lun0'
type_line "cd ../acls"
type_line "create iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-ls"
wait_screen 'acls/iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-ls'
# tab completion: "cd /ca<Tab>" completes to /caches/
type_line "cd /"
# keys typed before the shell reads them are echoed by the terminal ahead of
# the prompt (CI: "cd /cahotlun:/> ches/"): wait until it waits for input
wait_prompt /
tmux -S "$tmux_sock" send-keys -t hl -l "cd /ca"
tmux -S "$tmux_sock" send-keys -t hl Tab
wait_screen 'cd /caches/'
tmux -S "$tmux_sock" send-keys -t hl Enter
wait_screen 'hotlun:/caches>'
type_line "help"
wait_screen 'saveconfig'
# bad input in the shell gets a message, the shell goes on
type_line "/nowhere ls"
wait_screen 'error: no such path'
type_line "exit"
sleep 0.5

out=$(iscsi-ls -s "iscsi://127.0.0.1:$port") || hl_fail "iscsi-ls failed"
grep -q 'iqn.2026-11.io.hotlun:shell' <<<"$out" || hl_fail "new target not discovered: $out"
grep -q 'Size:31M\|Size:32M' <<<"$out" || hl_fail "new LUN not listed: $out"

# --- the issue's one-shot sequence ---
"$CTL" --socket "$sock" /disks create d1 origin=file:"$tmp/d1.img" >/dev/null || hl_fail "create d1"
"$CTL" --socket "$sock" /iscsi create iqn.2026-11.io.hotlun:new >/dev/null || hl_fail "create target"
"$CTL" --socket "$sock" /iscsi/iqn.2026-11.io.hotlun:new/tpg1/luns create /disks/d1 >/dev/null || hl_fail "create lun"
"$CTL" --socket "$sock" /iscsi/iqn.2026-11.io.hotlun:new/tpg1/acls create ALL >/dev/null || hl_fail "create acl"
# help (and tab completion, from the same list) names every settable parameter
"$CTL" --socket "$sock" /caches help | grep -q '^Parameters at /caches:.* write_policy update_buffer write_budget$' ||
	hl_fail "cache parameters: $("$CTL" --socket "$sock" /caches help)"
"$CTL" --socket "$sock" / help | grep -q '^Parameters at /: log_level poll_us write_buffer_limit logout_timeout max_pending_logins max_pending_logins_per_addr discovery_chap_user discovery_chap_secret metrics_listen send_uring control_idle_timeout scratch_buffer_limit$' ||
	hl_fail "global parameters: $("$CTL" --socket "$sock" / help)"
"$CTL" --socket "$sock" stats --json >"$tmp/stats.json" || hl_fail "stats --json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["disks"]["d1"]["size_bytes"] == 16<<20, d' "$tmp/stats.json" ||
	hl_fail "stats --json: $(cat "$tmp/stats.json")"


"$CTL" --socket "$sock" saveconfig >/dev/null || hl_fail "saveconfig"
[ -f "$conf.1" ] || hl_fail "no numbered backup $conf.1"

wait "$perf_pid"
rc=$?
hl_forget "$perf_pid"
[ $rc -eq 0 ] || hl_fail "the busy session was disturbed (iscsi-perf exit $rc): $(tail -3 "$tmp/perf.log")"
grep -q 'iops average' "$tmp/perf.log" || hl_fail "iscsi-perf made no progress"
# wait until its logout has reached the daemon (slow on a loaded machine)
for _ in $(seq 100); do
	"$CTL" --socket "$sock" ls /sessions | grep -q '\[0 session(s)\]' && break
	sleep 0.1
done
"$CTL" --socket "$sock" ls >"$tmp/ls.before" || hl_fail "ls"
grep -q 'iqn.2026-11.io.hotlun:new' "$tmp/ls.before" || hl_fail "ls misses the new target"

# --- restart from the saved file: the same tree ---
hl_stop
hl_start_hotlund "$conf"
"$CTL" --socket "$sock" ls >"$tmp/ls.after" || hl_fail "ls after restart"
diff -u "$tmp/ls.before" "$tmp/ls.after" || hl_fail "the tree changed across saveconfig + restart"

# --- SIGHUP: edit the file, reload, the difference is applied ---
sed -i 's/^allow = ALL$/allow = ALL\nalias = reloaded/' "$conf"
kill -HUP "$HL_PID"
for _ in $(seq 50); do
	"$CTL" --socket "$sock" /iscsi/$HL_IQN get alias 2>/dev/null | grep -q reloaded && break
	sleep 0.1
done
"$CTL" --socket "$sock" /iscsi/$HL_IQN get alias | grep -q 'alias=reloaded' || hl_fail "SIGHUP did not apply the file"

# --- poll_us (the reactors' busy-poll window) changes at once, in range only ---
"$CTL" --socket "$sock" / get poll_us | grep -qx 'poll_us=50' || hl_fail "poll_us default: $("$CTL" --socket "$sock" / get poll_us)"
"$CTL" --socket "$sock" / set poll_us=0 || hl_fail "set poll_us=0"
"$CTL" --socket "$sock" / get poll_us | grep -qx 'poll_us=0' || hl_fail "poll_us not 0 after set"
out=$("$CTL" --socket "$sock" / set poll_us=5000 2>&1) && hl_fail "poll_us=5000 accepted"
grep -q 'poll_us: expected a whole number from 0 to 1000' <<<"$out" || hl_fail "poll_us=5000: unclear error: $out"
iscsi-inq "iscsi://127.0.0.1:$port/$HL_IQN/0" >/dev/null || hl_fail "LUN not served with poll_us=0"
"$CTL" --socket "$sock" / set poll_us=200 || hl_fail "set poll_us=200"
iscsi-inq "iscsi://127.0.0.1:$port/$HL_IQN/0" >/dev/null || hl_fail "LUN not served with poll_us=200"

# --- send_uring (sends through io_uring) applies to the next connection ---
if [ -z "${HOTLUN_SEND_URING:-}" ]; then # the environment would override it
	"$CTL" --socket "$sock" / get send_uring | grep -qx 'send_uring=false' ||
		hl_fail "send_uring default: $("$CTL" --socket "$sock" / get send_uring)"
	grep -q "sends through io_uring" "$HL_LOG" && hl_fail "sends through io_uring with send_uring off"
	"$CTL" --socket "$sock" / set send_uring=yes || hl_fail "set send_uring=yes"
	"$CTL" --socket "$sock" / get send_uring | grep -qx 'send_uring=true' || hl_fail "send_uring not on after set"
	iscsi-inq "iscsi://127.0.0.1:$port/$HL_IQN/0" >/dev/null || hl_fail "LUN not served with send_uring=yes"
	hl_wait_grep "$HL_LOG" "sends through io_uring" 5 || hl_fail "send_uring=yes: no sends through io_uring"
	out=$("$CTL" --socket "$sock" / set send_uring=maybe 2>&1) && hl_fail "send_uring=maybe accepted"
	grep -q 'send_uring: expected yes or no' <<<"$out" || hl_fail "send_uring=maybe: unclear error: $out"
	"$CTL" --socket "$sock" / set send_uring= || hl_fail "reset send_uring"
	"$CTL" --socket "$sock" / get send_uring | grep -qx 'send_uring=false' || hl_fail "send_uring not off after reset"
	hl_log "send_uring: set at run time, the next login sent through io_uring, bad value refused, reset"
fi

# --- discovery CHAP turned on and off while running (new discovery logins) ---
"$CTL" --socket "$sock" / set discovery_chap_user=disc discovery_chap_secret=discsecret12 ||
	hl_fail "set discovery CHAP"
iscsi-ls "iscsi://127.0.0.1:$port" >"$tmp/ls.nochap" 2>&1 && hl_fail "discovery without CHAP accepted: $(cat "$tmp/ls.nochap")"
out=$(iscsi-ls "iscsi://disc%discsecret12@127.0.0.1:$port") || hl_fail "discovery with CHAP refused"
grep -q "$HL_IQN" <<<"$out" || hl_fail "discovery with CHAP lists no target: $out"
iscsi-ls "iscsi://disc%wrongsecret1@127.0.0.1:$port" >/dev/null 2>&1 && hl_fail "a wrong discovery secret accepted"
"$CTL" --socket "$sock" / set discovery_chap_user= discovery_chap_secret= || hl_fail "unset discovery CHAP"
out=$(iscsi-ls "iscsi://127.0.0.1:$port") || hl_fail "discovery still wants CHAP after unset"
grep -q "$HL_IQN" <<<"$out" || hl_fail "discovery lists no target after unset: $out"
hl_stop
echo "admin_shell: OK"
