#!/bin/bash
# scsi_full.sh - the whole libiscsi conformance suite (iscsi-test-cu, every
# family, destructive tests allowed) against hotlund on a file LUN, then a
# second run with two URLs to the same LUN through two portals (multipath,
# reservation and COMPARE AND WRITE tests from two I_T nexuses). Both must end
# with 0 failed tests; every skip must be listed in docs/compliance.md.
#
# The LUN has 4096-byte blocks (HL_FULL_BS): on a file origin a 512-byte LU
# reports 8 logical blocks per physical block (the filesystem's 4 KiB), and
# GetLBAStatus.UnmapSingle of libiscsi 1.19 expects, for a request at LBA
# i + 1, a descriptor at LBA i + lbppb, which holds only when lbppb is 1 (see
# docs/compliance.md). The required families still run at 512 bytes
# (compliance.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cu_check.sh"
hl_need iscsi-test-cu

T=$(hl_tmpdir)
BS=${HL_FULL_BS:-4096}
LIMIT=${HL_CU_TIMEOUT:-1200}
hl_make_disk "$T/disk0.img" 128M
HL_IQN=$HL_IQN_PREFIX:scsi-full
HL_PORT=$(hl_free_port)
HL_PORT2=$(hl_free_port)
hl_write_config "$T/hotlund.conf" "$HL_PORT" "$T/disk0.img" "PORTAL2=$HL_PORT2"
sed -i "s|^origin = file:.*|&\nblock_size = $BS|" "$T/hotlund.conf"
hl_start_hotlund "$T/hotlund.conf"
hl_wait_port "$HL_PID" 127.0.0.1 "$HL_PORT2" "$HL_LOG"
URL=iscsi://127.0.0.1:$HL_PORT/$HL_IQN/0
URL2=iscsi://127.0.0.1:$HL_PORT2/$HL_IQN/0

hl_log "iscsi-test-cu -d $URL (block size $BS)"
hl_cu_run "$T/cu1.out" "$LIMIT" -d "$URL"
hl_check_alive
hl_cu_check "$T/cu1.out" "$CU_RC" 600
grep -q "Multipath unavailable" "$T/cu1.out" || hl_fail "one URL, yet multipath tests ran?"

hl_log "iscsi-test-cu -d $URL $URL2"
hl_cu_run "$T/cu2.out" "$LIMIT" -d "$URL" "$URL2"
hl_check_alive
hl_cu_check "$T/cu2.out" "$CU_RC" 600
if grep -A5 '^Suite: MultipathIO' "$T/cu2.out" | grep -q "Multipath unavailable"; then
	hl_fail "two URLs, but the MultipathIO tests skipped"
fi
hl_target_stop
hl_log "PASS"
