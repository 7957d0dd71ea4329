#!/bin/bash
# cache_restore_rt.sh - the restore's loader holds the cache lock as a
# real-time thread when the system lets it (docs/cache-engine.md, "the
# cache lock during a full restore"), and says what to do when it does not:
#  1. hotlund started without CAP_SYS_NICE and with RLIMIT_RTPRIO 0 (what
#     a unit with RestrictRealtime=yes or without LimitRTPRIO= gives): a
#     warning when the restore starts that names LimitRTPRIO=1 and
#     RestrictRealtime=no, the end-of-restore line says "refused", the
#     restore still ends and nothing reads stale;
#  2. started as root (CAP_SYS_NICE): no warning, "held as a real-time
#     thread: yes", and once the restore is over no thread of hotlund is
#     real-time (the loader went back after every hold).
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need setpriv prlimit
[ "$(id -u)" = 0 ] || hl_skip "needs root (a thread with and without CAP_SYS_NICE)"

T=$(hl_tmpdir)
BS=4096
NBLK=16384
dd if=/dev/urandom of="$T/origin.img" bs=$BS count=$NBLK status=none || hl_error "dd"
hl_cache_front_one restore-rt "file:$T/origin.img" 96M 4K
restore_done() {
	local i
	for i in $(seq 1 300); do
		[ "$(stat_of restore_state)" = done ] && return 0
		sleep 0.1
	done
	hl_fail "the restore did not end: $(stat_of restore_state)"
}

hl_front_start "$T/hotlund.conf"
"$BENCH" --workload uniform --bs 4K --count 40000 --qd 16 --seed 3 --quiet \
	"$URL" >"$T/bench.out" 2>&1 || { cat "$T/bench.out" >&2; hl_fail "warm-up reads failed"; }
used=$(stat_of used_slots)
[ "$used" -gt 8000 ] || hl_fail "only $used blocks cached"
hl_cache_settle "$SOCK" ssd 2
hl_stop "$FRONT_PID"

# ---- 1. refused: the warning says what to do
HL_WRAPPER="setpriv --bounding-set=-sys_nice prlimit --rtprio=0:0" hl_front_start "$T/hotlund.conf"
restore_done
grep "cannot hold the cache lock as a real-time thread" "$FRONT_LOG" >"$T/warn.txt" ||
	hl_fail "no warning when real-time is refused: $(grep -i 'real-time' "$FRONT_LOG")"
grep -q "LimitRTPRIO=1 and RestrictRealtime=no" "$T/warn.txt" ||
	hl_fail "the warning does not say what to do: $(cat "$T/warn.txt")"
grep -q "held as a real-time thread: no, refused by the system" "$FRONT_LOG" ||
	hl_fail "the end-of-restore line does not say it was refused"
hl_log "1. refused: $(sed 's/.*cache ssd: //' "$T/warn.txt")"
restored=$(stat_of restore_restored)
[ "$restored" -gt $((used / 2)) ] || hl_fail "only $restored of $used blocks restored"
stale=$(hl_stale_blocks "$URL" "$T/origin.img" $BS)
[ "$stale" = 0 ] || hl_fail "$stale block(s) read back stale"
hl_stop "$FRONT_PID"

# ---- 2. allowed: real-time while it holds the lock, never after
hl_front_start "$T/hotlund.conf"
restore_done
grep -q "cannot hold the cache lock as a real-time thread" "$FRONT_LOG" &&
	hl_fail "warned although real-time is allowed"
grep -q "held as a real-time thread: yes" "$FRONT_LOG" ||
	hl_fail "the loader was not real-time: $(grep -i 'real-time' "$FRONT_LOG")"
rt=0
for t in /proc/"$FRONT_PID"/task/*/stat; do
	pol=$(sed 's/.*) //' "$t" | awk '{ print $39 }') # field 41, policy
	[ "$pol" = 0 ] || rt=$((rt + 1))
done
[ "$rt" = 0 ] || hl_fail "$rt thread(s) of hotlund still real-time after the restore"
hl_log "2. allowed: $(grep -o 'held as a real-time thread: [^)]*' "$FRONT_LOG"), no thread real-time after it"
stale=$(hl_stale_blocks "$URL" "$T/origin.img" $BS)
[ "$stale" = 0 ] || hl_fail "$stale block(s) read back stale"
hl_stop "$FRONT_PID"
hl_log "PASS"
