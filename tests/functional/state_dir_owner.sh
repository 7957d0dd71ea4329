#!/bin/bash
# state_dir_owner.sh - hotlund (root) writes its state files by name in
# state_dir (install-id.tmp, cache-NAME.map.tmp, APTPL files), creates the
# demo's files in --demo DIR and its control socket in that socket's folder,
# and follows symbolic links there. A folder another local user owns, or
# may write to, lets that user point those names at any file: hotlund then
# truncates and overwrites it (install-id.tmp -> a root file), formats it
# as a cache (the demo's demo-cache.img), or serves it as a LUN. hotlund
# must refuse such a folder at start, before it writes anything in it.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || hl_skip "needs root (a folder of another user)"
[ -x "$HL_HOTLUND" ] || hl_missing "$HL_HOTLUND not built"

tmp=$(hl_tmpdir)
port=$(hl_free_port)
hl_make_disk "$tmp/d0.img" 16M
mkdir -p "$tmp/ok"
chmod 700 "$tmp/ok"

# victim FILE: a root file of known content
victim() {
	printf 'precious root data\n' >"$1"
	chmod 600 "$1"
}
intact() { # intact FILE WHAT
	[ "$(cat "$1" 2>/dev/null)" = "precious root data" ] ||
		hl_fail "$2: hotlund wrote through another user's link into $1 (now $(stat -c %s "$1") bytes)"
}
conf() { # conf FILE STATE_DIR SOCKET
	cat >"$1" <<EOF
[global]
portal = 127.0.0.1:$port
state_dir = $2
control_socket = $3
log_level = info

[disk disk0]
origin = file:$tmp/d0.img

[target $HL_IQN_PREFIX:state]
lun.0 = disk0
allow = ALL
EOF
}
# refused WHAT WORD ARGS...: hotlund must exit (not serve) with WORD in its messages
refused() {
	local what=$1 word=$2 rc=0
	shift 2
	timeout 10 "$HL_HOTLUND" "$@" >"$tmp/out" 2>&1 || rc=$?
	[ "$rc" != 124 ] || hl_fail "$what: hotlund started (it ran until the test's 10 s timeout)"
	[ "$rc" != 0 ] || hl_fail "$what: hotlund exited 0"
	grep -q -- "$word" "$tmp/out" || hl_fail "$what: the refusal does not say why: $(tail -3 "$tmp/out")"
	hl_log "$what: refused ($(grep -m1 -- "$word" "$tmp/out"))"
}

# 1. state_dir owned by another user, who left install-id.tmp -> a root file
evil=$tmp/evil
mkdir -p "$evil"
victim "$tmp/victim1"
ln -s "$tmp/victim1" "$evil/install-id.tmp"
chown -h 65534:65534 "$evil" "$evil/install-id.tmp"
conf "$tmp/c1.conf" "$evil" "$tmp/ok/ctl.sock"
refused "state_dir of another user (--check-config)" "owned by uid 65534" --check-config "$tmp/c1.conf"
refused "state_dir of another user" "owned by uid 65534" --config "$tmp/c1.conf"
intact "$tmp/victim1" "state_dir of another user"

# 2. state_dir of root but writable by others (no sticky bit)
open=$tmp/open
mkdir -p "$open"
chmod 777 "$open"
conf "$tmp/c2.conf" "$open" "$tmp/ok/ctl.sock"
refused "state_dir writable by others" "writable by" --config "$tmp/c2.conf"
[ ! -e "$open/install-id" ] || hl_fail "hotlund wrote its install id in a folder others may write"

# 3. the control socket in a folder of another user (it could swap the socket for its own
#    and read the secrets hotlunctl sends)
sockdir=$tmp/sockdir
mkdir -p "$sockdir" "$tmp/st3"
chown 65534:65534 "$sockdir"
conf "$tmp/c3.conf" "$tmp/st3" "$sockdir/ctl.sock"
refused "control socket folder of another user (--check-config)" "owned by uid 65534" \
	--check-config "$tmp/c3.conf"
refused "control socket folder of another user" "owned by uid 65534" --config "$tmp/c3.conf"
[ ! -e "$sockdir/ctl.sock" ] || hl_fail "hotlund made its control socket in another user's folder"
[ ! -e "$tmp/st3/install-id" ] || hl_fail "hotlund wrote its state before it checked the socket's folder"

# 4. --demo DIR of another user: demo-cache.img -> a root file would be formatted as a cache
demo=$tmp/demo
mkdir -p "$demo"
victim "$tmp/victim4"
ln -s "$tmp/victim4" "$demo/demo-cache.img"
chown -h 65534:65534 "$demo" "$demo/demo-cache.img"
refused "--demo DIR of another user" "owned by uid 65534" --demo "$demo" --portal "127.0.0.1:$port"
intact "$tmp/victim4" "--demo DIR of another user"

# 5. what is allowed: root's own folders (and a sticky /tmp above them) start as before
conf "$tmp/c5.conf" "$tmp/ok/state" "$tmp/ok/ctl.sock"
hl_start_hotlund "$tmp/c5.conf"
hl_stop "$HL_PID"
hl_log "ok: folders other users own or may write are refused, root's own start"
