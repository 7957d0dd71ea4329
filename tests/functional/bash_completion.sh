#!/bin/bash
# bash_completion.sh - contrib/bash-completion/hotlunctl: _hotlunctl fills
# COMPREPLY with options, commands, tree paths (asked of the running
# hotlund over the control socket named on the line), parameters of the
# node a command runs at, and the top-level folders when no daemon answers.
. "$(dirname "$0")/lib.sh"

[ "$HL_TARGET" = tgt ] && hl_skip "completes hotlunctl against hotlund"
COMPLETION=$HL_SRCDIR/contrib/bash-completion/hotlunctl
[ -f "$COMPLETION" ] || hl_fail "no $COMPLETION"
[ -x "$HL_BUILDDIR/hotlunctl" ] || hl_error "no hotlunctl built"

hl_target_start --size 64M
sock=$(hl_tmpdir)/state/ctl.sock
[ -S "$sock" ] || hl_error "no control socket at $sock"

# complete WORD...: COMPREPLY (one per line) for a command line whose last
# word is the one being completed.
complete_words() {
	PATH=$HL_BUILDDIR:$PATH bash -c '
		source "$1"
		shift
		COMP_WORDS=("$@")
		COMP_CWORD=$(($# - 1))
		COMP_LINE="$*"
		COMP_POINT=${#COMP_LINE}
		_hotlunctl
		printf "%s\n" "${COMPREPLY[@]}"' _ "$COMPLETION" "$@"
}

# expect WANT WORD...: the completions, sorted and joined by blanks, are WANT.
expect() {
	local want=$1 got
	shift
	got=$(complete_words "$@" | sort | tr '\n' ' ')
	got=${got% }
	[ "$got" = "$want" ] || hl_fail "completing '$*': got '$got', want '$want'"
	hl_log "'$*' -> $got"
}

S=(hotlunctl --socket "$sock")
expect "--config --help --socket --timeout --version" hotlunctl --
expect "/disks/" "${S[@]}" /di
expect "/disks/" "${S[@]}" --timeout 3 /di
expect "cd create" "${S[@]}" -t 3 /disks c
expect "/disks/disk0/" "${S[@]}" /disks/
expect "/iscsi/$HL_IQN/" "${S[@]}" /iscsi/
expect "/iscsi/$HL_IQN/tpg1/acls/ /iscsi/$HL_IQN/tpg1/luns/ /iscsi/$HL_IQN/tpg1/portals/" \
	"${S[@]}" "/iscsi/$HL_IQN/tpg1/"
expect "/iscsi/$HL_IQN/tpg1/luns/lun0/" "${S[@]}" "/iscsi/$HL_IQN/tpg1/luns/l"
expect "saveconfig set stats" "${S[@]}" s
expect "cd create" "${S[@]}" /disks c
expect "cache= cache_quota=" "${S[@]}" /disks/disk0 set ca
expect "admission" "${S[@]}" /caches get adm
expect "log_level=" "${S[@]}" set log_
expect "logout_timeout=" "${S[@]}" set logo
expect "control_idle_timeout=" "${S[@]}" set contr
expect "scratch_buffer_limit=" "${S[@]}" set scr
expect "/caches/" "${S[@]}" ls /ca
expect "--json --watch" "${S[@]}" stats -
expect "handover help" "${S[@]}" h
expect "takeover" "${S[@]}" t
expect "/disks/disk0/" "${S[@]}" handover ""
expect "/disks/disk0/" "${S[@]}" takeover /disks/d
# a disk created at run time shows up at once: the tree is the daemon's
"$HL_BUILDDIR/hotlunctl" --socket "$sock" /disks create extra "origin=file:$HL_DISK" >/dev/null ||
	hl_fail "hotlunctl create failed"
expect "/disks/disk0/ /disks/extra/" "${S[@]}" /disks/
# no daemon: the fixed top level still completes
expect "/caches/ /disks/ /iscsi/ /sessions/" hotlunctl --socket "$(hl_tmpdir)/none.sock" /
# the config file names the socket when --socket is not given
expect "/disks/disk0/ /disks/extra/" hotlunctl --config "$(hl_tmpdir)/hotlund.conf" /disks/
hl_stop
exit 0
