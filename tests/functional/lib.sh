# tests/functional/lib.sh - shared helpers for hotlun functional tests.
#
# Sourced (never executed) by tests/functional/*.sh. It owns: the per-test
# scratch folder, free loopback ports, starting and stopping hotlund (and tgtd,
# the peer target used to cross-check the tests and for benchmarks), the
# config files the tests use, and the exit-status contract of the automake
# harness (0 pass, 1 fail, 77 skip, 99 hard error).
#
# Every process a test starts goes through hl_spawn, which records its PID;
# an EXIT trap stops all of them by PID, so a failing or interrupted test
# never leaves a daemon behind.
#
# Environment (exported by `make check` through AM_TESTS_ENVIRONMENT):
#   HL_BUILDDIR   build tree (hotlund lives at $HL_BUILDDIR/hotlund)
#   HL_SRCDIR     source tree
# Optional:
#   HL_TARGET=tgt run the test against tgtd instead of hotlund (to check that
#                 a test's client commands are right; tgt is a peer, not a
#                 reference for pass/fail)
#   HL_WRAPPER    command prefix for hotlund, e.g. "valgrind -q --error-exitcode=99"
#   HL_KEEP=1     keep the scratch folder (its path is printed)
#   HL_VERBOSE=1  trace commands (set -x)

set -u -o pipefail

HL_TEST_NAME=$(basename "$0" .sh)
if [ -z "${HL_SRCDIR:-}" ]; then
	HL_SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fi
if [ -z "${HL_BUILDDIR:-}" ]; then
	HL_BUILDDIR=$HL_SRCDIR/build
fi
export HL_SRCDIR HL_BUILDDIR
HL_TARGET=${HL_TARGET:-hotlun}
HL_IQN_PREFIX=iqn.2026-11.io.hotlun
HL_PIDS=()          # every process started through hl_spawn
HL_PID_NAMES=()     # parallel: a name for messages
HL_FAILED=0
[ "${HL_VERBOSE:-0}" = 1 ] && set -x

hl_log() { printf '[%s] %s: %s\n' "$(date +%T.%3N)" "$HL_TEST_NAME" "$*" >&2; }

# hl_fail MSG: the test failed; say why and exit 1 (the EXIT trap cleans up).
hl_fail() {
	HL_FAILED=1
	printf '[%s] %s: FAIL: %s\n' "$(date +%T.%3N)" "$HL_TEST_NAME" "$*" >&2
	exit 1
}

# hl_skip MSG: the test cannot run here (missing tool or feature); exit 77.
hl_skip() {
	printf '%s: SKIP: %s\n' "$HL_TEST_NAME" "$*" >&2
	exit 77
}

# hl_error MSG: the harness itself broke (not the code under test); exit 99.
hl_error() {
	HL_FAILED=1
	printf '%s: ERROR: %s\n' "$HL_TEST_NAME" "$*" >&2
	exit 99
}

# hl_missing MSG: a prerequisite is missing: skip, or fail under HL_STRICT=1
# or CI=true (where the install step should have provided it).
hl_missing() {
	if [ "${HL_STRICT:-0}" = 1 ] || [ "${CI:-}" = true ]; then
		hl_fail "$* (install step incomplete: see contrib/packages.txt)"
	fi
	hl_skip "$*"
}

# hl_need CMD...: skip the test when a client tool is missing. Under
# HL_STRICT=1 (set by `contrib/hotlun-dev test`, which installs everything)
# or CI=true a missing tool is a failure: it means contrib/packages.txt lacks
# a package, and a skip would hide that.
hl_need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || hl_missing "$c not installed (contrib/hotlun-dev installs it)"
	done
}

# The test's scratch folder, created when lib.sh is sourced (so that
# $(hl_tmpdir) in a subshell names the same folder); removed at exit unless
# the test failed or HL_KEEP=1.
HL_TMP=$(mktemp -d "${TMPDIR:-/tmp}/hotlun-$HL_TEST_NAME.XXXXXX") || hl_error "mktemp failed"

# hl_tmpdir: print the test's scratch folder.
hl_tmpdir() {
	echo "$HL_TMP"
}

# hl_free_port: print a TCP port on 127.0.0.1 that nothing listens on now.
# The kernel picks it (bind to port 0), so parallel tests do not collide.
hl_free_port() {
	local p
	if command -v python3 >/dev/null 2>&1; then
		p=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])') && { echo "$p"; return 0; }
	fi
	# Fallback: random high ports, checked against the listening sockets.
	local i
	for i in $(seq 1 200); do
		p=$((20000 + RANDOM % 30000))
		if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
			echo "$p"
			return 0
		fi
	done
	hl_error "no free port found"
}

# hl_port_open HOST PORT: true when something accepts TCP connections there.
hl_port_open() {
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# hl_spawn NAME LOGFILE CMD...: start CMD in the background, stdout+stderr to
# LOGFILE, stdin from /dev/null; records the PID. Sets HL_LAST_PID.
hl_spawn() {
	local name=$1 logf=$2
	shift 2
	"$@" </dev/null >"$logf" 2>&1 &
	HL_LAST_PID=$!
	HL_PIDS+=("$HL_LAST_PID")
	HL_PID_NAMES+=("$name")
	hl_log "started $name (pid $HL_LAST_PID): $*"
}

# hl_alive PID: true while the process runs (and is not a zombie).
hl_alive() {
	local st
	kill -0 "$1" 2>/dev/null || return 1
	st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[ "$st" != Z ]
}

# hl_wait_port PID HOST PORT LOGFILE [SECONDS]: wait until the process
# accepts connections on HOST:PORT; fail with its log when it exits first.
hl_wait_port() {
	local pid=$1 host=$2 port=$3 logf=$4 limit=${5:-${HL_START_TIMEOUT:-15}}
	local deadline=$((SECONDS + limit))
	while ! hl_port_open "$host" "$port"; do
		if ! hl_alive "$pid"; then
			wait "$pid" 2>/dev/null
			local rc=$?
			hl_forget "$pid"
			echo "---- $logf ----" >&2
			tail -n 60 "$logf" >&2
			hl_fail "process $pid exited (status $rc) before listening on $host:$port"
		fi
		[ $SECONDS -ge $deadline ] && {
			tail -n 60 "$logf" >&2
			hl_fail "nothing listens on $host:$port after ${limit}s"
		}
		sleep 0.05
	done
}

# hl_forget PID: drop PID from the list of processes to stop.
hl_forget() {
	local i
	for i in "${!HL_PIDS[@]}"; do
		if [ "${HL_PIDS[$i]}" = "$1" ]; then
			unset 'HL_PIDS[i]' 'HL_PID_NAMES[i]'
		fi
	done
}

# hl_pid_name PID: the name hl_spawn recorded for PID.
hl_pid_name() {
	local i
	for i in "${!HL_PIDS[@]}"; do
		[ "${HL_PIDS[$i]}" = "$1" ] && echo "${HL_PID_NAMES[$i]}"
	done
	return 0
}

# hl_stop [PID]: SIGTERM the process (default: the last hotlund started),
# wait up to 10 s, and fail when it does not exit or exits uncleanly
# (anything but status 0 or death by SIGTERM: a crash, a sanitizer report,
# a leak checker's error status).
hl_stop() {
	local pid=${1:-${HL_PID:-}} i rc
	[ -n "$pid" ] || return 0
	# tgtd ignores SIGTERM (it wants `tgtadm --op delete --mode system`
	# after every target is gone); it is a peer, not under test: SIGKILL.
	if [ "$(hl_pid_name "$pid")" = tgtd ]; then
		{
			kill -KILL "$pid"
			wait "$pid"
		} 2>/dev/null
		hl_forget "$pid"
		[ "$pid" = "${HL_PID:-}" ] && HL_PID=
		return 0
	fi
	if hl_alive "$pid"; then
		kill -TERM "$pid" 2>/dev/null
		for i in $(seq 1 200); do
			hl_alive "$pid" || break
			sleep 0.05
		done
		if hl_alive "$pid"; then
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			hl_forget "$pid"
			hl_fail "pid $pid did not exit within 10 s of SIGTERM (killed)"
		fi
	fi
	wait "$pid" 2>/dev/null
	rc=$?
	hl_forget "$pid"
	[ "$pid" = "${HL_PID:-}" ] && HL_PID=
	case $rc in
	0 | 143) return 0 ;;
	127) return 0 ;; # not our child any more (already reaped)
	*) hl_fail "pid $pid exited with status $rc on SIGTERM (crash or error; see its log)" ;;
	esac
}

# hl_descendants PID: every live descendant of PID, children first listed
# before their own children (not the subshell this runs in).
hl_descendants() {
	local c
	for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		[ "$c" = "$BASHPID" ] && continue
		echo "$c"
		hl_descendants "$c"
	done
}

# hl_ceph_up DIR IMAGE:SIZE ...: a throw-away one-node Ceph cluster in DIR
# (mini_ceph.sh) with these rbd images; the test is skipped where Ceph
# cannot run. Sets cluster and exports CEPH_CONF. The EXIT trap stops the
# test's processes first (SIGCONT for frozen ones, then SIGTERM: librbd
# cannot close an image once the cluster is gone), keeps the cluster's log
# in DIR-log when the test failed, then stops the cluster.
hl_ceph_up() {
	local rc=0
	cluster=$1
	shift
	MINI_CEPH_QUIET=1 "$HL_SRCDIR/tests/functional/mini_ceph.sh" up "$cluster" "$@" \
		>"$cluster-up.log" 2>&1 || rc=$?
	[ $rc = 3 ] && hl_skip "$(tail -1 "$cluster-up.log")"
	[ $rc = 0 ] || hl_fail "single-node Ceph did not start: $(tail -8 "$cluster-up.log")"
	trap 'rc=$?; for p in "${HL_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done; sleep 1; [ $rc = 0 ] || cp -r "$cluster/log" "$cluster-log" 2>/dev/null; hl_ceph_down; (exit $rc); hl_cleanup' EXIT
	export CEPH_CONF=$cluster/ceph.conf
}

hl_ceph_down() {
	MINI_CEPH_QUIET=1 "$HL_SRCDIR/tests/functional/mini_ceph.sh" down "$cluster" >/dev/null 2>&1
}

# A hotlund built with -fsanitize=address,undefined (configure --enable-asan)
# reports into its log and may carry on: UBSan recovers, and a report in a
# connection the test did not look at leaves the test green. So every log in
# the scratch folder is read at exit. Leaks at exit are not the target.
hl_sanitized() {
	[ -x "$HL_BUILDDIR/hotlund" ] && grep -qa __asan_init "$HL_BUILDDIR/hotlund"
}
if hl_sanitized; then
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
fi

# hl_sanitizer_check: fail (1) when a log under the scratch folder holds a
# sanitizer report; print its first lines.
hl_sanitizer_check() {
	[ -n "${HL_TMP:-}" ] && [ -d "$HL_TMP" ] && hl_sanitized || return 0
	local f bad=0
	for f in $(grep -rlE 'ERROR: AddressSanitizer|runtime error:' --include='*.log' "$HL_TMP" 2>/dev/null); do
		echo "$HL_TEST_NAME: sanitizer report in $f:" >&2
		grep -E -m3 -A6 'ERROR: AddressSanitizer|runtime error:' "$f" >&2
		bad=1
	done
	return $bad
}

hl_cleanup() {
	local rc=$? i pid
	set +x
	for i in "${!HL_PIDS[@]}"; do
		pid=${HL_PIDS[$i]}
		if hl_alive "$pid"; then
			if [ "${HL_PID_NAMES[$i]}" = tgtd ]; then
				kill -KILL "$pid" 2>/dev/null
			else
				kill -TERM "$pid" 2>/dev/null
			fi
		fi
	done
	for i in "${!HL_PIDS[@]}"; do
		pid=${HL_PIDS[$i]}
		local n
		for n in $(seq 1 100); do
			hl_alive "$pid" || break
			sleep 0.05
		done
		if hl_alive "$pid"; then
			echo "$HL_TEST_NAME: ${HL_PID_NAMES[$i]} (pid $pid) ignored SIGTERM; SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null
		fi
		wait "$pid" 2>/dev/null
	done
	# Anything else the script started in the background without hl_spawn
	# (a client loop, a `( ... ) &`) is stopped too, so no test leaves
	# processes behind, even when it fails half-way.
	local stray
	stray=$(hl_descendants $$)
	if [ -n "$stray" ]; then
		for pid in $stray; do
			echo "$HL_TEST_NAME: stopping stray process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)" >&2
		done
		kill -TERM $stray 2>/dev/null
		sleep 0.5
		kill -KILL $stray 2>/dev/null
	fi
	[ -n "${HL_TGT_CPORT:-}" ] && rm -f "/var/run/tgtd/socket.$HL_TGT_CPORT" \
		"/var/run/tgtd/socket.$HL_TGT_CPORT.lock" 2>/dev/null
	hl_sanitizer_check || rc=1
	if [ -n "$HL_TMP" ] && [ -d "$HL_TMP" ]; then
		if [ "${HL_KEEP:-0}" = 1 ] || { [ $rc -ne 0 ] && [ $rc -ne 77 ]; }; then
			echo "$HL_TEST_NAME: scratch folder kept: $HL_TMP" >&2
		else
			rm -rf "$HL_TMP"
		fi
	fi
	return $rc
}
trap 'hl_cleanup; exit $?' EXIT # its status: a sanitizer report fails a passing test
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- hotlund

# The daemon under test.
HL_HOTLUND=$HL_BUILDDIR/hotlund

# hl_start_hotlund CONFIG [HOST:PORT]: run hotlund --config CONFIG in the
# background and wait until it accepts connections on the portal (default:
# the first `portal =` line of CONFIG). Sets HL_PID and HL_LOG.
hl_start_hotlund() {
	local conf=$1 portal=${2:-}
	[ -x "$HL_HOTLUND" ] || hl_missing "$HL_HOTLUND not built"
	[ -n "$portal" ] || portal=$(sed -n 's/^[[:space:]]*portal[[:space:]]*=[[:space:]]*\([^[:space:]]*\).*/\1/p' "$conf" | head -1)
	[ -n "$portal" ] || hl_error "no portal in $conf"
	local host=${portal%:*} port=${portal##*:}
	host=${host#[}
	host=${host%]}
	HL_START_COUNT=$((${HL_START_COUNT:-0} + 1))
	HL_LOG=$(hl_tmpdir)/hotlund.$HL_START_COUNT.log
	# shellcheck disable=SC2086
	hl_spawn hotlund "$HL_LOG" ${HL_WRAPPER:-} "$HL_HOTLUND" --config "$conf"
	HL_PID=$HL_LAST_PID
	hl_wait_port "$HL_PID" "$host" "$port" "$HL_LOG"
	# The control socket comes up after the configuration is applied (slow
	# under valgrind): tests that use it may start only once it is there.
	local sock
	sock=$(sed -n 's/^[[:space:]]*control_socket[[:space:]]*=[[:space:]]*\([^[:space:];#]*\).*/\1/p' "$conf" | head -1)
	if [ -n "$sock" ]; then
		local i
		for i in $(seq 1 300); do
			[ -S "$sock" ] && break
			hl_alive "$HL_PID" || hl_fail "hotlund exited at start: $(tail -5 "$HL_LOG")"
			sleep 0.1
		done
		[ -S "$sock" ] || hl_fail "hotlund's control socket $sock never appeared"
	fi
}

# hl_cache_front_prereqs: what the cached two-tier verifier tests need
# (python3, hotlund as the front, hotlun-bench built); sets BENCH.
hl_cache_front_prereqs() {
	hl_need python3
	[ "$HL_TARGET" = tgt ] && hl_skip "the front under test is hotlund; nothing to run against tgt"
	BENCH=$HL_BUILDDIR/hotlun-bench
	[ -x "$BENCH" ] || hl_missing "$BENCH not built"
}

# hl_cache_front_one NAME ORIGIN CACHE_SIZE BLOCK: the usual single caching
# front in $T: target $HL_IQN_PREFIX:NAME on a free port, state in $T/state,
# disk "san" on ORIGIN behind cache "ssd" ($T/cache.img of CACHE_SIZE, blocks
# of BLOCK, every miss admitted), written to $T/hotlund.conf (not started).
# Sets IQN PORT ST SOCK URL; stat_of KEY [DISK] reads a cache statistic.
hl_cache_front_one() {
	IQN=$HL_IQN_PREFIX:$1
	PORT=$(hl_free_port)
	ST=$T/state
	SOCK=$ST/ctl.sock
	URL=iscsi://127.0.0.1:$PORT/$IQN/0
	mkdir -p "$ST"
	truncate -s "$3" "$T/cache.img"
	hl_cache_front_conf "$T/hotlund.conf" "$PORT" "$ST" "$IQN" "$2" \
		device="$T/cache.img" size="$3" block_size="$4" admission=always
}
stat_of() { hl_cache_stat "$SOCK" ssd "$@"; }

# hl_front_start CONF: start the caching front hotlund; sets FRONT_PID and
# FRONT_LOG (tests restart it by calling this again).
hl_front_start() {
	hl_start_hotlund "$1"
	FRONT_PID=$HL_PID FRONT_LOG=$HL_LOG
}

# hl_conf_global FILE PORT STATE_DIR [KEY=VALUE...]: (re)write FILE with the
# [global] section of a test's hotlund: portal 127.0.0.1:PORT, state and
# control socket (ctl.sock) in STATE_DIR (made here), then a "KEY = VALUE"
# line a pair. Sections follow with hl_conf_section or a heredoc (>>).
hl_conf_global() {
	local file=$1 port=$2 st=$3
	shift 3
	mkdir -p "$st"
	{
		printf '# written by %s\n[global]\nportal = 127.0.0.1:%s\n' "$HL_TEST_NAME" "$port"
		printf 'state_dir = %s\ncontrol_socket = %s/ctl.sock\n' "$st" "$st"
		hl_conf_pairs "$@"
	} >"$file"
}

# hl_conf_section FILE HEADER [KEY=VALUE...]: append "[HEADER]" (after a blank
# line) and its "KEY = VALUE" lines to FILE.
hl_conf_section() {
	local file=$1 head=$2
	shift 2
	{
		printf '\n[%s]\n' "$head"
		hl_conf_pairs "$@"
	} >>"$file"
}

# hl_conf_pairs KEY=VALUE...: "KEY = VALUE" a line (VALUE may hold "=").
hl_conf_pairs() {
	local kv
	for kv in "$@"; do
		printf '%s = %s\n' "${kv%%=*}" "${kv#*=}"
	done
}

# hl_cache_front_conf FILE PORT STATE_DIR IQN ORIGIN KEY=VALUE...: a hotlund
# config with one cache "ssd" (the KEY=VALUE pairs are its section), one disk
# "san" on ORIGIN cached by it, served as LUN 0 of IQN on 127.0.0.1:PORT, with
# its state and control socket in STATE_DIR.
hl_cache_front_conf() {
	local file=$1 port=$2 st=$3 iqn=$4 origin=$5
	shift 5
	hl_conf_global "$file" "$port" "$st" log_level=info threads=2
	hl_conf_section "$file" "cache ssd" "$@"
	hl_conf_section "$file" "disk san" origin="$origin" cache=ssd
	hl_conf_section "$file" "target $iqn" lun.0=san allow=ALL
}

# hl_gw_global G LOG_LEVEL: gateway G (1 or 2) of a pair: a free port of its
# own in PORT[G] (the caller declares PORT and SOCK as associative arrays),
# its state folder $T/gwG and control socket in SOCK[G], and the [global]
# section of $T/gwG/hotlund.conf (gateway = G, gateways = 1,2); the caller
# appends its disk and target sections.
hl_gw_global() {
	local g=$1 other=$(( 3 - $1 ))
	PORT[$g]=$(hl_free_port)
	while [ "${PORT[$g]}" = "${PORT[$other]:-}" ]; do PORT[$g]=$(hl_free_port); done
	mkdir -p "$T/gw$g"
	SOCK[$g]=$T/gw$g/ctl.sock
	printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s\ncontrol_socket = %s\n' \
		"${PORT[$g]}" "$T/gw$g" "${SOCK[$g]}" >"$T/gw$g/hotlund.conf"
	printf 'log_level = %s\ngateway = %s\ngateways = 1,2\n\n' "$2" "$g" >>"$T/gw$g/hotlund.conf"
}

# hl_wait_grep FILE PATTERN SECONDS: until FILE has a line matching PATTERN
# (grep's basic syntax); status 1 when it has none after SECONDS.
hl_wait_grep() {
	local i
	for i in $(seq 1 $((10 * $3))); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# hl_pr_holder URL: "node A" of the PREEMPT AND ABORT tests: a session of
# $SESSION (the caller's PR session tool) as initiator $HL_IQN_PREFIX:node-a
# on URL that registers key a, reserves (type 1) and starts a WRITE that is
# still in the origin when this returns. Its commands go to fd 3 (close it
# to end the session), its output to $T/a.out, its PID in APID.
hl_pr_holder() {
	local i
	mkfifo "$T/a.in"
	HL_INITIATOR=$HL_IQN_PREFIX:node-a "$SESSION" "$1" <"$T/a.in" >"$T/a.out" 2>&1 &
	APID=$!
	HL_PIDS+=("$APID")
	HL_PID_NAMES+=(session-a)
	exec 3>"$T/a.in"
	printf 'register a\nreserve a 1\nawrite 8\n' >&3
	for i in $(seq 1 100); do
		grep -q QUEUED "$T/a.out" && break
		hl_alive "$APID" || hl_fail "node A's session ended: $(cat "$T/a.out")"
		sleep 0.1
	done
	grep -q QUEUED "$T/a.out" || hl_fail "node A never queued its write: $(cat "$T/a.out")"
	[ "$(grep -c '^GOOD' "$T/a.out")" = 2 ] || hl_fail "node A's register/reserve: $(cat "$T/a.out")"
}

# hl_budget_target NAME: hotlund with a 64 MiB write budget
# (write_buffer_limit) serving a 64 MiB file disk as LUN 0 of
# iqn.2026-11.io.hotlun:NAME (the write-budget tests). Sets tmp, port, st,
# iqn, sock (its control socket) and HOARD (write_hoard.py, the client
# that starts WRITEs and withholds their data); wb KEY reads one of its
# write_buffers counters (empty when stats has none).
hl_budget_target() {
	tmp=$(hl_tmpdir)
	port=$(hl_free_port)
	st=$tmp/state
	mkdir -p "$st"
	hl_make_disk "$tmp/d.img" 64M
	iqn=iqn.2026-11.io.hotlun:$1
	sock=$st/ctl.sock
	HOARD=$HL_SRCDIR/tests/functional/write_hoard.py
	printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s\ncontrol_socket = %s\n' \
		"$port" "$st" "$sock" >"$tmp/c.conf"
	printf 'write_buffer_limit = 64M\n\n[disk d]\norigin = file:%s\n\n' "$tmp/d.img" >>"$tmp/c.conf"
	printf '[target %s]\nlun.0 = d\nallow = ALL\n' "$iqn" >>"$tmp/c.conf"
	hl_start_hotlund "$tmp/c.conf"
}
wb() {
	"$HL_BUILDDIR/hotlunctl" --socket "$sock" stats --json | python3 -c 'import json, sys
print(json.load(sys.stdin).get("write_buffers", {}).get(sys.argv[1], ""))' "$1"
}

# hl_cache_stat SOCKET CACHE KEY [DISK]: one statistics counter of cache
# CACHE (or of disk DISK in it), read over hotlund's control socket.
hl_cache_stat() {
	local sock=$1 cache=$2 key=$3 disk=${4:-} out
	out=$("$HL_BUILDDIR/hotlunctl" --socket "$sock" stats --json 2>&1) ||
		hl_fail "hotlunctl stats failed: $out"
	python3 -c '
import json, sys
c = json.loads(sys.argv[1])["caches"][sys.argv[2]]
print((c["disks"][sys.argv[4]] if sys.argv[4] else c)[sys.argv[3]])' "$out" "$cache" "$key" "$disk" ||
		hl_fail "no statistic $key for cache $cache${disk:+ disk $disk}: $out"
}

# hl_cache_idle SOCK CACHE [SECS]: wait (SECS, 10 by default, at most) until
# cache CACHE has no request in flight (the fills that follow the replies
# done). Returns 1 when it still has some.
hl_cache_idle() {
	local i
	for i in $(seq 1 $((${3:-10} * 10))); do
		[ "$(hl_cache_stat "$1" "$2" inflight)" = 0 ] && return 0
		sleep 0.1
	done
	return 1
}

# hl_cache_settle SOCK CACHE [SECS]: wait (10 s at most) until cache CACHE
# has written its records and has nothing in flight, then SECS more (an
# origin's proof is recorded once it stayed quiet for one interval).
hl_cache_settle() {
	local i
	for i in $(seq 1 100); do
		[ "$(hl_cache_stat "$1" "$2" meta_dirty)" = False ] &&
			[ "$(hl_cache_stat "$1" "$2" inflight)" = 0 ] && break
		sleep 0.1
	done
	sleep "${3:-0}"
}

# hl_stale_blocks URL WANT BS: read the whole LUN at URL through iSCSI
# (qemu-img, into WANT's folder) and print how many BS-byte blocks differ
# from the file WANT (a block missing from either side counts).
hl_stale_blocks() {
	local read=${2%/*}/read.img
	rm -f "$read"
	timeout 120 qemu-img convert -f raw -O raw "$1" "$read" >"$read.out" 2>&1 ||
		{ cat "$read.out" >&2; hl_fail "qemu-img could not read the LUN"; }
	python3 - "$2" "$read" "$3" <<'PY'
import sys
a, b, bs = open(sys.argv[1], 'rb'), open(sys.argv[2], 'rb'), int(sys.argv[3])
n = 0
while True:
    x, y = a.read(bs), b.read(bs)
    if not x and not y:
        break
    n += x != y
print(n)
PY
}

# hl_wait_restored LOG CACHE: wait (up to 60 s) for the end of the background
# restore of a warm start: "cache CACHE: N block(s) restored" in LOG.
hl_wait_restored() {
	local i
	for i in $(seq 1 600); do
		grep -q "cache $2: [0-9]* block(s) restored" "$1" && return 0
		sleep 0.1
	done
	hl_fail "cache $2: the restore of the warm start did not end in 60 s"
}

# hl_check_alive: fail when the current hotlund has died (e.g. after bad input).
hl_check_alive() {
	local pid=${1:-$HL_PID}
	if ! hl_alive "$pid"; then
		wait "$pid" 2>/dev/null
		local rc=$?
		hl_forget "$pid"
		tail -n 60 "${HL_LOG:-/dev/null}" >&2
		hl_fail "hotlund (pid $pid) died, status $rc"
	fi
}

# hl_make_disk FILE SIZE: a sparse backing file (SIZE as truncate(1) takes it).
hl_make_disk() {
	rm -f "$1"
	truncate -s "$2" "$1" || hl_error "cannot create $1"
}

# hl_write_config FILE PORT DISKFILE [KEY=VALUE...]: the config the tests use:
# one portal on 127.0.0.1:PORT, one disk, one target HL_IQN with LUN 0.
# Extra KEY=VALUE pairs go into the [target] section (chap_user=..., ...);
# PORTAL2=port adds a second portal on 127.0.0.1.
hl_write_config() {
	local f=$1 port=$2 disk=$3
	shift 3
	local kv extra_portal= target_lines=
	for kv in "$@"; do
		case $kv in
		PORTAL2=*) extra_portal="portal = 127.0.0.1:${kv#PORTAL2=}" ;;
		*) target_lines+="${kv%%=*} = ${kv#*=}"$'\n' ;;
		esac
	done
	local st
	st=$(hl_tmpdir)/state
	mkdir -p "$st"
	cat >"$f" <<EOF
# written by tests/functional/lib.sh for $HL_TEST_NAME
[global]
portal = 127.0.0.1:$port
${extra_portal}
state_dir = $st
control_socket = $st/ctl.sock
log_level = ${HL_LOG_LEVEL:-info}
${HL_GLOBAL_EXTRA:-}

[disk disk0]
origin = file:$disk

[target ${HL_IQN:-$HL_IQN_PREFIX:test}]
lun.0 = disk0
allow = ALL
${target_lines}
EOF
}

# hl_cache_disk0 FILE DEVICE [KEY=VALUE...]: put disk0 of the config that
# hl_write_config wrote in FILE behind a cache "ssd" on the file DEVICE (the
# caller makes it); the KEY=VALUE pairs go into the [cache ssd] section, over
# its defaults size = 24M, block_size = 64K, admission = always.
hl_cache_disk0() {
	local file=$1 dev=$2 kv key
	shift 2
	local -A val=([size]=24M [block_size]=64K [admission]=always)
	local keys=(size block_size admission)
	for kv in "$@"; do
		key=${kv%%=*}
		[ -n "${val[$key]+set}" ] || keys+=("$key")
		val[$key]=${kv#*=}
	done
	sed -i "s|^origin = file:.*|&\ncache = ssd|" "$file"
	{
		printf '\n[cache ssd]\ndevice = %s\n' "$dev"
		for key in "${keys[@]}"; do
			printf '%s = %s\n' "$key" "${val[$key]}"
		done
	} >>"$file"
}

# ---------------------------------------------------------------- targets

# hl_target_start [--size SIZE] [--chap USER SECRET] [--portal2] [--disk FILE]
# [--cache BLOCK]: start the target under test (hotlund, or tgtd when
# HL_TARGET=tgt) with one LUN on a sparse file, on a free loopback port;
# --cache puts a 64 MiB SSD cache of BLOCK blocks admitting every miss in
# front of it (hl_cache_disk0: cache "ssd"; hotlund only). Sets:
#   HL_PORT HL_PORT2 HL_IQN HL_LUN HL_PORTAL HL_URL (iscsi://127.0.0.1:PORT/IQN/LUN)
#   HL_DISK (backing file) HL_CHAP_USER HL_CHAP_SECRET
hl_target_start() {
	local size=256M chap_user= chap_secret= portal2=0 disk= cache=
	while [ $# -gt 0 ]; do
		case $1 in
		--size) size=$2; shift 2 ;;
		--cache) cache=$2; shift 2 ;;
		--chap) chap_user=$2; chap_secret=$3; shift 3 ;;
		--portal2) portal2=1; shift ;;
		--disk) disk=$2; shift 2 ;;
		*) hl_error "hl_target_start: unknown option $1" ;;
		esac
	done
	local t
	t=$(hl_tmpdir)
	if [ -z "$disk" ]; then
		disk=$t/disk0.img
		[ -e "$disk" ] || hl_make_disk "$disk" "$size"
	fi
	HL_DISK=$disk
	HL_CHAP_USER=$chap_user
	HL_CHAP_SECRET=$chap_secret
	HL_IQN=${HL_IQN:-$HL_IQN_PREFIX:${HL_TEST_NAME//_/-}}
	HL_PORT=$(hl_free_port) || hl_error "no free port"
	HL_PORT2=
	[ $portal2 = 1 ] && { HL_PORT2=$(hl_free_port) || hl_error "no free port"; }
	HL_PORTAL=127.0.0.1:$HL_PORT
	if [ "$HL_TARGET" = tgt ]; then
		hl_tgt_start "$disk" "$chap_user" "$chap_secret"
		HL_LUN=1
	else
		local args=()
		[ -n "$chap_user" ] && args+=("chap_user=$chap_user" "chap_secret=$chap_secret")
		[ -n "$HL_PORT2" ] && args+=("PORTAL2=$HL_PORT2")
		hl_write_config "$t/hotlund.conf" "$HL_PORT" "$disk" "${args[@]}"
		if [ -n "$cache" ]; then
			truncate -s 64M "$t/cache0.img"
			hl_cache_disk0 "$t/hotlund.conf" "$t/cache0.img" size=64M "block_size=$cache"
		fi
		hl_start_hotlund "$t/hotlund.conf"
		[ -n "$HL_PORT2" ] && hl_wait_port "$HL_PID" 127.0.0.1 "$HL_PORT2" "$HL_LOG"
		HL_LUN=0
	fi
	HL_URL=iscsi://127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN
	if [ -n "$chap_user" ]; then
		HL_CHAP_URL=iscsi://$chap_user%$chap_secret@127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN
	else
		HL_CHAP_URL=$HL_URL
	fi
}

# hl_target_restart: stop the target and start it again on the same
# port(s) and backing file (hotlund only).
hl_target_restart() {
	[ "$HL_TARGET" = tgt ] && hl_error "restart not supported for tgt"
	hl_stop "$HL_PID"
	hl_start_hotlund "$(hl_tmpdir)/hotlund.conf"
	[ -n "${HL_PORT2:-}" ] && hl_wait_port "$HL_PID" 127.0.0.1 "$HL_PORT2" "$HL_LOG"
	return 0
}

# hl_target_stop: stop the target under test, failing on an unclean exit.
hl_target_stop() {
	hl_stop "$HL_PID"
}

# hl_tgt_start DISK [CHAP_USER CHAP_SECRET]: tgtd on 127.0.0.1:$HL_PORT (and
# $HL_PORT2) with target $HL_IQN, LUN 1 = DISK. Needs root (tgtd's control
# socket lives in /var/run/tgtd).
hl_tgt_start() {
	local disk=$1 user=${2:-} secret=${3:-}
	hl_need tgtd tgtadm
	[ "$(id -u)" = 0 ] || hl_skip "tgtd needs root"
	HL_TGT_CPORT=$(( (HL_PORT % 20000) + 1000 ))
	local t args=(--iscsi "portal=127.0.0.1:$HL_PORT")
	t=$(hl_tmpdir)
	HL_LOG=$t/tgtd.log
	hl_spawn tgtd "$HL_LOG" tgtd -f -C "$HL_TGT_CPORT" "${args[@]}"
	HL_PID=$HL_LAST_PID
	hl_wait_port "$HL_PID" 127.0.0.1 "$HL_PORT" "$HL_LOG"
	local a="tgtadm -C $HL_TGT_CPORT --lld iscsi"
	if [ -n "${HL_PORT2:-}" ]; then
		$a --op new --mode portal --param "portal=127.0.0.1:$HL_PORT2" || hl_error "tgtadm portal"
	fi
	$a --op new --mode target --tid 1 -T "$HL_IQN" || hl_error "tgtadm target"
	$a --op new --mode logicalunit --tid 1 --lun 1 -b "$disk" || hl_error "tgtadm lun"
	$a --op bind --mode target --tid 1 -I ALL || hl_error "tgtadm bind"
	# Let initiators choose CRC32C digests (tgt's default offers None only).
	$a --op update --mode target --tid 1 -n HeaderDigest -v CRC32C,None || hl_error "tgtadm digest"
	$a --op update --mode target --tid 1 -n DataDigest -v CRC32C,None || hl_error "tgtadm digest"
	if [ -n "$user" ]; then
		$a --op new --mode account --user "$user" --password "$secret" || hl_error "tgtadm account"
		$a --op bind --mode account --tid 1 --user "$user" || hl_error "tgtadm bind account"
	fi
}

# ---------------------------------------------------------------- checks

# hl_expect_fail DESC CMD...: CMD must fail (exit non-zero).
hl_expect_fail() {
	local desc=$1
	shift
	if "$@" >"$(hl_tmpdir)/expect_fail.out" 2>&1; then
		cat "$(hl_tmpdir)/expect_fail.out" >&2
		hl_fail "$desc: command succeeded but must fail: $*"
	fi
	hl_log "ok (fails as it must): $desc"
}

# hl_run DESC CMD...: CMD must succeed; output is logged.
hl_run() {
	local desc=$1 out rc
	shift
	out=$(hl_tmpdir)/run.out
	"$@" >"$out" 2>&1
	rc=$?
	if [ $rc -ne 0 ]; then
		cat "$out" >&2
		hl_fail "$desc: exit status $rc: $*"
	fi
	hl_log "ok: $desc"
}

# ---- two disks on one origin, one of them cached (the alias tests) ----

# hl_alias_conf NAME ORIGIN [ALIAS_ORIGIN]: the next front config of an alias
# test, $T/NAME$N.conf (N counts from 1): a fresh port, state folder and
# target $HL_IQN_PREFIX:NAME$N, disk san cached on ORIGIN and, when
# ALIAS_ORIGIN is given, disk alias on it as LUN 1 (an "&" in it escaped for
# sed). Sets N PORT ST IQN CONF; not started.
hl_alias_conf() {
	N=$((${N:-0} + 1))
	PORT=$(hl_free_port)
	ST=$T/state$N
	IQN=$HL_IQN_PREFIX:$1$N
	CONF=$T/$1$N.conf
	mkdir -p "$ST"
	truncate -s 16M "$T/cache$N.img"
	hl_cache_front_conf "$CONF" "$PORT" "$ST" "$IQN" "$2" \
		device="$T/cache$N.img" size=16M block_size=64K admission=always
	[ -n "${3:-}" ] || return 0
	sed -i "s|^\[target |[disk alias]\norigin = $3\n\n&|" "$CONF"
	sed -i "s|^lun.0 = san$|&\nlun.1 = alias|" "$CONF"
}

# hl_alias_stale_check: on the running front of hl_alias_conf, read block 0
# through the cached LUN 0 (a fill), write it through the alias (LUN 1) and
# read it through LUN 0 again. Fails either way: on the stale read, or on
# the front having taken two disks on one origin at all.
hl_alias_stale_check() {
	local cached=iscsi://127.0.0.1:$PORT/$IQN/0 other=iscsi://127.0.0.1:$PORT/$IQN/1
	qemu-io -f raw -c "read 0 64k" "$cached" >"$T/q.out" 2>&1 || hl_fail "read: $(cat "$T/q.out")"
	hl_cache_settle "$ST/ctl.sock" ssd
	qemu-io -f raw -c "write -P 0x5a 0 64k" "$other" >"$T/q.out" 2>&1 ||
		hl_fail "write through the alias: $(cat "$T/q.out")"
	qemu-io -f raw -c "read -P 0x5a 0 64k" "$cached" >"$T/q.out" 2>&1 ||
		hl_fail "stale read: the cached disk did not return what its alias wrote: $(head -3 "$T/q.out")"
	grep -q "Pattern verification failed" "$T/q.out" &&
		hl_fail "stale read: the cached disk did not return what its alias wrote"
	hl_fail "the front took two disks on one origin, one cached (no stale read this time)"
}

# hl_alias_refused CONF PATTERN: hotlund must exit at start with CONF, with
# PATTERN (grep -E) in its output; when it does not refuse for that reason,
# it is started and the stale check shows what taking the pair costs.
hl_alias_refused() {
	local log=$T/refused$N.log
	if timeout 30 "$HL_HOTLUND" --config "$1" >"$log" 2>&1; then
		hl_fail "hotlund ran and exited 0 with $1"
	fi
	if ! grep -Eq "$2" "$log"; then
		cat "$log" >&2
		hl_front_start "$1"
		hl_alias_stale_check
	fi
}

# hl_alias_live ORIGIN PATTERN: on the running front of disk san alone, disk
# alias on ORIGIN added live (hotlunctl /disks create) must be refused with
# PATTERN (grep -E) in the answer, and disk san still served. Sets OUT (the
# answer).
hl_alias_live() {
	local rc
	OUT=$("$HL_BUILDDIR/hotlunctl" --socket "$ST/ctl.sock" /disks create alias origin="$1" 2>&1)
	rc=$?
	if [ $rc = 0 ]; then
		"$HL_BUILDDIR/hotlunctl" --socket "$ST/ctl.sock" "/iscsi/$IQN/tpg1/luns" create \
			/disks/alias lun=1 >"$T/ctl.out" 2>&1 || hl_fail "adding LUN 1: $(cat "$T/ctl.out")"
		hl_alias_stale_check
	fi
	echo "$OUT" | grep -Eq "$2" || hl_fail "refused, but not for the alias: $OUT"
	qemu-io -f raw -c "read 0 64k" "iscsi://127.0.0.1:$PORT/$IQN/0" >"$T/q.out" 2>&1 ||
		hl_fail "disk san after the refused change: $(cat "$T/q.out")"
}

# hl_serial_of URL: the unit serial number of VPD page 80h (iscsi-inq).
hl_serial_of() {
	iscsi-inq -e 1 -c 128 "$1" 2>&1 | sed -n 's/^Unit Serial Number:\[\(.*\)\]$/\1/p'
}

# hl_naa_of URL: the logical unit's NAA designator of VPD page 83h as hex,
# "none" without one (iscsi-inq, python3).
hl_naa_of() {
	iscsi-inq -e 1 -c 131 "$1" 2>/dev/null | python3 -c '
import sys
b = sys.stdin.buffer.read()
k = b"Association:(0) LOGICAL_UNIT\nDesignator Type:(3) NAA\nDesignator:["
i = b.find(k)
print(b[i + len(k):i + len(k) + 16].hex() if i >= 0 else "none")'
}

# ---- the metrics endpoint ----

# hl_metrics_start [hl_target_start options]: the target (hotlund) with its
# metrics endpoint on a free loopback port, HL_METRICS_PORT; returns once
# the endpoint listens.
hl_metrics_start() {
	HL_METRICS_PORT=$(hl_free_port) || hl_error "no free port"
	HL_GLOBAL_EXTRA="metrics_listen = 127.0.0.1:$HL_METRICS_PORT" hl_target_start "$@"
	hl_wait_port "$HL_PID" 127.0.0.1 "$HL_METRICS_PORT" "$HL_LOG"
}

# hl_metrics_park SENT <<'PY' ... PY: four loopback addresses (127.0.0.2-5)
# open 10 connections each to the endpoint of hl_metrics_start and send
# SENT on each (what a holder parks on: half a request, a body that never
# ends); 0.5 s later, for the server to act on the last accepts, the Python
# on stdin runs with these defined: port, held (a list of (address's last
# byte, socket)), conn(src), alive(s) and scrape(src) (the status line of a
# GET /metrics from src). Its exit status is returned; the held connections
# close when it ends.
hl_metrics_park() {
	python3 - "$HL_METRICS_PORT" "$1" "$HL_SRCDIR/tests/functional" 3<&0 <<'PY'
import os, socket, sys, time
sys.path.insert(0, sys.argv[3])
from netutil import alive
port = int(sys.argv[1])

def conn(src):
    s = socket.socket()
    s.settimeout(5)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s

def scrape(src):
    try:
        s = conn(src)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
        s.close()
        return data.split(b"\r\n")[0].decode(errors="replace") or "closed"
    except OSError as e:
        return "error: %s" % e

held = []
for a in range(2, 6):
    for _ in range(10):
        try:
            s = conn("127.0.0.%d" % a)
            s.sendall(sys.argv[2].encode())
            held.append((a, s))
        except OSError:
            pass
time.sleep(0.5)  # let the server act on the last accepts (it closes, never waits)
exec(compile(os.fdopen(3).read(), "hl_metrics_park stdin", "exec"))
PY
}
