# tests/functional/gateway_lib.sh - sourced by the two-gateway tests
# (gateway_rbd.sh, gateway_san.sh) after lib.sh: two hotlund gateways on one
# origin, their configuration, and the scenarios both run (docs/gateways.md).
# The caller sets T, IQN, BENCH (hl_cache_front_prereqs), GW_ORIGIN (the
# origin URI) and GW_DISK_EXTRA (lines added to [disk san]), calls gw_setup,
# then gw_scenarios, then checks the failback ($GW_WARM: what the gateway
# that got the disk back kept, and why) its own way and calls gw_no_stale.
# GW_FREEZE_CLOCKS (optional): how the frozen gateway of scenario 3 sees its
# clocks when it is thawed (tests/functional/clock_shim.c): "mono": its
# CLOCK_MONOTONIC stood still (a system suspend), "all": MONOTONIC and
# BOOTTIME stood still and REALTIME was stepped forward (a paused VM whose
# time the hypervisor's tools corrected); unset: they ran on (SIGSTOP).

declare -A PORT PID SOCK
url() { echo "iscsi://127.0.0.1:${PORT[$1]}/$IQN/0"; }

# gw_setup: the two gateways' configurations (gateway = 1 | 2, gateways = 1,2)
gw_setup() {
	local g st
	PORT[1]=$(hl_free_port)
	PORT[2]=$(hl_free_port)
	while [ "${PORT[2]}" = "${PORT[1]}" ]; do PORT[2]=$(hl_free_port); done
	for g in 1 2; do
		st=$T/gw$g
		mkdir -p "$st"
		truncate -s 96M "$st/cache.img"
		SOCK[$g]=$st/ctl.sock
		hl_cache_front_conf "$st/hotlund.conf" "${PORT[$g]}" "$st" "$IQN" "$GW_ORIGIN" \
			device="$st/cache.img" size=96M block_size=64K admission=always
		[ -n "${GW_DISK_EXTRA:-}" ] && sed -i "s|^cache = ssd$|&\n$GW_DISK_EXTRA|" "$st/hotlund.conf"
		sed -i "s|^threads = 2$|&\ngateway = $g\ngateways = 1,2|" "$st/hotlund.conf"
	done
}

# stale_blocks A B: 64 KiB blocks that differ between two images
stale_blocks() {
	python3 - "$1" "$2" <<'PY'
import sys
a, b = open(sys.argv[1], 'rb'), open(sys.argv[2], 'rb')
n = 0
while True:
    x, y = a.read(65536), b.read(65536)
    if not x and not y:
        break
    n += x != y
print(n)
PY
}

# gw_clock_shim: build the clock shim for gateway 1 (GW_FREEZE_CLOCKS set)
gw_clock_shim() {
	[ -n "${GW_FREEZE_CLOCKS:-}" ] || return 0
	${CC:-cc} -Wall -Wextra -Werror -shared -fPIC -O2 -o "$T/clock_shim.so" \
		"$HL_SRCDIR/tests/functional/clock_shim.c" -ldl -lpthread ||
		hl_error "cannot build the clock shim (${CC:-cc})"
	head -c 8 /dev/zero >"$T/clock_shim.off"
}
# gw_stopped PID: wait until every thread of PID is stopped (SIGSTOP)
gw_stopped() {
	local i f st all
	for i in $(seq 1 200); do
		all=1
		for f in /proc/"$1"/task/*/stat; do
			st=$(sed 's/.*) \(.\).*/\1/' "$f" 2>/dev/null) || continue
			[ "$st" = T ] || all=0
		done
		[ $all = 1 ] && return 0
		sleep 0.01
	done
	hl_fail "process $1 did not stop"
}
# gw_clock_freeze NS: gateway 1 (stopped) sees NS more nanoseconds stand still
gw_clock_freeze() {
	python3 - "$T/clock_shim.off" "$1" <<-'PY'
	import os, struct, sys
	fd = os.open(sys.argv[1], os.O_RDWR)
	old = struct.unpack('=q', os.pread(fd, 8, 0))[0]
	os.pwrite(fd, struct.pack('=q', old + int(sys.argv[2])), 0)
	PY
}
start_gw() {
	if [ "$1" = 1 ] && [ -n "${GW_FREEZE_CLOCKS:-}" ]; then
		head -c 8 /dev/zero >"$T/clock_shim.off" # a new process: its clocks run true
		# an ASan hotlund aborts at start unless its runtime is the first
		# preload ("ASan runtime does not come first"); it then passes the
		# clock calls on to the shim
		local rt=
		hl_sanitized && rt=$(ldd "$HL_BUILDDIR/hotlund" | awk '/libasan/ { print $3 }')
		export LD_PRELOAD=${rt:+$rt:}$T/clock_shim.so HL_CLOCK_SHIM=$T/clock_shim.off
		[ "$GW_FREEZE_CLOCKS" = all ] && export HL_CLOCK_SHIM_BOOT=1
	fi
	hl_start_hotlund "$T/gw$1/hotlund.conf"
	unset LD_PRELOAD HL_CLOCK_SHIM HL_CLOCK_SHIM_BOOT
	PID[$1]=$HL_PID
	eval "LOG$1=\$HL_LOG"
}
# own G KEY: a field of gateway G's view of disk san's ownership
own() {
	local out
	out=$("$CTL" --socket "${SOCK[$1]}" stats --json 2>/dev/null) || { echo "?"; return; }
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])["disks"]["san"]["ownership"][sys.argv[2]])' \
		"$out" "$2" 2>/dev/null || echo "?"
}
# wait_standby G OWNER SECONDS: until gateway G is a standby that saw gateway OWNER own the image
# (its first look at the cluster comes once it runs: a fixed sleep is too short on a loaded host)
wait_standby() {
	local i
	for i in $(seq 1 $(($3 * 10))); do
		[ "$(own "$1" state)" = standby ] && [ "$(own "$1" alua)" = standby ] &&
			[ "$(own "$1" owner)" = "$2" ] && return 0
		sleep 0.1
	done
	hl_fail "gateway $1 is not a standby of gateway $2 after $3 s: $(own "$1" state) $(own "$1" alua) owner $(own "$1" owner)"
}
# wait_owner G SECONDS: until gateway G owns the image
wait_owner() {
	local i
	for i in $(seq 1 $(($2 * 10))); do
		[ "$(own "$1" state)" = owner ] && [ "$(own "$1" alua)" = active/optimized ] && return 0
		sleep 0.1
	done
	hl_fail "gateway $1 does not own the image after $2 s: $(own "$1" state), last: $(own "$1" last)"
}
# gw_rewrite_tenth G: 1% of the image (640 KiB in 10 places, 64 KiB each,
# 6 MiB apart) rewritten through gateway G, and the same in $T/want.img.
gw_rewrite_tenth() {
	local k off
	for k in 0 1 2 3 4 5 6 7 8 9; do
		off=$((k * 6 * 1024 * 1024 + 4096))
		qemu-io -f raw -c "write -P 0x$((k + 30)) $off 64k" "$(url "$1")" >/dev/null 2>&1 ||
			hl_fail "write through gateway $1"
		python3 - "$T/want.img" "$off" "$((k + 30))" <<-'PY'
	import sys
	with open(sys.argv[1], 'r+b') as f:
	    f.seek(int(sys.argv[2]))
	    f.write(bytes([int(sys.argv[3], 16)]) * 65536)
	PY
	done
}

field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2"; }
# bench NAME SECONDS FIRST OTHER: verified load through both paths (FIRST's portal first)
bench_start() {
	"$BENCH" --verify --quiet --read 60 --qd 8 --bs 64K --range 48M --time "$2" \
		--path-timeout 2 --path "127.0.0.1:${PORT[$4]}" "$(url "$3")" \
		>"$T/$1.out" 2>"$T/$1.err" &
	BENCH_PID=$!
	HL_PIDS+=("$BENCH_PID")
	HL_PID_NAMES+=(hotlun-bench)
}
bench_check() {
	wait "$BENCH_PID"
	local brc=$?
	hl_forget "$BENCH_PID"
	local sum
	sum=$(tail -n 1 "$T/$1.out")
	hl_log "$1: $sum"
	grep "^path" "$T/$1.err" | head -20 >&2
	[ $brc = 0 ] || { tail -20 "$T/$1.err" >&2; hl_fail "$1: hotlun-bench exited $brc"; }
	[ "$(field errors "$sum")" = 0 ] || { tail -20 "$T/$1.err" >&2; hl_fail "$1: I/O errors: $sum"; }
	[ "$(field verify_errors "$sum")" = 0 ] || hl_fail "$1: STALE or wrong data read: $sum"
	LAST_SUM=$sum
}

# gw_scenarios: 0 identity and standby, 1 kill, 2 planned, 3 freeze/thaw, 4 failback
# (up to the failback's warm_start line in GW_WARM)
# gw_cached_reader NAME OFF: a qemu-io on gateway 1 fed through the fifo
# $T/NAME.in (open on fd QFD; its PID in QIO, its output in $T/NAME.out)
# that has read the 64 KiB at OFF until one read was a cache hit there: the
# gateway then has that block to serve (a fill runs after its read's reply:
# on a loaded host the next read can come first and miss again).
gw_cached_reader() {
	local name=$1 off=$2 hits0 hits1 i j
	mkfifo "$T/$name.in"
	qemu-io -f raw "$(url 1)" <"$T/$name.in" >"$T/$name.out" 2>&1 &
	QIO=$!
	HL_PIDS+=("$QIO")
	HL_PID_NAMES+=(qemu-io)
	exec {QFD}>"$T/$name.in"
	echo "read $off 64k" >&"$QFD" # logged in, and cached on gateway 1
	for j in $(seq 1 10); do
		hits0=$(hl_cache_stat "${SOCK[1]}" ssd read_hits)
		echo "read $off 64k" >&"$QFD"
		for i in $(seq 1 20); do
			hits1=$(hl_cache_stat "${SOCK[1]}" ssd read_hits)
			[ "$hits1" -gt "$hits0" ] && return 0
			sleep 0.1
		done
	done
	hl_fail "the block at $off is not cached on gateway 1"
}

# gw_after_thaw NAME PAT OFF STEP: gateway 1 was frozen, gateway 2 took the
# disk and wrote PAT at OFF, gateway 1 was thawed: its reader ends (quit),
# the read queued on its
# path (gw_cached_reader NAME) was answered and with nothing stale, a new
# client through gateway 1 reads nothing stale, and gateway 1 is a standby
# of gateway 2.
gw_after_thaw() {
	local name=$1 pat=$2 off=$3 step=$4 i
	echo quit >&"$QFD"
	exec {QFD}>&-
	for i in $(seq 1 300); do hl_alive "$QIO" || break; sleep 0.1; done
	hl_alive "$QIO" && { kill -KILL "$QIO"; hl_fail "$step: the old path's client hangs: $(cat "$T/$name.out")"; }
	wait "$QIO" 2>/dev/null
	hl_forget "$QIO"
	if grep -qi "pattern verification failed" "$T/$name.out"; then
		hl_fail "$step: STALE: the thawed gateway served old data: $(cat "$T/$name.out")"
	fi
	grep -qi "read 65536/65536 bytes\|error\|fail" "$T/$name.out" ||
		hl_fail "$step: the old path's read got no answer: $(cat "$T/$name.out")"
	hl_log "$step: the old path's read after the thaw: $(grep -i "65536\|error\|fail" "$T/$name.out" | head -2 | tr '\n' ' ')"
	qemu-io -f raw -r -c "read -P $pat $off 64k" "$(url 1)" >"$T/$name-new.out" 2>&1
	if grep -qi "pattern verification failed" "$T/$name-new.out"; then
		hl_fail "$step: STALE: the thawed gateway served old data: $(cat "$T/$name-new.out")"
	fi
	for i in $(seq 1 50); do
		[ "$(own 1 state)" = standby ] && break
		sleep 0.1
	done
	[ "$(own 1 state)" = standby ] && [ "$(own 1 owner)" = 2 ] ||
		hl_fail "$step: the thawed gateway 1 is not a standby of gateway 2: $(own 1 state), owner $(own 1 owner)"
}

gw_scenarios() {
	gw_clock_shim
	# ---- 0. one LU, one owner, one standby
	head -c $((64 * 1024 * 1024)) /dev/urandom >"$T/want.img"
	start_gw 1
	wait_owner 1 20
	timeout 120 qemu-img convert -n -f raw -O raw "$T/want.img" "$(url 1)" ||
		hl_fail "could not write the image through gateway 1"
	start_gw 2
	wait_standby 2 1 10
	[ -z "$(own 1 problem)" ] && [ -z "$(own 2 problem)" ] ||
		hl_fail "a problem reported: gateway 1: '$(own 1 problem)', gateway 2: '$(own 2 problem)'"
	serial() { hl_serial_of "$(url "$1")"; }
	SERIAL=$(serial 1)
	[ -n "$SERIAL" ] || hl_fail "no serial number through gateway 1"
	# a standby refuses media access with NOT READY, TARGET PORT IN STANDBY STATE
	# (libiscsi's login sends TEST UNIT READY, so its tools cannot even log in there)
	out=$(iscsi-inq -e 1 -c 128 "$(url 2)" 2>&1) && hl_fail "the standby answered TEST UNIT READY: $out"
	grep -q "NOT READY.*0x040b" <<<"$out" || hl_fail "the standby did not answer 04h/0Bh: $out"
	hl_log "0: gateway 1 owns, gateway 2 standby ($out)"

	# ---- 1. the owner killed under load
	bench_start kill 14 1 2
	sleep 4
	kill -KILL "${PID[1]}"
	wait "${PID[1]}" 2>/dev/null
	hl_forget "${PID[1]}"
	t0=$(date +%s.%N)
	wait_owner 2 20
	took=$(echo "$(date +%s.%N) - $t0" | bc)
	bench_check kill
	[ "$(own 2 takeovers)" -ge 1 ] || hl_fail "gateway 2's takeover was not counted"
	[ "$(serial 2)" = "$SERIAL" ] || hl_fail "gateway 2 shows another LU: $(serial 2), not $SERIAL"
	grep -q "moves from 127.0.0.1:${PORT[1]} to 127.0.0.1:${PORT[2]}" "$T/kill.err" ||
		hl_fail "the session did not move to gateway 2"
	hl_log "1: kill: gateway 2 owner after ${took} s; longest I/O $(field max_us "$LAST_SUM") us"
	start_gw 1 # back as a standby, by itself
	sleep 1
	[ "$(own 1 state)" = standby ] || hl_fail "the restarted gateway 1 is not a standby: $(own 1 state)"

	# ---- 2. planned: SIGTERM the owner (gateway 2) under load
	bench_start planned 10 2 1
	sleep 3
	kill -TERM "${PID[2]}"
	wait "${PID[2]}" 2>/dev/null
	hl_forget "${PID[2]}"
	wait_owner 1 10
	bench_check planned
	max=$(field max_us "$LAST_SUM")
	[ "${max%.*}" -lt 5000000 ] || hl_fail "planned handover: the longest I/O took $max us"
	grep -rq "disk san: handed over (planned)" "$T" || hl_fail "gateway 2 did not log its handover"
	hl_log "2: planned: longest I/O $max us"
	start_gw 2
	sleep 1
	[ "$(own 2 state)" = standby ] || hl_fail "the restarted gateway 2 is not a standby"

	# ---- 3. split brain: freeze the owner (gateway 1), thaw it after the takeover
	# a second client stays on the old owner's path: its READ at 56 MiB (outside
	# the load's range, cached there) is sent while that gateway is frozen and
	# reaches it only when it is thawed, after the new owner wrote there
	gw_cached_reader qio 56M
	bench_start freeze 14 1 2
	sleep 3
	local t_stop
	t_stop=$(date +%s%N)
	kill -STOP "${PID[1]}"
	# SIGSTOP stops the threads one after the other: a read sent before the
	# last one stopped may be answered at once (with the data of that time)
	gw_stopped "${PID[1]}"
	echo "read -P 0x5a 56M 64k" >&"$QFD"
	wait_owner 2 30
	qemu-io -f raw -c 'write -P 0x5a 56M 64k' "$(url 2)" >"$T/w.out" 2>&1 || hl_fail "write through gateway 2: $(cat "$T/w.out")"
	python3 - "$T/want.img" <<-'PY'
	import sys
	with open(sys.argv[1], 'r+b') as f:
	    f.seek(56 << 20)
	    f.write(b'\x5a' * 65536)
	PY
	# its clocks stood still while it was stopped (GW_FREEZE_CLOCKS), or ran on
	[ -n "${GW_FREEZE_CLOCKS:-}" ] && gw_clock_freeze $(($(date +%s%N) - t_stop))
	kill -CONT "${PID[1]}"
	bench_check freeze
	gw_after_thaw qio 0x5a 56M 3

	# ---- 4. failback keeps what did not change
	# everything through gateway 2 reads back as written (the bench wrote too: read it)
	rm -f "$T/now.img"
	timeout 120 qemu-img convert -f raw -O raw "$(url 2)" "$T/now.img" || hl_fail "read through gateway 2"
	cp "$T/now.img" "$T/want.img"
	# gateway 1 warms its cache while it owns the image (a planned move there and back)
	"$CTL" --socket "${SOCK[2]}" handover /disks/san >"$T/ho.out" 2>&1 || hl_fail "handover: $(cat "$T/ho.out")"
	wait_owner 1 10
	# random reads fill the cache (a sequential pass would bypass it)
	"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time 4 "$(url 1)" >"$T/warm.out" 2>&1 ||
		hl_fail "warming through gateway 1: $(tail -3 "$T/warm.out")"
	rm -f "$T/r1.img"
	timeout 120 qemu-img convert -f raw -O raw "$(url 1)" "$T/r1.img" || hl_fail "read through gateway 1"
	cmp -s "$T/r1.img" "$T/want.img" || hl_fail "gateway 1 reads differ from the image"
	"$CTL" --socket "${SOCK[1]}" handover /disks/san >"$T/ho.out" 2>&1 || hl_fail "handover: $(cat "$T/ho.out")"
	wait_owner 2 10
	# 1% of the image (640 KiB in 10 places) rewritten through gateway 2
	gw_rewrite_tenth 2
	"$CTL" --socket "${SOCK[2]}" handover /disks/san >"$T/ho.out" 2>&1 || hl_fail "handover: $(cat "$T/ho.out")"
	wait_owner 1 10
	ws=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["caches"]["ssd"]["disks"]["san"]["warm_start"])' \
		"$("$CTL" --socket "${SOCK[1]}" stats --json)")
	hl_log "4: failback: $ws"
	GW_WARM=$ws
}

# gw_no_stale [WHAT]: everything read through gateway 1 is what the image holds
gw_no_stale() {
	local stale what=${1:-"4: failback"}
	rm -f "$T/r1.img"
	timeout 120 qemu-img convert -f raw -O raw "$(url 1)" "$T/r1.img" || hl_fail "read through gateway 1"
	stale=$(stale_blocks "$T/want.img" "$T/r1.img")
	[ "$stale" = 0 ] || hl_fail "STALE after $what: $stale block(s) differ"
	hl_log "$what: 0 stale blocks"
}
