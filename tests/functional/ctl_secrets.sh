#!/bin/bash
# ctl_secrets.sh - issue 24 item 5: a CHAP secret set through hotlunctl need
# not pass through argv, the shell's history or a core file, and hotlund
# wipes the secrets it lets go of.
# - `set chap_secret=-` reads the secret from standard input: a pipe's first
#   line, the next line of a script on stdin, or a prompt that does not echo
#   on a terminal (tmux); `set chap_secret=@FILE` reads FILE, which must be a
#   regular file of the caller's with no group or other permission (a 0644
#   file is refused and nothing changes). saveconfig shows each secret took.
# - the interactive shell stores `set chap_secret=S` in ~/.hotlunctl_history
#   as `chap_secret=********` (the file is mode 0600).
# - hotlund is not dumpable: run as an unprivileged user, its /proc/PID files
#   belong to root; with `ulimit -c unlimited` and a core_pattern that names a
#   file, SIGABRT leaves no core (before: a core that held the secret).
#   hotlund.service says LimitCORE=0.
# - secrets let go of are wiped: after the configured secrets are replaced,
#   a gcore of the live hotlund holds none of the old ones.
. "$(dirname "$0")/lib.sh"
hl_need python3 tmux gcore setpriv

CTL=$HL_BUILDDIR/hotlunctl
tmp=$(hl_tmpdir)
port=$(hl_free_port)
iqn=$HL_IQN_PREFIX:test
tgt=/iscsi/$iqn
OLD_CHAP=Old-CHAP-7f3k9Qz2wR
OLD_MUTUAL=Old-MUTUAL-4hT8vLx0pK
OLD_DISC=Old-DISC-9sD2mW5qZy
PIPE_SECRET=Pipe-SECRET-2bN6xV1c
SCRIPT_SECRET=Script-SECRET-8kJ3rT7y
FILE_SECRET=File-SECRET-5gH1wQ9e
TTY_SECRET=Tty-SECRET-3mP7zC4u
HIST_SECRET=Hist-SECRET-6vB2nL8d
PROMPT_SECRET=Prompt-SECRET-7qW1eR4t
hl_make_disk "$tmp/d.img" 16M
conf=$tmp/hotlun.conf
HL_GLOBAL_EXTRA="discovery_chap_user = disc
discovery_chap_secret = $OLD_DISC" \
	hl_write_config "$conf" "$port" "$tmp/d.img" chap_user=front "chap_secret=$OLD_CHAP" \
	mutual_user=back "mutual_secret=$OLD_MUTUAL"
sock=$tmp/state/ctl.sock
hl_start_hotlund "$conf"
C=(timeout 30 "$CTL" --socket "$sock")

# saved KEY VALUE: saveconfig, then the file has KEY = VALUE
saved() {
	"${C[@]}" saveconfig >/dev/null || hl_fail "saveconfig failed"
	grep -qx "$1 = $2" "$conf" || hl_fail "$1 is not the secret given (saved file: $(grep "^$1" "$conf"))"
}

# ---- standard input: a pipe, a script's next line
printf '%s\n' "$PIPE_SECRET" | "${C[@]}" "$tgt" set chap_secret=- || hl_fail "set chap_secret=- from a pipe"
saved chap_secret "$PIPE_SECRET"
printf '%s\n%s\n' "/ set discovery_chap_secret=-" "$SCRIPT_SECRET" | "${C[@]}" ||
	hl_fail "a script on stdin with discovery_chap_secret=-"
saved discovery_chap_secret "$SCRIPT_SECRET"
out=$("${C[@]}" "$tgt" set chap_secret=- </dev/null 2>&1) && hl_fail "set chap_secret=- with nothing on stdin succeeded"
grep -q 'chap_secret: no secret on standard input' <<<"$out" || hl_fail "unclear message for an empty stdin: $out"
hl_log "ok: KEY=- reads the secret from a pipe and from a script's next line"

# ---- a file: the caller's own, mode 0600
printf '%s\n' "$FILE_SECRET" >"$tmp/mutual.secret"
chmod 644 "$tmp/mutual.secret"
out=$("${C[@]}" "$tgt" set "mutual_secret=@$tmp/mutual.secret" 2>&1) && hl_fail "a secret file others can read was taken"
grep -q "mutual_secret: $tmp/mutual.secret is accessible to its group or others (mode 0644): chmod 600 it" <<<"$out" ||
	hl_fail "unclear refusal of a 0644 secret file: $out"
saved mutual_secret "$OLD_MUTUAL"
chmod 600 "$tmp/mutual.secret"
"${C[@]}" "$tgt" set "mutual_secret=@$tmp/mutual.secret" || hl_fail "set mutual_secret=@FILE"
saved mutual_secret "$FILE_SECRET"
hl_log "ok: KEY=@FILE reads a 0600 file, refuses a 0644 one ($out)"

# ---- a terminal: a prompt that does not echo; the interactive shell's history
home=$tmp/home
mkdir -p "$home"
tmux_sock=$tmp/tmux.sock
tmux -S "$tmux_sock" new-session -d -s hl -x 200 -y 50 \
	"HOME=$home $CTL --socket $sock $tgt set chap_secret=-; echo EXIT=\$?; sleep 60"
tmux_pid=$(tmux -S "$tmux_sock" display-message -p '#{pid}')
trap 'rc=$?; kill "$tmux_pid" 2>/dev/null; (exit $rc); hl_cleanup' EXIT
screen() { tmux -S "$tmux_sock" capture-pane -p -t hl -S -200; }
type_line() { tmux -S "$tmux_sock" send-keys -t hl -l "$1"; tmux -S "$tmux_sock" send-keys -t hl Enter; }
wait_screen() { # wait_screen REGEX: until the screen shows it (10 s)
	local shown
	for _ in $(seq 100); do
		shown=$(screen)
		grep -qE -- "$1" <<<"$shown" && return 0
		sleep 0.1
	done
	screen >&2
	hl_fail "the terminal never showed /$1/"
}
wait_screen 'chap_secret \(not shown\):'
type_line "$TTY_SECRET"
wait_screen 'EXIT=0'
screen | grep -qF "$TTY_SECRET" && hl_fail "the prompt echoed the secret: $(screen)"
saved chap_secret "$TTY_SECRET"
hl_log "ok: KEY=- on a terminal prompts without echo"

tmux -S "$tmux_sock" respawn-pane -k -t hl "HOME=$home $CTL --socket $sock; sleep 60"
wait_screen 'hotlun:/>'
type_line "cd $tgt"
type_line "set chap_secret=$HIST_SECRET"
type_line "set mutual_secret=-"
wait_screen 'mutual_secret \(not shown\):'
type_line "$PROMPT_SECRET"
type_line "exit"
for _ in $(seq 50); do [ -s "$home/.hotlunctl_history" ] && break; sleep 0.1; done
hist=$home/.hotlunctl_history
[ -s "$hist" ] || hl_fail "no history written"
grep -qF "$HIST_SECRET" "$hist" && hl_fail "the history holds the secret: $(cat "$hist")"
grep -qF "$PROMPT_SECRET" "$hist" && hl_fail "the history holds the secret typed at the prompt: $(cat "$hist")"
# libedit's format: blanks as \040
sed 's/\\040/ /g' "$hist" | grep -qxF 'set chap_secret=********' || hl_fail "the history lacks the masked line: $(cat "$hist")"
[ "$(stat -c %a "$hist")" = 600 ] || hl_fail "the history file is mode $(stat -c %a "$hist")"
saved chap_secret "$HIST_SECRET"
saved mutual_secret "$PROMPT_SECRET"
hl_log "ok: the shell's history has set chap_secret=******** (mode 0600)"

# ---- memory: no secret that was replaced is left in the live process
# (not under ASan: its shadow mappings made a 6.6 TB sparse core, 24 GB of
# it written to disk, and grep then read all of it)
if hl_sanitized; then
	hl_log "skipped: the core check (an ASan hotlund)"
else
	gcore -o "$tmp/gc" "$HL_PID" >"$tmp/gcore.log" 2>&1 || hl_fail "gcore failed: $(tail -3 "$tmp/gcore.log")"
	for s in "$OLD_CHAP" "$OLD_MUTUAL" "$OLD_DISC" "$PIPE_SECRET" "$TTY_SECRET" "$FILE_SECRET"; do
		n=$(grep -caF -- "$s" "$tmp/gc.$HL_PID")
		[ "$n" = 0 ] || hl_fail "a replaced secret ($s) is still in hotlund's memory ($n line(s) of its core)"
	done
	n=$(grep -caF -- "$HIST_SECRET" "$tmp/gc.$HL_PID")
	[ "$n" -gt 0 ] || hl_error "the current secret is not in the core either: the check cannot see"
	rm -f "$tmp/gc.$HL_PID"
	hl_log "ok: a core of the live hotlund holds the current secret ($n line(s)), no replaced one"
fi
hl_stop "$HL_PID"

# ---- not dumpable: /proc/PID owned by root, no core on SIGABRT
grep -q '^LimitCORE=0$' "$HL_SRCDIR/contrib/systemd/hotlund.service.in" || hl_fail "hotlund.service has no LimitCORE=0"
run=$tmp/nobody
mkdir -p "$run/state"
port2=$(hl_free_port)
cat >"$run/hotlun.conf" <<EOF
[global]
portal = 127.0.0.1:$port2
state_dir = $run/state
control_socket = $run/state/ctl.sock

[disk disk0]
origin = file:$run/d.img

[target $iqn]
lun.0 = disk0
allow = ALL
chap_user = front
chap_secret = $OLD_CHAP
EOF
hl_make_disk "$run/d.img" 16M
chmod 755 "$tmp"
chown -R 65534:65534 "$run"
chmod 600 "$run/hotlun.conf"
as=()
[ "$(id -u)" = 0 ] && as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
hl_spawn hotlund "$run/hotlund.log" bash -c 'cd "$1" && ulimit -c unlimited && shift && exec "$@"' \
	- "$run" "${as[@]}" "$HL_HOTLUND" --config "$run/hotlun.conf"
pid=$HL_LAST_PID
hl_wait_port "$pid" 127.0.0.1 "$port2" "$run/hotlund.log"
[ "$(stat -c %u "/proc/$pid/environ")" = 0 ] ||
	hl_fail "hotlund is dumpable: /proc/$pid/environ belongs to uid $(stat -c %u "/proc/$pid/environ")"
pattern=$(cat /proc/sys/kernel/core_pattern)
kill -ABRT "$pid"
for _ in $(seq 100); do hl_alive "$pid" || break; sleep 0.1; done
wait "$pid" 2>/dev/null
hl_forget "$pid"
if [[ $pattern == */* || $pattern == '|'* ]]; then
	hl_log "core_pattern is '$pattern' (not a file in the working directory): no core file to look for"
else
	cores=$(find "$run" -maxdepth 1 -name 'core*' -type f)
	if [ -n "$cores" ]; then
		hl_fail "SIGABRT left a core ($cores, $(grep -caF -- "$OLD_CHAP" $cores) line(s) with the CHAP secret)"
	fi
	hl_log "ok: SIGABRT with ulimit -c unlimited left no core (core_pattern '$pattern')"
fi
hl_log "ok: hotlund is not dumpable (/proc/PID owned by root while it runs as uid 65534)"
hl_log "PASS"
