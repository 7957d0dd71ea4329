#!/bin/bash
# rbd_cache.sh - issue 9 benchmark: a slow RBD image (every OSD op delayed
# with osd_debug_inject_dispatch_delay), 4 KiB random reads at 64 in flight
# over a hot set that fits the cache: IOPS through hotlund without a cache,
# with hotlun's cache (warm-up included), and librbd directly (rbd bench, on
# an image exactly the size of the hot set, since rbd bench cannot confine
# itself to a range and librbd answers reads of never-written objects from
# its object map without asking the OSDs).
#
#   tests/bench/rbd_cache.sh [SECONDS]      (default 30 per run)
#
# Needs: ceph-mon ceph-osd ceph-common, a build with librbd (BUILD=dir, default
# ./build), the single-node helper (MINI_CEPH, default ../shared/tools/mini-ceph.sh).
set -euo pipefail
SECS=${1:-30}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
MINI_CEPH=${MINI_CEPH:-$SRC/../shared/tools/mini-ceph.sh}
DELAY=${DELAY:-0.005}
HOT=${HOT:-8M}
tmp=$(mktemp -d /tmp/hotlun-rbd-bench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	MINI_CEPH_QUIET=1 "$MINI_CEPH" down "$tmp/ceph" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

MINI_CEPH_QUIET=1 MINI_CEPH_CONF_EXTRA=$'[osd]\nosd_debug_inject_dispatch_delay_probability = 1\nosd_debug_inject_dispatch_delay_duration = '"$DELAY" \
	"$MINI_CEPH" up "$tmp/ceph" plain:1G cached:1G "direct:$HOT" >/dev/null
export CEPH_CONF=$tmp/ceph/ceph.conf
for img in plain cached direct; do # real objects in the hot set
	rbd bench --io-type write --io-size 4M --io-threads 4 --io-total "$HOT" "rbd/$img" >/dev/null 2>&1
done

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/c.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/state
[cache c0]
device = $tmp/c0.cache
size = 512M
block_size = 4K
[disk plain]
origin = rbd:rbd/plain
rbd_conf = $CEPH_CONF
[disk cached]
origin = rbd:rbd/cached
rbd_conf = $CEPH_CONF
cache = c0
[target iqn.2026-11.io.hotlun:rbd]
lun.0 = plain
lun.1 = cached
allow = ALL
CONF
"$BUILD/hotlund" --config "$tmp/c.conf" >"$tmp/hotlund.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

url=iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:rbd
run() { # run NAME LUN
	"$BUILD/hotlun-bench" --quiet --workload uniform --range "$HOT" --bs 4K --qd 64 --read 100 \
		--time "$SECS" --label "$1" --csv "$tmp/$1.csv" "$url/$2" | tail -1
}
echo "== slow RBD (every OSD op +${DELAY}s), 4 KiB random reads, qd 64, hot set $HOT, ${SECS}s each"
plain=$(run rbd-through-hotlund 0)
cached=$(run rbd-cached-by-hotlund 1)
echo "through hotlund, no cache: $plain"
echo "through hotlund, cached:   $cached"
echo "time to 90% of the cached run's last 5 s (from its per-second CSV):"
python3 - "$tmp/rbd-cached-by-hotlund.csv" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]) if not l.startswith("#")]
rows = list(csv.DictReader(lines))
iops = [float(r["iops"]) for r in rows]
steady = sum(iops[-5:]) / max(1, len(iops[-5:]))
t = next((i + 1 for i, v in enumerate(iops) if v >= 0.9 * steady), None)
print(f"  steady {steady:.0f} IOPS, reached 90% after {t} s")
PY
echo "librbd directly, its own client cache on (rbd bench --io-type read --io-size 4K --io-threads 64 --io-pattern rand):"
rbd bench --io-type read --io-size 4K --io-threads 64 --io-pattern rand --io-total $((4096 * 20000)) \
	rbd/direct 2>&1 | grep -E 'elapsed|ops/sec' | tail -1
echo "librbd directly, client cache off (what the OSDs deliver):"
rbd bench --rbd-cache=false --io-type read --io-size 4K --io-threads 64 --io-pattern rand \
	--io-total $((4096 * 2000)) rbd/direct 2>&1 | grep -E 'elapsed|ops/sec' | tail -1
