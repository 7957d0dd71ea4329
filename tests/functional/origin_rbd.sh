#!/bin/bash
# origin_rbd.sh - issue 9: a Ceph RBD image as a disk's origin, on a
# throw-away single-node cluster this test starts itself (RAM-backed,
# loopback only, stopped at the end):
#  - qemu-img writes through hotlund; `rbd export` of the image is identical;
#  - a cached RBD disk survives kill -9 without serving a stale block;
#  - an image replaced with `rbd import` while hotlund is stopped is served
#    fresh after restart (its image id changed: the cache drops its blocks);
#  - a snapshot origin (@SNAP) is a write-protected LUN.
. "$(dirname "$0")/lib.sh"
hl_need qemu-img python3 rbd ceph-mon ceph-osd cmp
"$HL_BUILDDIR/hotlund" --version | grep -qw rbd || hl_skip "hotlund built without librbd"
MINI_CEPH=${HL_MINI_CEPH:-$HL_SRCDIR/../shared/tools/mini-ceph.sh}
[ -x "$MINI_CEPH" ] || hl_skip "no single-node Ceph helper at $MINI_CEPH"

tmp=$(hl_tmpdir)
cluster=$tmp/ceph
MINI_CEPH_QUIET=1 "$MINI_CEPH" up "$cluster" origin:128M >"$tmp/ceph-up.log" 2>&1 ||
	hl_fail "single-node Ceph did not start: $(tail -5 "$tmp/ceph-up.log")"
ceph_down() { MINI_CEPH_QUIET=1 "$MINI_CEPH" down "$cluster" >/dev/null 2>&1; }
# hotlund goes first: librbd cannot close an image once the cluster is gone
trap 'rc=$?; for p in "${HL_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done; sleep 1; ceph_down; (exit $rc); hl_cleanup' EXIT
export CEPH_CONF=$cluster/ceph.conf
rbd snap create rbd/origin@empty >/dev/null || hl_fail "rbd snap create"

port=$(hl_free_port)
st=$tmp/state
mkdir -p "$st"
cat >"$tmp/c.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $st/ctl.sock

[cache c0]
device = $tmp/c0.cache
size = 64M
block_size = 64K
admission = always

[disk plain]
origin = rbd:rbd/origin
rbd_conf = $cluster/ceph.conf
rbd_id = admin

[disk snap]
origin = rbd:rbd/origin@empty
rbd_conf = $cluster/ceph.conf

[target iqn.2026-11.io.hotlun:rbd]
lun.0 = plain
lun.1 = snap
allow = ALL
CONF
hl_start_hotlund "$tmp/c.conf"
url=iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:rbd

head -c 32M /dev/urandom >"$tmp/a.img"
qemu-img convert -n -f raw -O raw "$tmp/a.img" "$url/0" || hl_fail "qemu-img convert to the RBD LUN"
rbd export rbd/origin "$tmp/export.img" >"$tmp/export.log" 2>&1 || hl_fail "rbd export: $(tail -3 "$tmp/export.log")"
cmp -n $((32 << 20)) "$tmp/a.img" "$tmp/export.img" || hl_fail "rbd export differs from what was written through hotlund"

# the snapshot LUN: write-protected, reads the snapshot's (empty) content
out=$(iscsi-inq "$url/1" 2>&1) || hl_fail "iscsi-inq on the snapshot LUN: $out"
if qemu-img convert -n -f raw -O raw "$tmp/a.img" "$url/1" 2>/dev/null; then
	hl_fail "a write to a snapshot LUN succeeded"
fi
hl_stop

# --- cached RBD disk: kill -9 serves no stale block ---
sed -i 's/^origin = rbd:rbd\/origin$/origin = rbd:rbd\/origin\ncache = c0/' "$tmp/c.conf"
hl_start_hotlund "$tmp/c.conf"
qemu-img convert -n -f raw -O raw "$tmp/a.img" "$url/0" || hl_fail "write A through the cache"
"$HL_BUILDDIR/hotlun-bench" --quiet --workload seq --bs 64K --qd 4 --read 100 --count 512 "$url/0" >/dev/null 2>&1 ||
	hl_fail "reading A back through the cache"
head -c 32M /dev/urandom >"$tmp/b.img"
qemu-img convert -n -f raw -O raw "$tmp/b.img" "$url/0" || hl_fail "write B through the cache"
kill -KILL "$HL_PID"
wait "$HL_PID" 2>/dev/null
hl_forget "$HL_PID"
hl_start_hotlund "$tmp/c.conf"
rm -f "$tmp/export.img"
rbd export rbd/origin "$tmp/export.img" >"$tmp/export.log" 2>&1 || hl_fail "rbd export: $(tail -3 "$tmp/export.log")"
cmp -n $((32 << 20)) "$tmp/b.img" "$tmp/export.img" || hl_fail "after kill -9 the image lacks B"
qemu-img convert -f raw -O raw "$url/0" "$tmp/read.img" || hl_fail "read after kill -9"
cmp -n $((32 << 20)) "$tmp/b.img" "$tmp/read.img" || hl_fail "stale data served after kill -9"

# --- rbd import while hotlund is stopped: served fresh ---
"$HL_BUILDDIR/hotlun-bench" --quiet --workload seq --bs 64K --qd 4 --read 100 --count 512 "$url/0" >/dev/null 2>&1
hl_stop
head -c 128M /dev/urandom >"$tmp/c.img"
rbd snap purge rbd/origin >/dev/null 2>&1
rbd rm rbd/origin >/dev/null 2>&1 || hl_fail "rbd rm"
rbd import "$tmp/c.img" rbd/origin >/dev/null 2>&1 || hl_fail "rbd import"
rbd snap create rbd/origin@empty >/dev/null || hl_fail "rbd snap create"
hl_start_hotlund "$tmp/c.conf"
qemu-img convert -f raw -O raw "$url/0" "$tmp/read2.img" || hl_fail "read after rbd import"
cmp "$tmp/c.img" "$tmp/read2.img" || hl_fail "the cache served blocks of the image that rbd import replaced"
hl_stop
echo "origin_rbd: OK"
