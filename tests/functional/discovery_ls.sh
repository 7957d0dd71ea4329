#!/bin/bash
# discovery_ls.sh - SendTargets discovery and LUN listing with iscsi-ls:
# the configured target, its portal and LUN 0 (a direct-access disk of the
# configured size) must be listed; a second target name must not appear.
. "$(dirname "$0")/lib.sh"
hl_need iscsi-ls

hl_target_start --size 64M
out=$(hl_tmpdir)/ls.out
iscsi-ls -s "iscsi://127.0.0.1:$HL_PORT" >"$out" 2>&1 || { cat "$out" >&2; hl_fail "iscsi-ls failed"; }
cat "$out"

grep -q "^Target:$HL_IQN Portal:127.0.0.1:$HL_PORT,[0-9]" "$out" ||
	hl_fail "target $HL_IQN with portal 127.0.0.1:$HL_PORT not listed"
[ "$(grep -c '^Target:' "$out")" = 1 ] || hl_fail "expected exactly one target"
grep -Eq "^Lun:$HL_LUN[[:space:]]+Type:DIRECT_ACCESS \(Size:6[34]M\)" "$out" ||
	hl_fail "LUN $HL_LUN is not listed as a 64 MiB direct-access disk"

# Discovery alone (no LUN scan) answers too.
iscsi-ls "iscsi://127.0.0.1:$HL_PORT" >"$out" 2>&1 || { cat "$out" >&2; hl_fail "iscsi-ls (no -s) failed"; }
grep -q "^Target:$HL_IQN " "$out" || hl_fail "plain discovery does not list $HL_IQN"

hl_target_stop
hl_log "PASS"
