#!/bin/bash
# failover.sh - issue 17 benchmark: two hotlund gateways serve one rbd image
# (a throw-away single-node Ceph, tests/functional/mini_ceph.sh) under ALUA;
# the verified load uses the first 240 MiB, the split-brain probe 250 MiB;
# hotlun-bench is the multipath initiator (--path for each gateway, MRU,
# SET TARGET PORT GROUPS, --verify: every block read is checked against what
# was written last). Prints one line per scenario:
#
#   failover scenario=kill gap_s=6.8 errors=0 stale=0 retained_pct=99.0 hit_before_pct=.. hit_after_pct=.. window_s=60 shadow_reads=4096 shadow_mib=256 shadow_s=33
#   failover scenario=freeze gap_s=6.8 errors=0 stale=0 old_path=refused
#   failover scenario=planned gap_s=0.16 errors=0 stale=0
#   failover scenario=failback gap_s=0.05 errors=0 stale=0 retained_pct=99.1 kept=4096 window_s=30
#
# gap_s     the longest I/O of the run: it was in flight at the event and
#           completed through the other gateway, so it spans the event to the
#           first I/O completed there;
# errors    I/Os that failed (goal 0); stale: verify mismatches (must be 0);
# kill      SIGKILL of the owner under 70% read / 30% write load;
#           retained_pct = the new owner's read hit ratio from the takeover
#           on (the load's rest, then uniform random 64 KiB reads, KWINDOW=60
#           s in all) over the old owner's before the kill (a 10 s window of
#           the same reads); shadow_reads/shadow_mib: what the standby read
#           from the cluster to shadow the old owner's hot set (its rate:
#           SHADOW_RATE, default hotlund's 8 MiB/s), shadow_s: how long it
#           took to catch up (behind = 0); hit_first_pct: the new owner's
#           hit ratio from the takeover to the end of the kill load (first_s);
#           ORIGIN_IOPS=N throttles each gateway's origin (origin_iops) like a
#           slow SAN: on the test machine's local Ceph a cold cache warms up
#           within seconds, which hides most of what the shadow saves;
# freeze    SIGSTOP of the owner, SIGCONT after the takeover; old_path: what a
#           READ already sent to the frozen gateway got when it woke up
#           (refused = NOT READY; stale = old data: a failure);
# planned   SIGTERM of the owner (it hands the image over first);
# failback  the gateway that owned the image, warm, hands it over; 1% of the
#           image is rewritten through the peer (64 KiB writes at random
#           places); the image is handed back under read load; stale = 64 KiB
#           blocks read back through it that differ from `rbd export` of the
#           image; retained_pct = its read hit
#           ratio from the failback on (window_s: the failback load's rest
#           and WINDOW=30 s more) over its hit ratio
#           before (uniform random 64 KiB reads over the image);
# pingpong  both gateways ask for the image in turn (hotlunctl takeover, the
#           same request as SET TARGET PORT GROUPS) every 0.5 s for 30 s:
#           moves = ownership changes (the hold allows one per 10 s).
#
#   tests/bench/failover.sh     (BUILD=dir, default ./build; SIZE=256M; KEEP=1 keeps the logs;
#                                ONLY_KILL=1 stops after the kill scenario; KILL_CSV=FILE keeps the
#                                kill load's per-second series, for hotlun-bench --plot)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
SIZE=${SIZE:-256M}
WINDOW=${WINDOW:-30}
KWINDOW=${KWINDOW:-60}
SHADOW_RATE=${SHADOW_RATE:-}
ORIGIN_IOPS=${ORIGIN_IOPS:-}
BENCH=$BUILD/hotlun-bench
CTL=$BUILD/hotlunctl
tmp=$(mktemp -d /tmp/hotlun-failover.XXXXXX)
declare -A PORT PID SOCK
cleanup() {
	local rc=$?
	for g in 1 2; do
		[ -n "${PID[$g]:-}" ] && kill -CONT "${PID[$g]}" 2>/dev/null && kill -TERM "${PID[$g]}" 2>/dev/null || true
	done
	sleep 4
	for g in 1 2; do [ -n "${PID[$g]:-}" ] && kill -KILL "${PID[$g]}" 2>/dev/null || true; done
	MINI_CEPH_QUIET=1 "$SRC/tests/functional/mini_ceph.sh" down "$tmp/ceph" >/dev/null 2>&1 || true
	if [ -n "${KEEP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
	exit $rc
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

MINI_CEPH_QUIET=1 "$SRC/tests/functional/mini_ceph.sh" up "$tmp/ceph" "origin:$SIZE" >"$tmp/ceph.log" 2>&1 ||
	{ tail -5 "$tmp/ceph.log" >&2; exit 1; }
export CEPH_CONF=$tmp/ceph/ceph.conf
# write the whole image once, as a VM disk in use is: an rbd diff sees the first write to an
# object that did not exist at a mark as the whole object
rbd bench --io-type write --io-pattern seq --io-size 4M --io-threads 4 --io-total "$SIZE" rbd/origin \
	>"$tmp/fill.log" 2>&1 || { tail -5 "$tmp/fill.log" >&2; exit 1; }
iqn=iqn.2026-11.io.hotlun:failover
PORT[1]=$(free_port)
PORT[2]=$(free_port)
for g in 1 2; do
	mkdir -p "$tmp/gw$g"
	truncate -s 512M "$tmp/gw$g/cache.img"
	SOCK[$g]=$tmp/gw$g/ctl.sock
	cat >"$tmp/gw$g/hotlun.conf" <<CONF
[global]
portal = 127.0.0.1:${PORT[$g]}
state_dir = $tmp/gw$g
control_socket = ${SOCK[$g]}
log_level = notice
gateway = $g
gateways = 1,2

[cache ssd]
device = $tmp/gw$g/cache.img
size = 512M
block_size = 64K
admission = always

[disk d]
origin = rbd:rbd/origin
rbd_conf = $tmp/ceph/ceph.conf
cache = ssd
${SHADOW_RATE:+shadow_rate = $SHADOW_RATE}
${ORIGIN_IOPS:+origin_iops = $ORIGIN_IOPS}

[target $iqn]
lun.0 = d
allow = ALL
CONF
done
url() { echo "iscsi://127.0.0.1:${PORT[$1]}/$iqn/0"; }
start() {
	"$BUILD/hotlund" --config "$tmp/gw$1/hotlun.conf" >>"$tmp/gw$1.log" 2>&1 &
	PID[$1]=$!
	for _ in $(seq 1 100); do [ -S "${SOCK[$1]}" ] && return 0; sleep 0.1; done
	echo "gateway $1 did not start" >&2
	exit 1
}
stopped() { wait "${PID[$1]}" 2>/dev/null || true; PID[$1]=; }
gstat() { # gstat G PYTHON-EXPRESSION-ON-r
	"$CTL" --socket "${SOCK[$1]}" stats --json 2>/dev/null | python3 -c "import json,sys; r=json.load(sys.stdin); print($2)" 2>/dev/null || echo "?"
}
owner_is() {
	for _ in $(seq 1 300); do
		[ "$(gstat "$1" 'r["disks"]["d"]["ownership"]["alua"]')" = active/optimized ] && return 0
		sleep 0.1
	done
	echo "gateway $1 never became the owner" >&2
	exit 1
}
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2"; }
# load NAME SECONDS FIRST OTHER [READ_PCT]: verified load through both paths (70% reads)
load() {
	"$BENCH" --verify --quiet --read "${5:-70}" --qd 8 --bs 64K --range 240M --time "$2" --path-timeout 2 \
		--path "127.0.0.1:${PORT[$4]}" ${6:+--csv "$6" --label "$7"} "$(url "$3")" \
		>"$tmp/$1.out" 2>"$tmp/$1.err" &
	LOAD=$!
}
report() { # report NAME [extra]
	wait "$LOAD" || true
	local sum
	sum=$(tail -n 1 "$tmp/$1.out")
	local max errs stale
	max=$(field max_us "$sum")
	errs=$(field errors "$sum")
	stale=$(field verify_errors "$sum")
	printf 'failover scenario=%s gap_s=%.2f errors=%s stale=%s%s\n' "$1" \
		"$(echo "${max:-0} / 1000000" | bc -l)" "${errs:-?}" "${stale:-?}" "${2:-}"
}
# hits_reqs G: the cache's read_hits and read_reqs from ONE stats reply. Two
# replies read apart under load (the failback window starts while the load
# runs) count the reads that completed in between in one and not the other:
# that once made read_hits grow by 5,038 more than read_reqs.
hits_reqs() { gstat "$1" 'r["caches"]["ssd"]["read_hits"], r["caches"]["ssd"]["read_reqs"]' | tr -d '(),'; }

start 1
owner_is 1
start 2
# warm gateway 1 with the whole image
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time 20 "$(url 1)" >/dev/null 2>&1

# ---- kill: the old owner's hit ratio, the standby's shadow, the new owner's hit ratio
read -r h0 q0 <<<"$(hits_reqs 1)"
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time 10 "$(url 1)" >/dev/null 2>&1
read -r h1 q1 <<<"$(hits_reqs 1)"
kbefore=$(echo "($h1 - $h0) * 100 / ($q1 - $q0)" | bc -l)
shd() { gstat "$1" "r['disks']['d']['shadow']['$2']"; }
ts=$(date +%s)
for _ in $(seq 1 600); do
	[ "$SHADOW_RATE" = 0 ] && break # off: nothing to wait for
	[ "$(shd 2 behind)" = 0 ] && [ "$(shd 2 hot_blocks)" != 0 ] && [ "$(shd 2 hot_blocks)" != "?" ] && break
	sleep 0.5
done
shadow_s=$(($(date +%s) - ts))
sreads=$(shd 2 origin_reads)
sbytes=$(shd 2 origin_bytes)
# KILL_CSV=FILE: the kill load runs KWINDOW s longer and writes its per-second series there
if [ -n "${KILL_CSV:-}" ]; then
	load kill $((20 + KWINDOW)) 1 2 70 "$KILL_CSV" "shadow_rate ${SHADOW_RATE:-8MiB/s}"
else
	load kill 20 1 2
fi
sleep 5
kill -KILL "${PID[1]}"
stopped 1
owner_is 2
read -r h0 q0 <<<"$(hits_reqs 2)"
t0=$(date +%s.%N)
wait "$LOAD" || true
read -r ha qa <<<"$(hits_reqs 2)"
first_s=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc -l)")
kfirst=$(echo "($ha - $h0) * 100 / ($qa - $q0)" | bc -l)
rest=$(printf '%.0f' "$(echo "$KWINDOW - ($(date +%s.%N) - $t0)" | bc -l)")
[ "$rest" -gt 0 ] && "$BENCH" --quiet --read 100 --bs 64K --qd 8 --time "$rest" "$(url 2)" >/dev/null 2>&1
read -r h1 q1 <<<"$(hits_reqs 2)"
kafter=$(echo "($h1 - $h0) * 100 / ($q1 - $q0)" | bc -l)
report kill "$(printf ' retained_pct=%.2f hit_before_pct=%.2f hit_after_pct=%.2f window_s=%s hit_first_pct=%.2f first_s=%s shadow_reads=%s shadow_mib=%s shadow_s=%s' \
	"$(echo "$kafter * 100 / $kbefore" | bc -l)" "$kbefore" "$kafter" "$KWINDOW" "$kfirst" "$first_s" \
	"$sreads" "$((${sbytes:-0} / 1048576))" "$shadow_s")"
[ -n "${ONLY_KILL:-}" ] && exit 0
start 1

# ---- freeze (split brain)
owner_is 2
mkfifo "$tmp/qio.in"
qemu-io -f raw "$(url 2)" <"$tmp/qio.in" >"$tmp/qio.out" 2>&1 &
qio=$!
exec 7>"$tmp/qio.in"
echo "read 250M 64k" >&7
load freeze 20 2 1
sleep 5
kill -STOP "${PID[2]}"
echo "read -P 0x5a 250M 64k" >&7
owner_is 1
qemu-io -f raw -c 'write -P 0x5a 250M 64k' "$(url 1)" >/dev/null 2>&1
kill -CONT "${PID[2]}"
wait "$LOAD" || true
echo quit >&7
exec 7>&-
for _ in $(seq 1 100); do kill -0 "$qio" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$qio" 2>/dev/null || true
old=answered
grep -qi "pattern verification failed" "$tmp/qio.out" && old=STALE
grep -qi "NOT READY\|failed" "$tmp/qio.out" && ! grep -qi "pattern verification failed" "$tmp/qio.out" && old=refused
sum=$(tail -n 1 "$tmp/freeze.out")
printf 'failover scenario=freeze gap_s=%.2f errors=%s stale=%s old_path=%s\n' \
	"$(echo "$(field max_us "$sum") / 1000000" | bc -l)" "$(field errors "$sum")" \
	"$(field verify_errors "$sum")" "$old"

# ---- planned: SIGTERM the owner (gateway 1)
load planned 15 1 2
sleep 5
kill -TERM "${PID[1]}"
stopped 1
report planned
start 1

# ---- failback: gateway 1 warm, 1% rewritten through gateway 2, gateway 1 again
"$CTL" --socket "${SOCK[2]}" handover /disks/d >/dev/null
owner_is 1
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time 20 "$(url 1)" >/dev/null 2>&1 # warm
read -r h0 q0 <<<"$(hits_reqs 1)"
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time "$WINDOW" "$(url 1)" >/dev/null 2>&1
read -r h1 q1 <<<"$(hits_reqs 1)"
before=$(echo "($h1 - $h0) * 100 / ($q1 - $q0)" | bc -l)
"$CTL" --socket "${SOCK[1]}" handover /disks/d >/dev/null
owner_is 2
bytes=$(python3 -c "import sys; s='$SIZE'; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")
n=$((bytes / 100 / 65536))
cmds=()
for off in $(python3 -c "import random; print(' '.join(str(random.randrange($bytes // 65536) * 65536) for _ in range($n)))"); do
	cmds+=(-c "write -P 0x77 $off 64k")
done
qemu-io -f raw "${cmds[@]}" "$(url 2)" >/dev/null 2>&1
# reads only (the 1% stays 1%), unverified: the qemu-io data carries no verify pattern
"$BENCH" --quiet --read 100 --qd 8 --bs 64K --time 12 --path-timeout 2 \
	--path "127.0.0.1:${PORT[1]}" "$(url 2)" >"$tmp/failback.out" 2>"$tmp/failback.err" &
LOAD=$!
sleep 4
"$CTL" --socket "${SOCK[2]}" handover /disks/d >/dev/null
owner_is 1
read -r h0 q0 <<<"$(hits_reqs 1)"
t0=$(date +%s.%N) # the window starts at the failback
wait "$LOAD" || true
kept=$(gstat 1 'r["caches"]["ssd"]["disks"]["d"]["warm_kept"]')
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --time "$WINDOW" "$(url 1)" >/dev/null 2>&1
read -r h1 q1 <<<"$(hits_reqs 1)"
after=$(echo "($h1 - $h0) * 100 / ($q1 - $q0)" | bc -l)
window=$(printf '%.0f' "$(echo "$(date +%s.%N) - $t0" | bc -l)")
# stale: 64 KiB blocks read through gateway 1 that differ from the image in the cluster
rbd export rbd/origin "$tmp/image.raw" >/dev/null 2>&1
qemu-img convert -f raw -O raw "$(url 1)" "$tmp/read.raw"
stale=$(python3 - "$tmp/image.raw" "$tmp/read.raw" <<'PY'
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
)
sum=$(tail -n 1 "$tmp/failback.out")
printf 'failover scenario=failback gap_s=%.2f errors=%s stale=%s retained_pct=%.2f kept=%s window_s=%s hit_before_pct=%.2f hit_after_pct=%.2f misses_after=%s rewritten=%s\n' \
	"$(echo "$(field max_us "$sum") / 1000000" | bc -l)" "$(field errors "$sum")" "$stale" \
	"$(echo "$after * 100 / $before" | bc -l)" "$kept" "$window" "$before" "$after" \
	"$(((q1 - q0) - (h1 - h0)))" "$n"

# ---- ping-pong: both gateways ask for the image, alternately, every 0.5 s for 30 s
e0=$(gstat 1 'r["disks"]["d"]["ownership"]["epoch"]')
asks=0
for i in $(seq 1 60); do
	g=$((i % 2 + 1))
	"$CTL" --socket "${SOCK[$g]}" takeover /disks/d >/dev/null 2>&1 || true
	asks=$((asks + 1))
	sleep 0.5
done
sleep 1
e1=$(gstat 1 'r["disks"]["d"]["ownership"]["epoch"]')
printf 'failover scenario=pingpong requests=%s seconds=30 moves=%s hold_s=10\n' "$asks" "$((e1 - e0))"
