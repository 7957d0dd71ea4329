#!/bin/bash
# scsi_full.sh - the whole libiscsi conformance suite (iscsi-test-cu, every
# family, destructive tests allowed) against hotlund on a file LUN, then a
# second run with two URLs to the same LUN through two portals (multipath,
# reservation and COMPARE AND WRITE tests from two I_T nexuses). Both must end
# with no failed test except the known test defects listed in
# docs/compliance.md ("Known failures": one, GetLBAStatus.UnmapSingle, which
# assumes one logical block per physical block); every skip must be listed
# there too. HL_FULL_BS sets the LU's block size (default 512, what the
# suite's reservation tests assume). HL_FULL_CACHE=BLOCK puts an SSD cache
# with that block size in front of the LU (admission "always": what the
# suite writes and reads again is mostly served from the cache device; with
# HOTLUN_HIT_CHUNK=1 in the environment every multi-block hit is streamed).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cu_check.sh"
hl_need iscsi-test-cu

T=$(hl_tmpdir)
BS=${HL_FULL_BS:-512}
LIMIT=${HL_CU_TIMEOUT:-1200}
hl_make_disk "$T/disk0.img" 128M
HL_IQN=$HL_IQN_PREFIX:scsi-full
HL_PORT=$(hl_free_port)
HL_PORT2=$(hl_free_port)
# The suite sends TARGET WARM and COLD RESET (Reserve6.Target*Reset checks
# that they release a reservation); hotlund refuses them unless the target
# allows them (hotlun.conf(5) allow_target_reset), so this target does.
hl_write_config "$T/hotlund.conf" "$HL_PORT" "$T/disk0.img" "PORTAL2=$HL_PORT2" allow_target_reset=yes
sed -i "s|^origin = file:.*|&\nblock_size = $BS|" "$T/hotlund.conf"
if [ -n "${HL_FULL_CACHE:-}" ]; then
	hl_make_disk "$T/cache.img" 96M
	hl_cache_disk0 "$T/hotlund.conf" "$T/cache.img" size=80M block_size="$HL_FULL_CACHE"
	hl_log "an SSD cache in front (block size $HL_FULL_CACHE, HOTLUN_HIT_CHUNK=${HOTLUN_HIT_CHUNK:-default})"
fi
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
if [ -n "${HL_FULL_CACHE:-}" ]; then
	st=$("$HL_BUILDDIR/hotlunctl" --socket "$(hl_tmpdir)/state/ctl.sock" stats --json 2>&1)
	hl_log "cache: $(python3 -c 'import json, sys; c = json.loads(sys.argv[1])["caches"]["ssd"]
print(" ".join("%s %s" % (k, c[k]) for k in ("read_hits", "read_partial", "hit_streams", "bytes_read_cache")))' "$st")"
fi
hl_target_stop
hl_log "PASS"
