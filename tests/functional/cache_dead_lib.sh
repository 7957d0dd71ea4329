# cache_dead_lib.sh - sourced (after lib.sh) by the tests of a cache device
# that stops answering (cache_dead_stop.sh, cache_dead_remove.sh). They set
# T (the test's folder: origin $T/o.img, hold file $T/hold) and BENCH
# (hl_cache_front_prereqs), then call dead_setup (url, BOUND, ...).
# shellcheck disable=SC2154 # url, T, BOUND, BENCH, FRONT_LOG: the sourcing test's

# dead_setup NAME CONF: the test's set-up: hotlunctl in CTL, the drain bound
# BOUND (1000 ms), a 64 MiB random origin $T/o.img, a free port, state in
# $T/st (sock), target $HL_IQN_PREFIX:NAME (IQN, url), and CONF: disk "san"
# behind a 64 MiB cache "ssd" of 4K blocks on $T/cache.img, every miss
# admitted (not started).
dead_setup() {
	CTL=$HL_BUILDDIR/hotlunctl
	IQN=$HL_IQN_PREFIX:$1
	BOUND=1000
	head -c 64M /dev/urandom >"$T/o.img" || hl_error "cannot write $T/o.img"
	port=$(hl_free_port)
	mkdir -p "$T/st"
	sock=$T/st/ctl.sock
	url=iscsi://127.0.0.1:$port/$IQN/0
	hl_cache_front_conf "$2" "$port" "$T/st" "$IQN" "file:$T/o.img" \
		"device=$T/cache.img" size=64M block_size=4K admission=always
}

# reads SECONDS RANGE: random reads at QD8 over the first RANGE of the LUN.
reads() {
	"$BENCH" --quiet --read 100 --qd 8 --range "$2" --time "$1" "$url" >"$T/bench.out" 2>&1 ||
		hl_fail "reads failed: $(tail -n 3 "$T/bench.out")"
}

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# start_held CONF [VAR=VALUE...]: hl_front_start with record syncs held while
# $T/hold exists, the drain bound BOUND and the extra test knobs given, for
# this start only. The abandoned cache is never freed (its thread may still
# use it), so LeakSanitizer's exit check is off for this daemon.
start_held() {
	local conf=$1 asan=${ASAN_OPTIONS:-} kv
	shift
	export HOTLUN_TEST_CACHE_META_HOLD=$T/hold HOTLUN_TEST_CACHE_DRAIN_MS=$BOUND
	for kv in "$@"; do export "${kv?}"; done
	export ASAN_OPTIONS=${asan:+$asan:}detect_leaks=0
	hl_front_start "$conf"
	unset HOTLUN_TEST_CACHE_META_HOLD HOTLUN_TEST_CACHE_DRAIN_MS
	for kv in "$@"; do unset "${kv%%=*}"; done
	if [ -n "$asan" ]; then export ASAN_OPTIONS=$asan; else unset ASAN_OPTIONS; fi
}

# wait_cache_start: until the log says whether the cache was formatted or
# restarted warm (10 s at most).
wait_cache_start() {
	local _
	for _ in $(seq 1 100); do
		grep -q 'formatted\|warm restart' "$FRONT_LOG" && return 0
		sleep 0.1
	done
}

# restart_formats STEP CONF: start again; the cache must be formatted (its
# records not trusted) and no block may differ from the origin.
restart_formats() {
	local step=$1 n
	hl_front_start "$2"
	wait_cache_start
	grep -q 'cache ssd: .*formatted' "$FRONT_LOG" ||
		hl_fail "$step. the restart did not format the device: $(grep 'cache ssd' "$FRONT_LOG" | head -5)"
	n=$(hl_stale_blocks "$url" "$T/o.img" 4096)
	[ "$n" = 0 ] || hl_fail "$step. $n block(s) differ from the origin after the restart"
	hl_log "$step. the restart formatted the cache; 0 blocks differ from the origin"
}
