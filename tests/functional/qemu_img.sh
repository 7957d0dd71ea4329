#!/bin/bash
# qemu_img.sh - QEMU's iSCSI block driver (libiscsi) against the target:
# qemu-img convert of a 256 MiB random image onto the LUN and qemu-img compare
# back, (1) plainly, (2) with CRC32C header digests, (3) with one-way CHAP;
# a wrong CHAP secret and missing credentials must be refused.
. "$(dirname "$0")/lib.sh"
hl_need qemu-img
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"

T=$(hl_tmpdir)
SIZE=$((256 * 1024 * 1024))

# roundtrip LABEL TARGET-SPEC...: fresh random data onto the LUN and back.
roundtrip() {
	local label=$1 t0
	shift
	head -c $SIZE /dev/urandom >"$T/src.img"
	t0=$(date +%s.%N)
	qemu-img convert -n -f raw "$@" "$T/src.img" "$TARGET" >"$T/qemu.out" 2>&1 ||
		{ cat "$T/qemu.out" >&2; hl_fail "$label: qemu-img convert to the LUN failed"; }
	qemu-img compare "${CMP_ARGS[@]}" >"$T/qemu.out" 2>&1 ||
		{ cat "$T/qemu.out" >&2; hl_fail "$label: qemu-img compare: the LUN differs from what was written"; }
	grep -q 'Images are identical' "$T/qemu.out" || { cat "$T/qemu.out" >&2; hl_fail "$label: compare"; }
	hl_log "$label: 256 MiB written and compared identical ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s)"
}

# ---- plain
hl_target_start --size $SIZE
TARGET=$HL_URL
qemu-img info "$HL_URL" >"$T/info.out" 2>&1 || { cat "$T/info.out" >&2; hl_fail "qemu-img info failed"; }
grep -q "virtual size: 256 MiB ($SIZE bytes)" "$T/info.out" || { cat "$T/info.out" >&2; hl_fail "LUN size is not 256 MiB"; }
CMP_ARGS=(-f raw -F raw -s "$T/src.img" "$HL_URL")
roundtrip plain

# ---- CRC32C header digest (libiscsi negotiates HeaderDigest only)
OPTS="driver=iscsi,transport=tcp,portal=$HL_PORTAL,target=$HL_IQN,lun=$HL_LUN,header-digest=crc32c"
TARGET=$OPTS
CMP_ARGS=(-s --image-opts "driver=file,filename=$T/src.img" "$OPTS")
roundtrip header-digest --target-image-opts
hl_target_stop

# ---- one-way CHAP, same backing file
hl_target_start --disk "$HL_DISK" --chap hluser hl-secret-0123
TARGET=$HL_CHAP_URL
CMP_ARGS=(-f raw -F raw -s "$T/src.img" "$HL_CHAP_URL")
roundtrip chap
WRONG=iscsi://hluser%wrong-secret-99@127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN
hl_expect_fail "wrong CHAP secret is refused" qemu-img info "$WRONG"
grep -qi 'Authentication failure' "$(hl_tmpdir)/expect_fail.out" ||
	{ cat "$(hl_tmpdir)/expect_fail.out" >&2; hl_fail "wrong secret: no authentication failure reported"; }
hl_expect_fail "no credentials are refused when CHAP is required" qemu-img info "$HL_URL"
hl_target_stop
hl_log "PASS"
