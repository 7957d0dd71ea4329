#!/bin/bash
# write_budget.sh - WRITE data that initiators start and never finish is held
# within [global] write_buffer_limit (issue 19, item 2). Six connections from
# three addresses (one host may hold only half the budget, issue 24) each
# start 16 WRITEs of 12 MiB with immediate and unsolicited data, answer every
# R2T but withhold each command's last 4 KiB, and hold. With a 64 MiB budget
# (16 MiB per connection) hotlund's RSS grows by less than budget + margin,
# R2Ts never ask for more than the budget, the excess WRITEs get TASK SET
# FULL, and a well-behaved WRITE from a third address that needs R2Ts waits
# (no R2T) instead of adding memory. Once the hoarders disconnect that WRITE
# completes, the counters go back to 0 and a libiscsi client writes normally.
. "$(dirname "$0")/lib.sh"
hl_need python3
[ "$HL_TARGET" = tgt ] && hl_skip "the write budget is hotlund's"

hl_budget_target wb

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$HL_PID/status"; }
stats() { "$HL_BUILDDIR/hotlunctl" --socket "$sock" stats --json; }
rss0=$(rss_kib)
hl_spawn hoard "$tmp/hoard.log" python3 "$HOARD" --portal "127.0.0.1:$port" --target "$iqn" \
	--conns 6 --cmds 16 --size 12M --source 127.0.0.1,127.0.0.3,127.0.0.4
hoard=$HL_LAST_PID
hl_wait_grep "$tmp/hoard.log" '^READY' 90 || hl_fail "the hoarders never settled: $(tail -3 "$tmp/hoard.log")"
hl_log "$(grep '^READY' "$tmp/hoard.log")"
rss1=$(rss_kib)
grow=$(((rss1 - rss0) / 1024))
hl_log "hotlund VmRSS ${rss0} KiB -> ${rss1} KiB (+${grow} MiB) with 6 x 16 x 12 MiB unfinished WRITEs"
# 64 MiB budget + 32 MiB for receive buffers, kept buffers and the rest
[ "$grow" -lt 96 ] || hl_fail "VmRSS grew by $grow MiB, more than the 64 MiB budget + 32 MiB"
read -r r2t_bytes tsf held < <(sed -n 's/^READY.* r2t_bytes=\([0-9]*\) task_set_full=\([0-9]*\) .*held_cmds=\([0-9]*\).*/\1 \2 \3/p' "$tmp/hoard.log")
[ "$r2t_bytes" -le $((64 << 20)) ] || hl_fail "R2Ts asked for $r2t_bytes bytes, more than the budget"
[ "$tsf" -gt 0 ] || hl_fail "no WRITE was answered TASK SET FULL"

# a well-behaved WRITE that needs R2Ts waits for budget instead of getting it
hl_spawn probe "$tmp/probe.log" python3 "$HOARD" --probe --portal "127.0.0.1:$port" \
	--target "$iqn" --wait 3 --source 127.0.0.2
probe=$HL_LAST_PID
hl_wait_grep "$tmp/probe.log" 'WAITING\|R2T\|TASK SET FULL\|STATUS' 60 || hl_fail "probe: $(cat "$tmp/probe.log")"
grep -q '^WAITING' "$tmp/probe.log" || hl_fail "a WRITE was sent R2Ts beyond the budget: $(cat "$tmp/probe.log")"

held_b=$(wb held_bytes)
[ -n "$held_b" ] || hl_fail "stats has no write_buffers"
[ "$held_b" -le $((64 << 20)) ] || hl_fail "held_bytes $held_b above the limit"
[ "$(wb peak_bytes)" -le $((64 << 20)) ] || hl_fail "peak_bytes above the limit"
[ "$(wb task_set_full)" -ge "$tsf" ] || hl_fail "task_set_full counter below what the hoarders saw"
[ "$(wb waiting)" -ge 1 ] || hl_fail "no WRITE counted as waiting for R2T"
[ "$(wb r2t_deferred)" -ge 1 ] || hl_fail "r2t_deferred not counted"
"$HL_BUILDDIR/hotlunctl" --socket "$sock" stats | grep 'write buffers' >&2

# the hoarders go: their budget comes back and the waiting WRITE completes
hl_stop "$hoard"
hl_wait_grep "$tmp/probe.log" '^STATUS' 60 || hl_fail "the waiting WRITE did not complete: $(cat "$tmp/probe.log")"
grep -q '^STATUS 0x00' "$tmp/probe.log" || hl_fail "probe: $(cat "$tmp/probe.log")"
hl_stop "$probe"
for i in $(seq 1 100); do
	[ "$(wb held_bytes)" = 0 ] && [ "$(wb waiting)" = 0 ] && break
	sleep 0.2
done
[ "$(wb held_bytes)" = 0 ] || hl_fail "held_bytes $(wb held_bytes) after every writer left"
[ "$(wb waiting)" = 0 ] || hl_fail "waiting $(wb waiting) after every writer left"

# and an ordinary client writes
BENCH=$HL_BUILDDIR/hotlun-bench
if [ -x "$BENCH" ]; then
	"$BENCH" --quiet --workload uniform --bs 1M --qd 8 --read 0 --count 64 --seed 3 \
		"iscsi://127.0.0.1:$port/$iqn/0" >"$tmp/bench.out" 2>&1 ||
		hl_fail "libiscsi writes after the hoarders left: $(tail -3 "$tmp/bench.out")"
fi
[ "$(wb held_bytes)" = 0 ] || hl_fail "held_bytes $(wb held_bytes) after the writes"

# live: the limit changes through the control socket, and what get shows, set takes back
"$HL_BUILDDIR/hotlunctl" --socket "$sock" / set write_buffer_limit=128M >/dev/null ||
	hl_fail "set write_buffer_limit=128M"
[ "$(wb limit)" = $((128 << 20)) ] || hl_fail "limit $(wb limit) after set 128M"
[ "$(wb conn_limit)" = $((32 << 20)) ] || hl_fail "conn_limit $(wb conn_limit) after set 128M"
shown=$("$HL_BUILDDIR/hotlunctl" --socket "$sock" / get write_buffer_limit | sed -n "s/.*write_buffer_limit[^0-9]*\([0-9]*\).*/\1/p")
[ "$shown" = $((128 << 20)) ] || hl_fail "get / shows write_buffer_limit '$shown'"
"$HL_BUILDDIR/hotlunctl" --socket "$sock" / set write_buffer_limit="$shown" >/dev/null ||
	hl_fail "set write_buffer_limit=$shown (what get shows) refused"
hl_check_alive
hl_log "PASS"
