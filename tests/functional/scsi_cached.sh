#!/bin/bash
# scsi_cached.sh - the commands that change blocks without a plain WRITE keep
# a cached disk coherent: on a file LUN with an SSD cache in front (admission
# "always"), hl_scsi_tool warms a range, changes it with UNMAP, WRITE SAME
# (with and without UNMAP), EXTENDED COPY, COMPARE AND WRITE or ORWRITE, and
# reads it back: it must hold the new data, never the cached old one. The
# cache's counters must show reads served from the cache device, so the
# ranges really were cached when they were changed. Then PRE-FETCH warms
# the cache: the first read of a prefetched range comes from the cache
# device.
. "$(dirname "$0")/lib.sh"
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
CTL=$HL_BUILDDIR/hotlunctl
[ -x "$TOOL" ] || hl_missing "$TOOL not built (make check builds it)"
[ -x "$CTL" ] || hl_missing "$CTL not built"
hl_need python3

T=$(hl_tmpdir)
hl_make_disk "$T/disk0.img" 64M
hl_make_disk "$T/cache.img" 32M
HL_IQN=$HL_IQN_PREFIX:scsi-cached
HL_PORT=$(hl_free_port)
hl_write_config "$T/hotlund.conf" "$HL_PORT" "$T/disk0.img"
hl_cache_disk0 "$T/hotlund.conf" "$T/cache.img"
hl_start_hotlund "$T/hotlund.conf"
URL=iscsi://127.0.0.1:$HL_PORT/$HL_IQN/0

if ! "$TOOL" cached "$URL" >"$T/cached.out" 2>"$T/cached.err"; then
	cat "$T/cached.out" "$T/cached.err" >&2
	hl_fail "a command left stale data in the cache (or failed)"
fi
while read -r line; do hl_log "$line"; done <"$T/cached.out"
[ "$(grep -c coherent "$T/cached.out")" = 6 ] || hl_fail "not every command was checked"

# cache_read: bytes disk0 has read from the cache device so far
cache_read() { hl_cache_stat "$(hl_tmpdir)/state/ctl.sock" ssd bytes_read_cache disk0; }
hits=$(cache_read)
hl_log "bytes read from the cache device: $hits"
[ "$hits" -gt 0 ] || hl_fail "no read was served by the cache: the test proved nothing"

# settle: the cache's requests in flight (fills included) done
settle() { hl_cache_idle "$(hl_tmpdir)/state/ctl.sock" ssd 5 || hl_fail "cache requests still in flight"; }
pf() { "$TOOL" pr "$URL" 9 "$@"; }
# control: the first read of a range never read before is not served by the cache
settle
before=$(cache_read)
[ "$(pf read-range 45056 2048)" = GOOD ] || hl_fail "read failed"
after=$(cache_read)
hl_log "first read without PRE-FETCH: $((after - before)) bytes from the cache device"
[ $((after - before)) -eq 0 ] || hl_fail "a never-read range came from the cache: the PRE-FETCH check would prove nothing"
# PRE-FETCH(16) 1 MiB never read before, let the fill land, then read it once
[ "$(pf prefetch 40960 2048)" = GOOD ] || hl_fail "PRE-FETCH(16) failed"
settle
sleep 0.2
before=$(cache_read)
[ "$(pf read-range 40960 2048)" = GOOD ] || hl_fail "read after PRE-FETCH failed"
after=$(cache_read)
hl_log "first read after PRE-FETCH: $((after - before)) bytes from the cache device"
[ $((after - before)) -ge 1048576 ] || hl_fail "PRE-FETCH did not warm the cache"
hl_check_alive
hl_target_stop
hl_log "PASS"
