#!/bin/bash
# write_trickle.sh - the write budget cannot be pinned by trickling Data-Out
# (issue 24 item 2). With a 64 MiB budget, four sessions from 127.0.0.1
# each start 16 WRITEs of 1 MiB whose data all comes by R2T and then send
# 512 valid bytes per R2T every 5 s: never silent for the 30 s "no data"
# close, never done. Before the fix they held the whole budget until they
# left; meanwhile a 4 KiB WRITE from another host got BUSY and a 64 KiB
# WRITE waited without R2T. Now:
# 1. one source holds at most half the budget: the attack's excess WRITEs
#    are refused (TASK SET FULL / BUSY to the attacker, counted as
#    source_capped), and 127.0.0.2's 4 KiB and 64 KiB WRITEs complete
#    within 5 s while the attack runs;
# 2. a WRITE whose data is not in 30 s + its size at 256 KiB/s after its
#    R2Ts went out (34 s for 1 MiB) closes its connection: every trickling
#    connection that held a WRITE is closed by then, counted as closed_slow,
#    and the budget comes back.
. "$(dirname "$0")/lib.sh"
hl_need python3
[ "$HL_TARGET" = tgt ] && hl_skip "the write budget is hotlund's"

hl_budget_target trickle

hl_spawn trickle "$tmp/trickle.log" python3 "$HOARD" --trickle 5 --portal "127.0.0.1:$port" \
	--target "$iqn" --conns 4 --cmds 16 --size 1M --source 127.0.0.1 --settle 3
trickle=$HL_LAST_PID
t0=$(date +%s)
hl_wait_grep "$tmp/trickle.log" '^READY' 30 || hl_fail "the trickle never settled: $(tail -3 "$tmp/trickle.log")"
ready=$(grep '^READY' "$tmp/trickle.log")
hl_log "$ready; held $(wb held_bytes) bytes"
held_cmds=$(sed -n 's/^READY.* held_cmds=\([0-9]*\).*/\1/p' <<<"$ready")
[ "$held_cmds" -ge 1 ] || hl_fail "no trickling WRITE was sent an R2T: $ready"

# another host writes while the attack holds what it may
python3 "$HOARD" --small --portal "127.0.0.1:$port" --target "$iqn" --source 127.0.0.2 \
	--bound 5 >"$tmp/small.log" 2>&1
rc=$?
cat "$tmp/small.log" >&2
[ "$rc" = 0 ] || hl_fail "another host's 4 KiB / 64 KiB WRITEs did not complete within 5 s"
held=$(wb held_bytes)
[ "${held:-0}" -le $((32 << 20)) ] ||
	hl_fail "one source holds $held bytes of the 64 MiB budget (at most half expected)"
capped=$(wb source_capped)
[ "${capped:-0}" -ge 1 ] || hl_fail "no WRITE counted as refused for its source's share ($capped)"
"$HL_BUILDDIR/hotlunctl" --socket "$sock" stats | grep 'write buffers' >&2

# every connection that held a WRITE is closed by its deadline (34 s after its R2T)
holders=$(sed -n 's/^READY.* holding=\([0-9]*\).*/\1/p' <<<"$ready")
for _ in $(seq 1 500); do
	[ "$(grep -c '^CLOSED' "$tmp/trickle.log")" -ge "$holders" ] && break
	sleep 0.1
done
grep '^CLOSED' "$tmp/trickle.log" >&2
n=$(grep -c '^CLOSED' "$tmp/trickle.log")
[ "$n" -ge "$holders" ] ||
	hl_fail "$n of $holders trickling connections closed $(($(date +%s) - t0)) s into the attack"
while read -r after; do
	python3 -c 'import sys; sys.exit(0 if 0 <= float(sys.argv[1]) <= 40 else 1)' "$after" ||
		hl_fail "a trickling connection was closed $after s after its first R2T (deadline 34 s)"
done < <(sed -n 's/^CLOSED .*held=[1-9][0-9]* after=\([0-9.]*\).*/\1/p' "$tmp/trickle.log")
grep -q 'below 256 KiB/s' "$HL_LOG" || hl_fail "the slow WRITEs' close was not logged"
[ "$(wb closed_slow)" -ge "$holders" ] || hl_fail "closed_slow $(wb closed_slow), $holders expected"
for _ in $(seq 1 50); do
	[ "$(wb held_bytes)" = 0 ] && break
	sleep 0.1
done
[ "$(wb held_bytes)" = 0 ] || hl_fail "held_bytes $(wb held_bytes) once the trickling connections closed"
hl_stop "$trickle"
hl_check_alive
hl_log "PASS"
