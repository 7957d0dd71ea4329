#!/bin/bash
# mini_ceph.sh - a throw-away, RAM-backed, single-node Ceph cluster for the
# RBD tests and benchmarks: one monitor and one OSD (memstore) on 127.0.0.1,
# no manager, started with Debian's own tools in a couple of seconds.
#
#   mini_ceph.sh up   DIR [IMAGE:SIZE ...]   make DIR (absent or empty), start the
#                                            cluster, create pool "rbd" and the images
#   mini_ceph.sh down DIR                    stop what `up` started (by PID) and remove DIR
#
# After `up`, DIR/ceph.conf is everything a client needs (it names the admin
# keyring): `CEPH_CONF=DIR/ceph.conf rbd ls`. The OSD's admin socket is
# DIR/run/osd.0.asok (`ceph daemon DIR/run/osd.0.asok perf dump`).
#
# Environment:
#   MINI_CEPH_CONF_EXTRA   text appended to ceph.conf ("\n" escapes honoured), e.g.
#                          '[osd]\nosd_debug_inject_dispatch_delay_duration = 0.005'
#   MINI_CEPH_STORE_BYTES  memstore capacity (default 2 GiB; only what is written uses RAM)
#   MINI_CEPH_QUIET=1      no progress lines
#
# Exit status: 0 ok, 1 failure (the daemons are stopped, DIR is kept with its
# logs), 3 Ceph is not installed (the message names what is missing; tests skip).
set -euo pipefail
export LC_ALL=C
unset CEPH_CONF CEPH_ARGS # never talk to another cluster by accident

say() { [ -n "${MINI_CEPH_QUIET:-}" ] || echo "mini_ceph: $*" >&2; }
die() {
	echo "mini_ceph: $*" >&2
	exit 1
}

usage() {
	sed -n '2,21p' "$0" >&2
	exit 2
}

need_tools() {
	local missing=() t
	for t in ceph-mon ceph-osd ceph ceph-authtool monmaptool rbd python3; do
		command -v "$t" >/dev/null 2>&1 || missing+=("$t")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "mini_ceph: missing ${missing[*]} (Debian packages ceph-mon ceph-osd ceph-common)" >&2
		exit 3
	fi
}

# Two distinct loopback TCP ports nobody listens on now (the monitor's msgr2 and msgr1).
two_free_ports() {
	python3 - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Is PID a live process started with DIR's ceph.conf (so never someone else's)?
ours() {
	local pid=$1
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "$DIR/ceph.conf"
}

stop_daemons() {
	local pf pid
	for pf in "$DIR"/run/osd.*.pid "$DIR"/run/mon.*.pid; do
		[ -e "$pf" ] || continue
		pid=$(cat "$pf" 2>/dev/null || true)
		if ours "$pid"; then
			# The data is thrown away: no clean shutdown needed (memstore would
			# otherwise write its whole content out first).
			kill -KILL "$pid" 2>/dev/null || true
			for _ in $(seq 200); do ours "$pid" || break; sleep 0.02; done
		fi
		rm -f "$pf"
	done
}

failed() {
	local f
	echo "mini_ceph: start-up failed; last log lines:" >&2
	for f in "$DIR"/log/setup.log "$DIR"/log/mon.a.log "$DIR"/log/osd.0.log; do
		[ -s "$f" ] && { echo "== $f" >&2; tail -n 6 "$f" >&2; }
	done
	stop_daemons
	echo "mini_ceph: daemons stopped; $DIR kept (mini_ceph.sh down $DIR removes it)" >&2
	exit 1
}

# Run a setup step, its output into the setup log.
step() {
	"$@" >>"$DIR/log/setup.log" 2>&1
}

cmd_up() {
	need_tools
	if [ -d "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then die "$DIR is not empty"; fi
	mkdir -p "$DIR"/{mon.a,osd.0,run,log}
	trap failed ERR
	local t0 ports p2 p1 fsid uuid key mons
	t0=$(date +%s.%N)
	ports=$(two_free_ports)
	p2=${ports% *}
	p1=${ports#* }
	fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
	uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
	mons="[v2:127.0.0.1:$p2,v1:127.0.0.1:$p1]"

	cat >"$DIR/ceph.conf" <<EOF
# mini_ceph.sh: a throw-away test cluster in $DIR (RAM-backed, loopback only)
[global]
fsid = $fsid
mon_host = $mons
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_ipv6 = false
keyring = $DIR/keyring
run_dir = $DIR/run
admin_socket = $DIR/run/\$type.\$id.asok
log_file = $DIR/log/\$type.\$id.log
pid_file = $DIR/run/\$type.\$id.pid
crash_dir = $DIR/log
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
# a test machine's disk may be nearly full; the data lives in RAM anyway
mon_data_avail_warn = 1
mon_data_avail_crit = 0
[client]
admin_socket =
# A client pings its watches once per objecter tick (5 s by default), the
# OSD drops a watch not pinged for osd_client_watch_timeout (5 s below): with
# the two equal, watches lapsed now and then (ENOTCONN every ~5 s, and a
# notify returned without the gateway whose watch had just lapsed).
objecter_tick_interval = 1
log_file =
[mon]
mon_data = $DIR/mon.\$id
# propose map changes at once instead of batching them (start-up speed)
paxos_propose_interval = 0.01
paxos_min_wait = 0.001
mon_cluster_log_file = $DIR/log/cluster.log
[osd]
osd_data = $DIR/osd.\$id
osd_objectstore = memstore
memstore_device_bytes = ${MINI_CEPH_STORE_BYTES:-2147483648}
# A client killed with -9 keeps its watch, and with it the exclusive lock of
# the RBD images it wrote, until this timeout: a restarted gateway's writes
# wait for it (30 s by default; the kill -9 tests would mostly wait).
osd_client_watch_timeout = 5
EOF
	if [ -n "${MINI_CEPH_CONF_EXTRA:-}" ]; then printf '%b\n' "$MINI_CEPH_CONF_EXTRA" >>"$DIR/ceph.conf"; fi
	local C=(--conf "$DIR/ceph.conf")

	# keys: the monitor's own and the admin's (the monitor's auth database starts from them)
	step ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *'
	step ceph-authtool "$DIR/keyring" --gen-key -n client.admin --cap mon 'allow *' \
		--cap osd 'allow *' --cap mgr 'allow *'
	step monmaptool --create --fsid "$fsid" --addv a "$mons" "$DIR/run/monmap"
	step ceph-mon "${C[@]}" --mkfs --id a --monmap "$DIR/run/monmap" --keyring "$DIR/keyring"
	step ceph-mon "${C[@]}" --id a # forks; writes run/mon.a.pid
	say "monitor up on 127.0.0.1:$p2 (msgr2) and :$p1"

	# the OSD: its key, an entry in the OSD map with that key, then its store
	key=$(ceph-authtool --gen-print-key)
	step ceph-authtool --create-keyring "$DIR/osd.0/keyring" -n osd.0 --add-key "$key"
	printf '{"cephx_secret": "%s"}\n' "$key" >"$DIR/run/osd.0.json"
	step ceph "${C[@]}" --connect-timeout 30 osd new "$uuid" 0 -i "$DIR/run/osd.0.json"
	step ceph-osd "${C[@]}" --id 0 --mkfs --osd-uuid "$uuid" --keyring "$DIR/osd.0/keyring"
	step ceph-osd "${C[@]}" --id 0 --keyring "$DIR/osd.0/keyring"
	say "osd.0 started"

	step ceph "${C[@]}" osd pool create rbd 8 8
	# writes the pool's first object, so it returns once the PGs are active
	step timeout 60 rbd "${C[@]}" pool init rbd
	local spec
	for spec in "$@"; do
		case $spec in *:*) ;; *) false ;; esac # ERR: not IMAGE:SIZE
		step timeout 60 rbd "${C[@]}" create --size "${spec#*:}" "rbd/${spec%%:*}"
	done
	trap - ERR
	say "up in $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s: CEPH_CONF=$DIR/ceph.conf"
}

cmd_down() {
	[ -d "$DIR" ] || return 0
	[ -f "$DIR/ceph.conf" ] || die "$DIR has no ceph.conf: not a mini_ceph cluster, not touching it"
	stop_daemons
	rm -rf -- "$DIR"
	say "stopped, $DIR removed"
}

[ $# -ge 2 ] || usage
sub=$1
DIR=$(realpath -m -- "$2")
shift 2
case $sub in
up) cmd_up "$@" ;;
down) cmd_down ;;
*) usage ;;
esac
