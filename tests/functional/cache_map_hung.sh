#!/bin/bash
# cache_map_hung.sh - the state file system stops answering (a hung NFS, a
# dying disk under /var/lib/hotlun): here the map's temporary file
# (state_dir/cache-ssd.map.tmp) is a FIFO nobody reads, so a map write
# blocks in its open. Every map write waited for it for ever: an attach on
# the control reactor (the reload, the control socket with it), the stop's
# final proof and save. Now:
#  1. a reload that adds a cached disk (its map write) is refused within the
#     bound, naming the disk and saying the map does not answer;
#  2. hotlunctl stats answers, the cached disk still serves a write;
#  3. the stop ends within its bounds, the log says the map write was
#     given up on;
#  4. the restart (the file system answers again) serves the LUN equal to
#     its origin (never stale);
#  5. a start whose map itself does not answer (a FIFO nobody writes: the
#     read at open blocks) fails within the bound, the log saying so (it
#     waited for ever before).
. "$(dirname "$0")/lib.sh"

hl_need python3 qemu-img qemu-io
hl_cache_front_prereqs
. "$(dirname "$0")/cache_dead_lib.sh"
T=$(hl_tmpdir)
dead_setup maphung "$T/none.conf"
head -c 16M /dev/urandom >"$T/o2.img" || hl_error "cannot write $T/o2.img"
cp "$T/none.conf" "$T/with.conf"
sed -i "s|^lun.0 = san$|&\nlun.1 = san2|" "$T/with.conf"
printf '\n[disk san2]\norigin = file:%s\ncache = ssd\n' "$T/o2.img" >>"$T/with.conf"
cp "$T/none.conf" "$T/live.conf"
fifo=$T/st/cache-ssd.map.tmp

# io CMD...: qemu-io commands on the cached disk (20 s at most)
io() {
	local c a=()
	for c in "$@"; do a+=(-c "$c"); done
	# shellcheck disable=SC2154 # url: dead_setup's (cache_dead_lib.sh)
	timeout 20 qemu-io -f raw "${a[@]}" "$url" >"$T/io.out" 2>&1 ||
		hl_fail "qemu-io $* failed: $(tail -n 3 "$T/io.out")"
}

start_held "$T/live.conf"
io 'read 0 64k' 'read 1M 64k' 'read 2M 64k'
# shellcheck disable=SC2154 # sock: dead_setup's
hl_cache_settle "$sock" ssd 1
for _ in $(seq 1 100); do # (EEXIST: a map write under way)
	mkfifo "$fifo" 2>/dev/null && break
	sleep 0.01
done
[ -p "$fifo" ] || hl_error "cannot make $fifo"

# ---- 1. a reload that adds a cached disk: refused within the bound
cp "$T/with.conf" "$T/live.conf"
t0=$(date +%s%N)
out=$(timeout 20 "$CTL" --socket "$sock" reload 2>&1) &&
	hl_fail "1. adding a cached disk with the map hung was accepted: $out"
ms=$(ms_since "$t0")
hl_log "1. the reload adding a cached disk, the map hung: refused in $ms ms: $out"
[ "$ms" -lt $((3 * BOUND)) ] || hl_fail "1. the refused reload took $ms ms (bound $BOUND ms)"
echo "$out" | grep -q 'disk san2' || hl_fail "1. the refusal does not name the disk: $out"
echo "$out" | grep -q 'does not answer' || hl_fail "1. the refusal does not say why: $out"
grep -q 'given up on' "$FRONT_LOG" ||
	hl_fail "1. the log does not say the map write was given up on: $(tail -n 5 "$FRONT_LOG")"
cp "$T/none.conf" "$T/live.conf"

# ---- 2. the control socket and the data path still answer
ts=$(date +%s%N)
timeout 5 "$CTL" --socket "$sock" stats --json >"$T/stats.out" 2>&1 ||
	hl_fail "2. hotlunctl stats failed: $(head -c 300 "$T/stats.out")"
hl_log "2. stats answered in $(ms_since "$ts") ms"
io 'write -P 0x5d 1M 64k'

# ---- 3. the stop: the final proof and the save's map writes do not answer either
t0=$(date +%s%N)
hl_stop "$FRONT_PID"
ms=$(ms_since "$t0")
hl_log "3. the stop, the map hung: $ms ms"
[ "$ms" -lt $((4 * BOUND)) ] || hl_fail "3. the stop took $ms ms with bounds of $BOUND ms"

# ---- 4. the file system answers again: the restart is never stale
rm -f "$fifo"
hl_front_start "$T/none.conf"
wait_cache_start
n=$(hl_stale_blocks "$url" "$T/o.img" 4096)
[ "$n" = 0 ] || hl_fail "4. $n block(s) differ from the origin after the restart"
hl_log "4. restarted ($(grep -o 'formatted\|warm restart' "$FRONT_LOG" | head -n 1)); 0 blocks differ"
hl_stop "$FRONT_PID"

# ---- 5. the map read at the start does not answer: the start fails within the bound
map=$T/st/cache-ssd.map
rm -f "$map"
mkfifo "$map" || hl_error "cannot make $map"
t0=$(date +%s%N)
HOTLUN_TEST_CACHE_DRAIN_MS=$BOUND hl_spawn hotlund "$T/start5.log" "$HL_HOTLUND" --config "$T/none.conf"
pid=$HL_LAST_PID
for _ in $(seq 1 $((BOUND / 10 * 5))); do
	hl_alive "$pid" || break
	sleep 0.01
done
ms=$(ms_since "$t0")
if hl_alive "$pid"; then
	hl_stop "$pid"
	hl_fail "5. the start with the map hung still runs after $ms ms: $(tail -n 3 "$T/start5.log")"
fi
grep -q 'did not end within' "$T/start5.log" ||
	hl_fail "5. the log does not say the map read did not end: $(tail -n 3 "$T/start5.log")"
hl_log "5. the start with the map hung: ended in $ms ms: $(grep -m1 'did not end within' "$T/start5.log")"
rm -f "$map"
exit 0
