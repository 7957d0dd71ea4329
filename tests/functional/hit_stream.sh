#!/bin/bash
# hit_stream.sh - issue 25: a big hit's Data-In leaves in pieces as its
# chunks come off the cache device, and never a byte of a chunk that failed
# before its retry from the origin is in. On a file LUN of random bytes
# with an SSD cache in front (64K blocks, admission "always", chunks of
# 128 KiB: HOTLUN_HIT_CHUNK), a 1 MiB range is read once (a miss: it fills
# 16 adjacent slots), then read twice more as hits, 8 device reads each.
# The test knob HOTLUN_TEST_CACHE_DEV_READ_FAIL=11 fails the 11th device
# read since the start, the third chunk of the second hit: its buffer is
# overwritten with 0xEE bytes, 50 ms late, then -EIO, and its retry from
# the origin takes 300 ms (origin_latency_ms); HOTLUN_TEST_CACHE_DEV_READ_HOLD
# holds the last chunk (read 16) 100 ms. So when the third chunk fails,
# chunks 1-2 were sent, 4-7 are in and 8 is still out: the data the
# initiator gets must still be the origin's, byte for byte (a stream that
# counted the failed chunk as in sent its 0xEE bytes; it did when the fail
# marked the chunk done: checked). Checks: both hits match the origin, both were
# streamed (hit_streams 2), the failed chunk was retried (hit_retries 1),
# the cache went pass-through (dev_errors >= 1) and a read after that is
# still right; a 64 KiB hit is not streamed (hit_streams stays 2).
. "$(dirname "$0")/lib.sh"
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
CTL=$HL_BUILDDIR/hotlunctl
[ -x "$TOOL" ] || hl_missing "$TOOL not built (make check builds it)"
[ -x "$CTL" ] || hl_missing "$CTL not built"
hl_need python3 curl

T=$(hl_tmpdir)
head -c 16M /dev/urandom >"$T/disk0.img" || hl_error "cannot write $T/disk0.img"
hl_make_disk "$T/cache.img" 32M
HL_IQN=$HL_IQN_PREFIX:hit-stream
HL_PORT=$(hl_free_port)
MP=$(hl_free_port)
HL_GLOBAL_EXTRA="metrics_listen = 127.0.0.1:$MP" hl_write_config "$T/hotlund.conf" "$HL_PORT" "$T/disk0.img"
hl_cache_disk0 "$T/hotlund.conf" "$T/cache.img"
sed -i "s|^cache = ssd$|&\norigin_latency_ms = 300|" "$T/hotlund.conf"
HOTLUN_HIT_CHUNK=131072 HOTLUN_TEST_CACHE_DEV_READ_FAIL=11 HOTLUN_TEST_CACHE_DEV_READ_HOLD=16:100 \
	hl_start_hotlund "$T/hotlund.conf"
URL=iscsi://127.0.0.1:$HL_PORT/$HL_IQN/0
SOCK=$(hl_tmpdir)/state/ctl.sock
cstat() { hl_cache_stat "$SOCK" ssd "$1"; }

# dump NAME OFF LEN: read LEN bytes at byte OFF into $T/NAME, compare with the origin
dump() {
	local name=$1 off=$2 len=$3 out
	out=$("$TOOL" dump "$URL" $((off / 512)) "$len" "$T/$name" 2>&1) ||
		hl_fail "$name: the read failed: $out"
	[ "$(head -1 <<<"$out")" = GOOD ] || hl_fail "$name: status $out"
	cmp -s "$T/$name" <(tail -c +$((off + 1)) "$T/disk0.img" | head -c "$len") || {
		local first
		first=$(cmp "$T/$name" <(tail -c +$((off + 1)) "$T/disk0.img" | head -c "$len") | head -1)
		hl_fail "$name: the data is not the origin's ($first)"
	}
}

OFF=$((4 << 20))
dump miss $OFF $((1 << 20))
hl_cache_settle "$SOCK" ssd
[ "$(cstat bytes_read_cache)" = 0 ] || hl_fail "the first read was served by the cache"
dump hit1 $OFF $((1 << 20))
[ "$(cstat bytes_read_cache)" = $((1 << 20)) ] ||
	hl_fail "the second read was not a hit: bytes_read_cache $(cstat bytes_read_cache)"
[ "$(cstat hit_streams)" = 1 ] || hl_fail "the 1 MiB hit was not streamed: hit_streams $(cstat hit_streams)"
[ "$(cstat hit_retries)" = 0 ] || hl_fail "a retry before the knob's read"
hl_log "1 MiB hit streamed, data right"

dump hit2 $OFF $((1 << 20))
grep -q "test knob: cache device read at" "$HL_LOG" || hl_fail "the knob failed no read"
[ "$(cstat hit_retries)" = 1 ] || hl_fail "hit_retries $(cstat hit_retries), not 1"
[ "$(cstat hit_streams)" = 2 ] ||
	hl_fail "the hit with a failed chunk sent nothing early: hit_streams $(cstat hit_streams)"
[ "$(cstat dev_errors)" -ge 1 ] || hl_fail "no device error counted"
hl_log "a failed chunk was re-read from the origin before its bytes left"

# pass-through now: still right; a 64 KiB read is never streamed
dump after $OFF $((1 << 20))
dump small $((OFF + (128 << 10))) $((64 << 10))
[ "$(cstat hit_streams)" = 2 ] || hl_fail "hit_streams $(cstat hit_streams) after pass-through reads"
# the same count in the Prometheus endpoint (per disk, like the other read counters)
prom=$(curl -sf "http://127.0.0.1:$MP/metrics") || hl_fail "no scrape of 127.0.0.1:$MP/metrics"
grep -q '^hotlun_cache_hit_streams_total{cache="ssd",disk="disk0"} 2$' <<<"$prom" ||
	hl_fail "hotlun_cache_hit_streams_total is not 2: $(grep hit_streams <<<"$prom")"
hl_log "pass-through reads right"
