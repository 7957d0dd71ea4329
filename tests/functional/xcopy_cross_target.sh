#!/bin/bash
# xcopy_cross_target.sh - EXTENDED COPY reaches only the LUs its session may
# address (docs/security.md, "Copy targets"). Target A (LUN 0 disk a, LUN 1
# disk c) allows only alice, target B (LUN 0 disk b) only bob. Alice names
# b by its NAA in a copy from b into her LUN 0 and in a copy from her LUN 0
# over b: both must end in COPY ABORTED, copy target device not reachable
# (0Dh/02h), and neither b's bytes reach a nor a's reach b (the backing
# files, read after hotlund stopped, say so). A copy from her own LUN 1 (c)
# into LUN 0 still works. Before the check, the first copy read bob's disk
# into alice's (CVE-2020-28374 in LIO is the same hole).
. "$(dirname "$0")/lib.sh"
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
[ -x "$TOOL" ] || hl_missing "$TOOL not built (make check builds it)"
tmp=$(hl_tmpdir)
port=$(hl_free_port) || hl_error "no free port"
st=$tmp/state
mkdir -p "$st"
NAA_A=60014050000000000000000000000a0a
NAA_B=60014050000000000000000000000b0b
NAA_C=60014050000000000000000000000c0c
ALICE=$HL_IQN_PREFIX:alice
BOB=$HL_IQN_PREFIX:bob
TGT_A=$HL_IQN_PREFIX:xcopy-a
TGT_B=$HL_IQN_PREFIX:xcopy-b

# pattern WORD: 64 KiB (128 blocks) of WORD repeated
pattern() { yes "$1" | head -c 65536; }
for d in a b c; do
	hl_make_disk "$tmp/$d.img" 16M
done
pattern SECRET-OF-BOB >"$tmp/bob.pat"
pattern ALICE-DATA >"$tmp/alice.pat"
pattern C-DATA >"$tmp/c.pat"
# b: bob's secret at LBA 0; a: alice's data at LBA 1024; c: at LBA 0
dd if="$tmp/bob.pat" of="$tmp/b.img" conv=notrunc status=none
dd if="$tmp/alice.pat" of="$tmp/a.img" bs=512 seek=1024 conv=notrunc status=none
dd if="$tmp/c.pat" of="$tmp/c.img" conv=notrunc status=none
cat >"$tmp/hotlund.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $st/ctl.sock
log_level = info

[disk a]
origin = file:$tmp/a.img
naa = $NAA_A

[disk b]
origin = file:$tmp/b.img
naa = $NAA_B

[disk c]
origin = file:$tmp/c.img
naa = $NAA_C

[target $TGT_A]
lun.0 = a
lun.1 = c
allow = $ALICE

[target $TGT_B]
lun.0 = b
allow = $BOB
CONF
hl_start_hotlund "$tmp/hotlund.conf"
URL_A=iscsi://127.0.0.1:$port/$TGT_A/0

# xcopy WHAT EXPECTED ARGS...: one copy by alice; its status must be EXPECTED
xcopy() {
	local what=$1 want=$2 got
	shift 2
	got=$("$TOOL" xcopy "$URL_A" "$ALICE" "$@") || hl_fail "$what: the tool failed: $got"
	hl_log "$what: $got"
	[ "$got" = "$want" ] || hl_fail "$what: got '$got', want '$want'"
}
# COPY ABORTED (Ah), copy target device not reachable (0Dh/02h)
xcopy "read bob's disk into alice's" "CHECK a/0d/02" "$NAA_B" from 0 0 128
xcopy "write alice's data over bob's disk" "CHECK a/0d/02" "$NAA_B" to 1024 1024 128
xcopy "copy alice's LUN 1 into her LUN 0" GOOD "$NAA_C" from 0 2048 128
hl_check_alive
hl_target_stop

# block LBA FILE: the 64 KiB at LBA of FILE
range() { dd if="$2" bs=512 skip="$1" count=128 status=none; }
range 0 "$tmp/a.img" | cmp -s - "$tmp/bob.pat" && hl_fail "bob's data reached alice's disk"
range 0 "$tmp/a.img" | cmp -s - <(head -c 65536 /dev/zero) ||
	hl_fail "alice's LBA 0 changed"
range 1024 "$tmp/b.img" | cmp -s - "$tmp/alice.pat" && hl_fail "alice's data reached bob's disk"
range 1024 "$tmp/b.img" | cmp -s - <(head -c 65536 /dev/zero) || hl_fail "bob's LBA 1024 changed"
range 2048 "$tmp/a.img" | cmp -s - "$tmp/c.pat" || hl_fail "the copy from LUN 1 did not land"
hl_log "PASS"
