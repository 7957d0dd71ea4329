#!/bin/bash
# rbd_cache.sh - issue 9 benchmark: a slow RBD image (every OSD op delayed
# with osd_debug_inject_dispatch_delay), 4 KiB random reads at 64 in flight
# over a hot set that fits the cache: IOPS through hotlund without a cache,
# with hotlun's cache (warm-up included), and librbd directly (rbd bench).
# All three read the same image, exactly the size of the hot set and written
# in full first: rbd bench cannot confine itself to a range, librbd answers
# reads of never-written objects from its object map without asking the OSD,
# and with the delay on, each OSD op shard (a PG's objects) serves only about
# 95 ops/s, so two images of the same size can differ 2x by where their few
# objects land (docs/benchmarks.md). The script prints that placement.
#
#   tests/bench/rbd_cache.sh [SECONDS]      (default 30 per run)
#
# Needs: ceph-mon ceph-osd ceph-common, a build with librbd (BUILD=dir, default
# ./build); the cluster comes from tests/functional/mini_ceph.sh.
set -euo pipefail
SECS=${1:-30}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
MINI_CEPH=$SRC/tests/functional/mini_ceph.sh
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

rc=0
MINI_CEPH_QUIET=1 MINI_CEPH_CONF_EXTRA=$'[osd]\nosd_debug_inject_dispatch_delay_probability = 1\nosd_debug_inject_dispatch_delay_duration = '"$DELAY" \
	"$MINI_CEPH" up "$tmp/ceph" "hot:$HOT" 2>"$tmp/up.err" || rc=$?
if [ $rc = 3 ]; then
	echo "rbd_cache.sh: skipped: $(tail -1 "$tmp/up.err")"
	exit 0
fi
[ $rc = 0 ] || { cat "$tmp/up.err" >&2; exit 1; }
export CEPH_CONF=$tmp/ceph/ceph.conf
# every object of the image written (one thread: with more, rbd bench's
# sequential pattern splits the image and leaves objects out)
rbd bench --io-type write --io-size 4M --io-threads 1 --io-pattern seq --io-total "$HOT" rbd/hot >/dev/null 2>&1
prefix=$(rbd info rbd/hot | sed -n 's/.*block_name_prefix: //p')
shards=$(ceph daemon "$tmp/ceph/run/osd.0.asok" config get osd_op_num_shards_hdd | python3 -c 'import json, sys; print(json.load(sys.stdin)["osd_op_num_shards_hdd"])')
echo -n "hot set objects -> PG (OSD op shard of $shards):"
for o in $(rados -p rbd ls | grep "^$prefix\." | sort); do
	pg=$(ceph osd map rbd "$o" | sed -n 's/.*pg [^ ]* (1\.\([0-9a-f]*\)).*/\1/p')
	echo -n " ${o##*.}->1.$pg ($((0x$pg % shards)))"
done
echo

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/c.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/state
[cache c0]
device = $tmp/c0.cache
size = 512M
block_size = 4K
# both disks read the same image, so both read-only: a writable RBD disk
# holds the image's exclusive lock, which only one of them could have
[disk plain]
origin = rbd:rbd/hot
rbd_conf = $CEPH_CONF
read_only = yes
[disk cached]
origin = rbd:rbd/hot
rbd_conf = $CEPH_CONF
read_only = yes
cache = c0
[target iqn.2026-11.io.hotlun:rbd]
lun.0 = plain
lun.1 = cached
allow = ALL
CONF
"$BUILD/hotlund" --config "$tmp/c.conf" >"$tmp/hotlund.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

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
echo "librbd directly, same image, its own client cache on (rbd bench --io-type read --io-size 4K --io-threads 64 --io-pattern rand):"
rbd bench --io-type read --io-size 4K --io-threads 64 --io-pattern rand --io-total $((4096 * 3000)) \
	rbd/hot 2>&1 | grep -E 'elapsed|ops/sec' | tail -1
echo "librbd directly, same image, client cache off (what the OSD delivers):"
rbd bench --rbd-cache=false --io-type read --io-size 4K --io-threads 64 --io-pattern rand \
	--io-total $((4096 * 3000)) rbd/hot 2>&1 | grep -E 'elapsed|ops/sec' | tail -1
