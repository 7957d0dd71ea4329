# contrib/scenarios/common.sh - what the scenario scripts share: finding the
# programs, a scratch folder, free loopback ports, starting hotlund and tgtd
# and stopping them by PID, running hotlun-bench with CSV and SVG output, and
# overlaying runs in one chart. Sourced by the scenario scripts, never run.
#
# Environment (all optional):
#   HOTLUN_BUILD  folder with hotlund and hotlun-bench (default: the build/
#                 folder of this tree, then $PATH)
#   OUT           where CSV, SVG, PNG, logs and the disk images go
#                 (default ./scenario-<name>; the images are deleted at the end
#                 unless KEEP_IMAGES=1)
#   TIME WARMUP QD SESSIONS   override the scenario's hotlun-bench settings
#   CACHE_DEV     file (default): the cache device is a file in $OUT, on
#                 whatever disk holds it; ram: a file in /dev/shm (a
#                 RAM-speed "SSD", deleted at the end)
set -euo pipefail

SCENARIO=$(basename "$0" .sh)
SC_HERE=$(cd "$(dirname "$0")" && pwd)
SC_TOP=$(cd "$SC_HERE/../.." && pwd)
OUT=${OUT:-$PWD/scenario-$SCENARIO}
mkdir -p "$OUT"
SC_PIDS=()
SC_TGT_CPORTS=()
SC_SHM=()

say() { printf '[%s] %s: %s\n' "$(date +%T)" "$SCENARIO" "$*" >&2; }
die() {
	say "ERROR: $*"
	exit 2
}

find_bin() {
	local d
	for d in "${HOTLUN_BUILD:-}" "$SC_TOP/build" "$SC_TOP"; do
		[ -n "$d" ] && [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
	done
	command -v "$1" 2>/dev/null || die "cannot find $1 (build hotlun, or set HOTLUN_BUILD)"
}
HOTLUND=$(find_bin hotlund)
BENCH=$(find_bin hotlun-bench)

sc_cleanup() {
	local rc=$? pid
	for pid in "${SC_PIDS[@]}"; do
		kill -0 "$pid" 2>/dev/null || continue
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${SC_PIDS[@]}"; do
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		# tgtd ignores SIGTERM while it has targets
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	local f
	for f in "${SC_SHM[@]}"; do
		rm -f "$f" "$f.map"
	done
	local c
	for c in "${SC_TGT_CPORTS[@]}"; do
		rm -f "/var/run/tgtd/socket.$c" "/var/run/tgtd/socket.$c.lock"
	done
	if [ "${KEEP_IMAGES:-0}" != 1 ]; then
		rm -f "$OUT"/*.img
	fi
	return $rc
}
trap sc_cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
	python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

wait_port() { # PID PORT LOG
	local i
	for i in $(seq 1 200); do
		(exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
		kill -0 "$1" 2>/dev/null || { tail -n 30 "$3" >&2; die "process $1 exited"; }
		sleep 0.05
	done
	die "nothing listens on 127.0.0.1:$2"
}

# make_image FILE SIZE: a backing file; FILL=1 writes random data (slow) so
# that nothing reads holes, otherwise it is sparse.
make_image() {
	rm -f "$1"
	if [ "${FILL:-0}" = 1 ]; then
		say "filling $1 ($2) with random data"
		truncate -s "$2" "$1"
		local mb=$(($(stat -c %s "$1") >> 20))
		dd if=/dev/urandom of="$1" bs=1M count="$mb" conv=notrunc status=none
	else
		truncate -s "$2" "$1"
	fi
}

# start_hotlund NAME PORT ORIGIN_FILE CACHE_SIZE ORIGIN_KEYS...: hotlund on
# 127.0.0.1:PORT serving ORIGIN_FILE as LUN 0 of iqn.2026-11.io.hotlun:NAME,
# with a cache of CACHE_SIZE (0: no cache) and extra [disk] keys
# (origin_iops=200 ...). Sets URL and LAST_PID.
start_hotlund() {
	local name=$1 port=$2 origin=$3 csize=$4
	shift 4
	local st=$OUT/$name.state conf=$OUT/$name.conf kv disk_keys= cdev=$OUT/$name-cache.img
	rm -rf "$st"
	mkdir -p "$st"
	for kv in "$@"; do
		disk_keys+="${kv%%=*} = ${kv#*=}"$'\n'
	done
	if [ "$csize" != 0 ] && [ "${CACHE_DEV:-file}" = ram ]; then
		# A file in tmpfs: hotlund reads and writes it inline (memory copies).
		cdev=/dev/shm/hotlun-scenario.$$.$name.img
		SC_SHM+=("$cdev")
		say "cache device $cdev (RAM)"
	fi
	{
		echo "; written by contrib/scenarios/$SCENARIO.sh"
		echo "[global]"
		echo "portal = 127.0.0.1:$port"
		echo "state_dir = $st"
		echo "control_socket = $st/ctl.sock"
		echo "log_level = notice"
		echo
		if [ "$csize" != 0 ]; then
			echo "[cache ssd]"
			echo "device = $cdev"
			echo "size = $csize"
			echo "block_size = ${CACHE_BLOCK:-64K}"
			echo "admission = ${ADMISSION:-frequency}"
			echo
		fi
		echo "[disk origin]"
		echo "origin = file:$origin"
		printf '%s' "$disk_keys"
		[ "$csize" != 0 ] && echo "cache = ssd"
		echo
		echo "[target iqn.2026-11.io.hotlun:$name]"
		echo "lun.0 = origin"
		echo "allow = ALL"
	} >"$conf"
	if [ "$csize" != 0 ]; then
		truncate -s "$csize" "$cdev"
	fi
	"$HOTLUND" --check-config "$conf" >/dev/null || die "hotlund refuses $conf"
	"$HOTLUND" --config "$conf" </dev/null >"$OUT/$name.log" 2>&1 &
	LAST_PID=$!
	SC_PIDS+=("$LAST_PID")
	wait_port "$LAST_PID" "$port" "$OUT/$name.log"
	URL=iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:$name/0
	say "hotlund $name (pid $LAST_PID) at $URL"
}

# start_tgt NAME PORT FILE: tgtd on 127.0.0.1:PORT with FILE as LUN 1 (needs
# root). Sets URL and LAST_PID.
start_tgt() {
	local name=$1 port=$2 file=$3
	command -v tgtd >/dev/null || die "tgtd not installed (package tgt)"
	local cport=$(((port % 20000) + 1000))
	SC_TGT_CPORTS+=("$cport")
	tgtd -f -C "$cport" --iscsi "portal=127.0.0.1:$port" </dev/null >"$OUT/$name.log" 2>&1 &
	LAST_PID=$!
	SC_PIDS+=("$LAST_PID")
	wait_port "$LAST_PID" "$port" "$OUT/$name.log"
	local a="tgtadm -C $cport --lld iscsi"
	$a --op new --mode target --tid 1 -T "iqn.2026-11.io.hotlun:$name"
	$a --op new --mode logicalunit --tid 1 --lun 1 -b "$file"
	$a --op bind --mode target --tid 1 -I ALL
	URL=iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:$name/1
	say "tgtd $name (pid $LAST_PID) at $URL"
}

# stop_pid PID: stop one process we started.
stop_pid() {
	kill -TERM "$1" 2>/dev/null || true
	for _ in $(seq 1 50); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# run_bench RUN LABEL ARGS... URL: hotlun-bench with $OUT/RUN.csv and .svg;
# its output goes to $OUT/RUN.out; prints and remembers the summary line.
run_bench() {
	local run=$1 label=$2
	shift 2
	say "run $run ($label): hotlun-bench $*"
	"$BENCH" --csv "$OUT/$run.csv" --svg "$OUT/$run.svg" --label "$label" "$@" |
		tee "$OUT/$run.out" | tail -n 1 >&2
	SUMMARY=$(tail -n 1 "$OUT/$run.out")
	echo "$run: $SUMMARY" >>"$OUT/summary.txt"
}

# field RUN KEY: a value from the summary line of a run.
field() {
	tail -n 1 "$OUT/$1.out" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# plot SVG TITLE RUN...: overlay runs; also a PNG when rsvg-convert exists.
plot() {
	local svg=$1 title=$2
	shift 2
	local csvs=() r
	for r in "$@"; do csvs+=("$OUT/$r.csv"); done
	"$BENCH" --plot "$OUT/$svg" --title "$title" "${csvs[@]}" >&2
	if command -v rsvg-convert >/dev/null; then
		rsvg-convert -o "$OUT/${svg%.svg}.png" "$OUT/$svg"
	fi
	say "chart: $OUT/$svg"
}

: >"$OUT/summary.txt"
