#!/bin/bash
# origin_iscsi_isid.sh - a restarted front fences what its dead run left at
# the SAN: its sessions come back with the same ISIDs, so the SAN reinstates
# the old ones (RFC 7143 6.3.5) instead of keeping them beside new I_T
# nexuses. The SAN is a first hotlund (file LUN); the front reaches it
# through hold_proxy.py, which plays a host that dies without a FIN: when
# the front is killed (SIGKILL) its SAN-side connections stay up, as they
# would after a power loss, and the SAN keeps those sessions.
#  1. the front runs I/O on both reactors: the SAN has its data sessions and
#     its poll session, under ISIDs 80xxxxxx....
#  2. SIGKILL, restart: before any I/O through the new front, its open
#     reinstated every session of the dead run (the SAN logs "session
#     reinstatement" and lists none of the old TSIHs), and the new sessions
#     use the same ISIDs as the old ones.
#  3. a clean stop and start: nothing is left to sweep (no reinstatement
#     logged by the new open beyond its own ISIDs' probe).
#  4. a second front on the same disk name and state_dir while the first
#     runs (hotlund started twice): another slot, other ISIDs, so neither
#     reinstates the other's sessions.
#  5. a sweep that fails (HOTLUN_TEST_ISID_SWEEP_FAILS=1): no data session
#     logs in until a retry in the background has fenced the dead run's
#     sessions; a read the cache misses waits for it, then succeeds.
# On main (random ISIDs per process) step 2 fails: the old sessions stay at
# the SAN next to the new ones and nothing is reinstated. (A gateway keeps
# random ISIDs: its reservation fences a dead run; gateway_san.sh.)
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-io
CTL=$HL_BUILDDIR/hotlunctl
T=$(hl_tmpdir)

hl_target_start --size 16M
SAN_PID=$HL_PID SAN_LOG=$HL_LOG
SAN_SOCK=$T/state/ctl.sock
INI=$HL_IQN_PREFIX:isid-front

PROXY_PORT=$(hl_free_port)
hl_spawn hold_proxy "$T/proxy.log" python3 "$(dirname "$0")/hold_proxy.py" "$PROXY_PORT" 127.0.0.1 "$HL_PORT"
PROXY_PID=$HL_LAST_PID
hl_wait_grep "$T/proxy.log" ready 10 || hl_fail "hold_proxy did not start: $(cat "$T/proxy.log")"
ORIGIN="iscsi://127.0.0.1:$PROXY_PORT/$HL_IQN/$HL_LUN?initiator=$INI&timeout=5"

# front CONF PORT STATE: a cached front of the SAN's LUN as disk "san".
front_conf() {
	mkdir -p "$3"
	truncate -s 16M "$T/cache-$2.img"
	hl_cache_front_conf "$1" "$2" "$3" "$HL_IQN_PREFIX:isid-front-$2" "$ORIGIN" \
		device="$T/cache-$2.img" size=16M block_size=64K admission=always
}
PORT=$(hl_free_port)
front_conf "$T/front.conf" "$PORT" "$T/fst"
URL=iscsi://127.0.0.1:$PORT/$HL_IQN_PREFIX:isid-front-$PORT/0

# san_sessions: "TSIH ISID" of the front's sessions at the SAN, sorted by ISID.
san_sessions() {
	"$CTL" --socket "$SAN_SOCK" ls /sessions 2>/dev/null |
		sed -n "s/^[^0-9]*\([0-9][0-9]*\)[^0-9].*$INI (isid \([0-9a-fx]*\)).*/\1 \2/p" | sort -k2
}
isids() { san_sessions | awk '{print $2}' | tr '\n' ' '; }
reinstated() { grep -c 'closing the session: session reinstatement' "$SAN_LOG"; }

# load: reads and writes through the front on both of its reactors.
load() {
	"$BENCH" --quiet --read 50 --qd 8 --sessions 2 --range 8M --time 2 "$URL" >"$T/load.out" 2>&1 ||
		hl_fail "load through the front failed: $(tail -n 3 "$T/load.out")"
}

# ---- 1. the first run: data sessions on both reactors, and the poll
hl_front_start "$T/front.conf"
load
before=$(san_sessions)
hl_log "1: the front's sessions at the SAN (TSIH ISID): $(tr '\n' ',' <<<"$before")"
n_before=$(wc -l <<<"$before")
[ "$n_before" -ge 3 ] || hl_fail "1: expected 2 data sessions and the poll at the SAN, got: $before"

# ---- 2. SIGKILL: the SAN keeps the sessions (hold_proxy), the restart reinstates them
kill -KILL "$FRONT_PID"
wait "$FRONT_PID" 2>/dev/null
hl_forget "$FRONT_PID"
[ "$(san_sessions)" = "$before" ] || hl_fail "2: the SAN dropped the dead front's sessions by itself: $(san_sessions)"
r0=$(reinstated)
hl_front_start "$T/front.conf"
# every old session is gone from the SAN before any I/O through the new front
# (the SAN ends a reinstated session on its reactor: wait for that, briefly)
old_gone() {
	local tsih isid now
	now=$(san_sessions)
	while read -r tsih isid; do
		grep -q "^$tsih $isid$" <<<"$now" && return 1
	done <<<"$before"
	return 0
}
for _ in $(seq 1 50); do old_gone && break; sleep 0.1; done
old_gone || hl_fail "2: the dead front's sessions are still at the SAN after the restart: $(san_sessions | tr '\n' ',')"
r1=$(reinstated)
[ $((r1 - r0)) -ge "$n_before" ] || hl_fail "2: $((r1 - r0)) reinstatements for $n_before old sessions"
# at least every session it had (records are written ahead: ISC_ISID_AHEAD more qualifiers)
swept=$(sed -n 's/.*logged in again as \([0-9]*\) session(s) of a previous run.*/\1/p' "$FRONT_LOG" | head -n 1)
[ -n "$swept" ] && [ "$swept" -ge "$n_before" ] ||
	hl_fail "2: the new front's open did not sweep the dead run's ISIDs: $(grep -i isid "$FRONT_LOG")"
hl_log "2: the SAN reinstated $((r1 - r0)) session(s) at the restart: $(grep 'previous run' "$FRONT_LOG")"
load
after=$(isids)
[ "$after" = "$(awk '{print $2}' <<<"$before" | tr '\n' ' ')" ] ||
	hl_fail "2: the new run's ISIDs ($after) are not the old run's ($(awk '{print $2}' <<<"$before" | tr '\n' ' '))"
hl_log "2: same ISIDs after the restart: $after"

# ---- 3. a clean stop: the next open has nothing of the last run to sweep
hl_stop "$FRONT_PID"
hl_front_start "$T/front.conf"
grep -q "previous run" "$FRONT_LOG" && hl_fail "3: a sweep after a clean stop: $(grep 'previous run' "$FRONT_LOG")"
hl_log "3: clean stop, restart: no sweep"

# ---- 4. hotlund started twice on one state_dir: the second takes another slot
PORT2=$(hl_free_port)
# (its own portal, control socket and cache; the same disk name, SAN LUN and state_dir)
sed "s/127.0.0.1:$PORT/127.0.0.1:$PORT2/; s/isid-front-$PORT/isid-front-$PORT2/; s|cache-$PORT.img|cache-$PORT2.img|; s|^control_socket = .*|control_socket = $T/fst/ctl2.sock|; s/\bssd\b/ssd2/g" \
	"$T/front.conf" >"$T/front2.conf"
truncate -s 16M "$T/cache-$PORT2.img"
FIRST_PID=$FRONT_PID FIRST_LOG=$FRONT_LOG
load
r0=$(reinstated)
hl_front_start "$T/front2.conf"
grep -q "(slot 1)" "$FRONT_LOG" || hl_fail "4: the second front did not take slot 1: $(grep -i isid "$FRONT_LOG")"
"$BENCH" --quiet --read 50 --qd 8 --sessions 2 --range 8M --time 2 \
	"iscsi://127.0.0.1:$PORT2/$HL_IQN_PREFIX:isid-front-$PORT2/0" >"$T/load2.out" 2>&1 ||
	hl_fail "4: load through the second front failed: $(tail -n 3 "$T/load2.out")"
load
[ "$(reinstated)" = "$r0" ] || hl_fail "4: two live fronts reinstated each other's sessions"
hl_log "4: two live fronts, $(san_sessions | wc -l) sessions at the SAN, no reinstatement"
hl_stop "$FRONT_PID"

# ---- 5. a sweep that fails (as with a SAN slower than the login timeout while it ends
# the dead run's commands): no data session logs in, so nothing is read from the SAN
# (into the cache) or written there, until a retry in the background fences them
FRONT_PID=$FIRST_PID FRONT_LOG=$FIRST_LOG
load
kill -KILL "$FRONT_PID"
wait "$FRONT_PID" 2>/dev/null
hl_forget "$FRONT_PID"
r0=$(reinstated)
HOTLUN_TEST_ISID_SWEEP_FAILS=1 hl_front_start "$T/front.conf"
grep -q "a previous run's sessions may still write at the SAN" "$FRONT_LOG" ||
	hl_fail "5: no word of the failed sweep: $(grep -i 'fence\|previous run' "$FRONT_LOG")"
# a read the cache cannot hold (the load stayed under 8M): it waits for the fence
timeout 20 qemu-io -r -f raw -c "read 12M 64k" "$URL" >"$T/q5.out" 2>&1 ||
	hl_fail "5: a read after the retried sweep failed: $(tail -n 3 "$T/q5.out")"
fenced=$(grep -n "the previous run's sessions are fenced (try 2)" "$FRONT_LOG" | head -n 1 | cut -d: -f1)
[ -n "$fenced" ] || hl_fail "5: the sweep was not retried: $(grep -i 'fence\|previous run' "$FRONT_LOG")"
first=$(grep -n "session [0-9]* \(logged in\|restored\)" "$FRONT_LOG" | head -n 1 | cut -d: -f1)
[ -n "$first" ] && [ "$first" -gt "$fenced" ] ||
	hl_fail "5: a data session logged in (log line ${first:-none}) before the fence (line $fenced)"
[ "$(reinstated)" -gt "$r0" ] || hl_fail "5: the retry reinstated nothing at the SAN"
hl_log "5: sweep failed once, retried: $(sed -n "${fenced}p" "$FRONT_LOG" | cut -c1-140); first data session after it"
hl_stop "$FRONT_PID"
hl_stop "$PROXY_PID"
hl_stop "$SAN_PID"
hl_log PASS
