#!/bin/bash
# hit_stream_race.sh - issue 25 review: a streamed big hit, checked PDU by
# PDU, never sends a byte older than a write that completed before the
# READ, and every byte it sends is covered by a right data digest. A file
# LUN of random bytes, an SSD cache in front (64K blocks, admission
# "always", the default 16M update buffer) and the smallest chunk
# (HOTLUN_HIT_CHUNK=1: one cache block per device read, so every
# multi-block hit is streamed, 16 chunks per 1 MiB). hit_stream_race.py
# logs in with header and data digests, MaxRecvDataSegmentLength 512 and
# MaxBurstLength 20480, reads six 1 MiB ranges once (the fills), then in
# round r on range r: a sector of every cache block written and answered
# (in the update buffer: laid over each chunk), the 1 MiB READ with a write
# to another sector of every block right behind it (racing the chunks: old
# or new allowed there, nowhere else); then every range once more; DataSN,
# offsets, F and S bits, ExpDataSN, status and residual of every READ
# checked, and the data against a model of the image and the writes. The
# six racing READs must all have gone out streamed (hit_streams counts
# them; the last reads may, a block whose update a racing write dropped is
# PARTIAL), or the test proved nothing. Then the same with update_buffer = 0
# (every update written to its slot on the device at once, racing the
# chunks' device reads). Last, with the chunks 40 ms apart, a streamed READ
# aborted (ABORT TASK) after its first Data-In and one whose connection is
# closed then: the TMF completes, nothing of the task follows its
# response, hotlund stays up (and clean under ASan), a new session reads
# the range right.
. "$(dirname "$0")/lib.sh"
hl_need python3
PY=$(dirname "$0")/hit_stream_race.py

# run UB [STAGGER_MS [--abort]]
run() {
	local ub=$1 stagger=${2:-5} mode=${3:-} T out racing must reads streams hits
	T=$(hl_tmpdir)/ub$ub$mode
	mkdir -p "$T"
	head -c 16M /dev/urandom >"$T/disk0.img" || hl_error "cannot write $T/disk0.img"
	hl_make_disk "$T/cache.img" 32M
	HL_IQN=$HL_IQN_PREFIX:hit-stream-race
	HL_PORT=$(hl_free_port)
	hl_write_config "$T/hotlund.conf" "$HL_PORT" "$T/disk0.img"
	hl_cache_disk0 "$T/hotlund.conf" "$T/cache.img" update_buffer="$ub"
	HOTLUN_HIT_CHUNK=1 HOTLUN_TEST_CACHE_DEV_READ_STAGGER=$stagger hl_start_hotlund "$T/hotlund.conf"
	local sock
	sock=$(hl_tmpdir)/state/ctl.sock
	out=$(python3 "$PY" --portal "127.0.0.1:$HL_PORT" --target "$HL_IQN" \
		--image "$T/disk0.img" --lba 8192 --blocks 2048 $mode 2>&1) ||
		hl_fail "update_buffer $ub $mode: $out"
	if [ -n "$mode" ]; then
		while read -r line; do hl_log "$line"; done <<<"$out"
		[ "$(hl_cache_stat "$(hl_tmpdir)/state/ctl.sock" ssd hit_streams)" -ge 3 ] ||
			hl_fail "$mode: the READs cut short were not streamed"
		hl_check_alive
		hl_target_stop # a crash, or an ASan report, fails here
		return
	fi
	hl_log "update_buffer $ub: racing READs took (round:ms)" \
		"$(sed -n 's/^round \([0-9]*\) ms /\1:/p' <<<"$out" | tr '\n' ' ')"
	racing=$(sed -n 's/^racing reads //p' <<<"$out")
	must=$(sed -n 's/^streamed //p' <<<"$out")
	reads=$(sed -n 's/^reads //p' <<<"$out")
	streams=$(hl_cache_stat "$sock" ssd hit_streams)
	hits=$(hl_cache_stat "$sock" ssd bytes_read_cache)
	hl_log "update_buffer $ub: $reads checked reads after the fills ($racing raced by writes)," \
		"hit_streams $streams, $hits bytes from the cache device"
	[ -n "$must" ] && [ "$streams" -ge "$must" ] && [ "$streams" -le "$reads" ] ||
		hl_fail "update_buffer $ub: hit_streams $streams, not between $must and $reads"
	hl_check_alive
	hl_target_stop
}

run 0
run 16M
# READs cut short (ABORT TASK, a closed connection) while 15 of their 16
# chunks are still out (40 ms apart): the task and its buffer must live
# until the last chunk is in and every queued PDU is sent or dropped.
run 16M 40 --abort
hl_log "PASS"
