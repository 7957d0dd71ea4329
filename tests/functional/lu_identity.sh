#!/bin/bash
# lu_identity.sh - one LU identity on several gateways (issue 17 item 1):
# two hotlund with their own state folders (so their own install ids) serve
# a disk with the same `serial` and `naa` keys: both report that serial in
# VPD 80h and that NAA 6 designator in VPD 83h (iscsi-inq). A disk without
# the keys keeps the per-gateway identity derived from the install id (two
# gateways differ). A malformed naa or serial is refused with FILE:LINE.
. "$(dirname "$0")/lib.sh"
hl_need iscsi-inq python3
[ "$HL_TARGET" = tgt ] && hl_skip "hotlund's [disk] keys; nothing to run against tgt"

T=$(hl_tmpdir)
IQN=$HL_IQN_PREFIX:lu-identity
NAA=6001405abcdef0123456789abcdef001
SERIAL=GW-LUN-0001

# conf FILE PORT STATE_DIR: disk "shared" (serial, naa set) and disk "own" (not set)
conf() {
	mkdir -p "$3"
	truncate -s 16M "$3/shared.img" "$3/own.img"
	cat >"$1" <<EOF
[global]
portal = 127.0.0.1:$2
state_dir = $3
control_socket = $3/ctl.sock
log_level = info

[disk shared]
origin = file:$3/shared.img
serial = $SERIAL
naa = naa.$NAA

[disk own]
origin = file:$3/own.img

[target $IQN]
lun.0 = shared
lun.1 = own
allow = ALL
EOF
}

PA=$(hl_free_port)
PB=$(hl_free_port)
conf "$T/a.conf" "$PA" "$T/a"
conf "$T/b.conf" "$PB" "$T/b"
hl_start_hotlund "$T/a.conf"
A=$HL_PID
hl_start_hotlund "$T/b.conf"
B=$HL_PID
[ "$(cat "$T/a/install-id")" != "$(cat "$T/b/install-id")" ] || hl_error "the two state folders share an install id"

sa=$(hl_serial_of "iscsi://127.0.0.1:$PA/$IQN/0")
sb=$(hl_serial_of "iscsi://127.0.0.1:$PB/$IQN/0")
na=$(hl_naa_of "iscsi://127.0.0.1:$PA/$IQN/0")
nb=$(hl_naa_of "iscsi://127.0.0.1:$PB/$IQN/0")
hl_log "disk with serial/naa set: gateway A $sa $na, gateway B $sb $nb"
[ "$sa" = "$SERIAL" ] && [ "$sb" = "$SERIAL" ] || hl_fail "VPD 80h serials are '$sa' and '$sb', want $SERIAL on both"
[ "$na" = "$NAA" ] && [ "$nb" = "$NAA" ] || hl_fail "VPD 83h NAA designators are $na and $nb, want $NAA on both"

sa=$(hl_serial_of "iscsi://127.0.0.1:$PA/$IQN/1")
sb=$(hl_serial_of "iscsi://127.0.0.1:$PB/$IQN/1")
na=$(hl_naa_of "iscsi://127.0.0.1:$PA/$IQN/1")
nb=$(hl_naa_of "iscsi://127.0.0.1:$PB/$IQN/1")
hl_log "disk without the keys: gateway A $sa $na, gateway B $sb $nb"
[ -n "$sa" ] && [ -n "$sb" ] && [ "$sa" != "$sb" ] || hl_fail "file disks without serial got '$sa' and '$sb' (expected two per-gateway serials)"
[ "${na:0:1}" = 6 ] && [ "$na" != "$nb" ] || hl_fail "file disks without naa got $na and $nb"

# set while running (hotlunctl): the disk is reopened with the new identity
"$HL_BUILDDIR/hotlunctl" --socket "$T/a/ctl.sock" /disks/own set serial=GW-LUN-0002 \
	naa=6001405abcdef0123456789abcdef002 >"$T/set.out" 2>&1 || { cat "$T/set.out" >&2; hl_fail "hotlunctl set serial naa"; }
sa=$(hl_serial_of "iscsi://127.0.0.1:$PA/$IQN/1")
na=$(hl_naa_of "iscsi://127.0.0.1:$PA/$IQN/1")
hl_log "set while running: $sa $na"
[ "$sa" = GW-LUN-0002 ] && [ "$na" = 6001405abcdef0123456789abcdef002 ] || hl_fail "hotlunctl set did not change the identity: $sa $na"
if "$HL_BUILDDIR/hotlunctl" --socket "$T/a/ctl.sock" /disks/own set naa=7bad >"$T/set.out" 2>&1; then
	hl_fail "hotlunctl set took a bad naa"
fi
grep -q "naa: expected 32 hex digits" "$T/set.out" || { cat "$T/set.out" >&2; hl_fail "no clear error for a bad naa"; }
hl_stop "$A"
hl_stop "$B"

# malformed keys: refused with FILE:LINE
for kv in "naa = 5001405abcdef0123456789abcdef001" "naa = 6001405abcdef0123456789abcdef0" \
	"serial = has blank" "serial = 0123456789abcdef0123456789abcdef0"; do
	sed "s/^naa = .*/$kv/" "$T/a.conf" >"$T/bad.conf"
	[ "${kv%% *}" = serial ] && sed "s/^serial = .*/$kv/; s/^naa = .*//" "$T/a.conf" >"$T/bad.conf"
	if timeout 20 "$HL_HOTLUND" --config "$T/bad.conf" >"$T/bad.log" 2>&1; then
		hl_fail "hotlund started with '$kv'"
	fi
	grep -q "bad.conf:[0-9]*: ${kv%% *}: expected" "$T/bad.log" || { cat "$T/bad.log" >&2; hl_fail "no FILE:LINE error for '$kv'"; }
done
hl_log "PASS"
