#!/bin/bash
# bench_verify.sh - hotlun-bench --verify catches corrupted blocks.
#
# Fill a range of a LUN with checked data, read it back clean, run a mixed
# verified load, then damage two blocks behind the target's back (in its
# backing file: one gets the data of another LBA, one gets garbage) and check
# that a verify read pass reports exactly those LBAs and exits 1. Against
# hotlund, also restart the target under a verified load.
. "$(dirname "$0")/bench_common.sh"
hl_need dd

T=$(hl_tmpdir)
hl_target_start --size 64M
hl_log "target: $HL_TARGET at $HL_URL"

# 8 MiB = 2048 blocks of 4 KiB; the LUN has 512-byte LBAs on both targets.
COUNT=2048
bench_run "fill with pattern" 0 "$T/fill.out" --workload seq --read 0 --verify --range 8M \
	--count $COUNT --qd 32 "$HL_URL"
[ "$(bench_field "$T/fill.out" writes)" = $COUNT ] || hl_fail "fill did not write $COUNT blocks"

bench_run "clean read-back" 0 "$T/read1.out" --workload seq --read 100 --verify --range 8M \
	--count $COUNT --qd 32 "$HL_URL"
grep -q "verify: $COUNT blocks checked, 0 mismatches" "$T/read1.out" ||
	hl_fail "read-back did not check $COUNT blocks: $(cat "$T/read1.out")"

bench_run "mixed verified load" 0 "$T/mixed.out" --workload hotset:80/20 --read 60 --bs 4K,16K \
	--verify --range 8M --time 2 --qd 16 --sessions 2 "$HL_URL"
[ "$(bench_field "$T/mixed.out" verify_errors)" = 0 ] || hl_fail "mixed load reported mismatches"
[ "$(bench_field "$T/mixed.out" writes)" -gt 0 ] || hl_fail "mixed load wrote nothing"

# 1 and 2 MiB commands: on hotlund a 1 MiB command's data buffer is half of
# a 2 MiB huge-page chunk (iscsi/buf.c), a 2 MiB one plain pages; any
# overlap or early reuse of a piece shows as mismatches here.
bench_run "large verified load" 0 "$T/large.out" --workload uniform --read 50 --bs 1M,2M \
	--verify --range 8M --time 2 --qd 8 "$HL_URL"
[ "$(bench_field "$T/large.out" verify_errors)" = 0 ] || hl_fail "large load reported mismatches"
[ "$(bench_field "$T/large.out" reads)" -gt 0 ] || hl_fail "large load read nothing"

# The range is whole again (every block holds a valid pattern). Damage it:
# LBA 8000 (4 KiB block 1000) gets a copy of LBA 800, LBA 12008 gets garbage.
dd if="$HL_DISK" of="$T/lba800" bs=512 skip=800 count=8 status=none || hl_error "dd read"
dd if="$T/lba800" of="$HL_DISK" bs=512 seek=8000 count=8 conv=notrunc,fsync status=none ||
	hl_error "dd write"
head -c 512 /dev/urandom >"$T/junk"
dd if="$T/junk" of="$HL_DISK" bs=512 seek=12008 count=1 conv=notrunc,fsync status=none ||
	hl_error "dd write"

bench_run "verify after corruption" 1 "$T/read2.out" --workload seq --read 100 --verify \
	--range 8M --count $COUNT --qd 32 "$HL_URL"
grep -q "MISMATCH lba=8000 .*data of another LBA.*holds the data of lba 800" "$T/read2.out.err" ||
	hl_fail "misdirected block at LBA 8000 not reported: $(cat "$T/read2.out.err")"
grep -q "MISMATCH lba=12008 .*no verify pattern" "$T/read2.out.err" ||
	hl_fail "garbage at LBA 12008 not reported: $(cat "$T/read2.out.err")"
[ "$(bench_field "$T/read2.out" verify_errors)" = 2 ] ||
	hl_fail "expected exactly 2 mismatches: $(tail -n 1 "$T/read2.out")"

# A read-only verify of blocks nobody wrote is a failure too (all zeroes).
bench_run "unwritten blocks fail a read-only verify" 1 "$T/zero.out" --workload seq --read 100 \
	--verify --offset 32M --range 1M --count 16 "$HL_URL"
grep -q "zeroes (never written)" "$T/zero.out.err" || hl_fail "zeroes not reported"

# hotlund only: the target restarts under a verified mixed load (on a range
# away from the damaged blocks). libiscsi reconnects, UNIT ATTENTION is
# retried, and no block may come back wrong.
if [ "$HL_TARGET" != tgt ]; then
	"$HL_BENCH" --quiet --workload uniform --read 50 --verify --offset 16M --range 8M \
		--time 5 --qd 16 "$HL_URL" >"$T/restart.out" 2>"$T/restart.out.err" &
	bpid=$!
	sleep 1.5
	hl_target_restart
	wait $bpid
	rc=$?
	[ $rc = 0 ] || hl_fail "verified load across a restart: status $rc: $(cat "$T/restart.out.err")"
	[ "$(bench_field "$T/restart.out" verify_errors)" = 0 ] || hl_fail "mismatches across a restart"
	[ "$(bench_field "$T/restart.out" ios)" -gt 1000 ] || hl_fail "no I/O across the restart"
	hl_log "ok: verified load across a target restart: $(tail -n 1 "$T/restart.out")"
	hl_check_alive
fi
hl_target_stop
exit 0
