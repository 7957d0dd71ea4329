#!/bin/bash
# stats_counts.sh - statistics must be true: a known workload (exactly N
# reads and M writes of known sizes through hotlun-bench) moves the control
# socket's per-disk counters by exactly N, M and their bytes, on a plain
# disk and on a cached one (where hits + partial hits + misses = reads).
. "$(dirname "$0")/lib.sh"
hl_need python3

BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_skip "hotlun-bench not built"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
hl_make_disk "$tmp/plain.img" 64M
hl_make_disk "$tmp/cached.img" 64M
st=$tmp/state
mkdir -p "$st"
cat >"$tmp/c.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $st/ctl.sock

[cache c0]
device = $tmp/c0.cache
size = 32M
block_size = 64K
admission = always

[disk plain]
origin = file:$tmp/plain.img

[disk cached]
origin = file:$tmp/cached.img
cache = c0

[target iqn.2026-11.io.hotlun:plain]
lun.0 = plain
allow = ALL

[target iqn.2026-11.io.hotlun:cached]
lun.0 = cached
allow = ALL
CONF
hl_start_hotlund "$tmp/c.conf"
sock=$st/ctl.sock

stats() { "$HL_BUILDDIR/hotlunctl" --socket "$sock" stats --json; }

for disk in plain cached; do
	url="iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:$disk/0"
	stats >"$tmp/before.json" || hl_fail "stats"
	"$BENCH" --quiet --workload uniform --bs 4K --qd 8 --read 100 --count 3000 --seed 1 "$url" \
		>"$tmp/r.out" 2>&1 || hl_fail "read workload: $(tail -2 "$tmp/r.out")"
	"$BENCH" --quiet --workload uniform --bs 64K --qd 4 --read 0 --count 500 --seed 2 "$url" \
		>"$tmp/w.out" 2>&1 || hl_fail "write workload: $(tail -2 "$tmp/w.out")"
	stats >"$tmp/after.json" || hl_fail "stats"
	python3 - "$tmp/before.json" "$tmp/after.json" "$disk" <<'PY' || hl_fail "$disk: counters do not match the workload"
import json, sys
b = json.load(open(sys.argv[1])); a = json.load(open(sys.argv[2])); disk = sys.argv[3]
db, da = b["disks"][disk], a["disks"][disk]
def delta(k): return da[k] - db[k]
want = {"read_cmds": 3000, "read_bytes": 3000 * 4096, "write_cmds": 500,
        "write_bytes": 500 * 65536, "errors": 0}
bad = {k: (delta(k), v) for k, v in want.items() if delta(k) != v}
assert not bad, f"{disk}: (got, want) {bad}"
assert sum(da["read_latency_log2_us"]) - sum(db["read_latency_log2_us"]) == 3000
if disk == "cached":
    cb = b["caches"]["c0"]["disks"][disk]; ca = a["caches"]["c0"]["disks"][disk]
    d = lambda k: ca[k] - cb[k]
    assert d("read_reqs") == 3000, ("cache read_reqs", d("read_reqs"))
    assert d("read_hits") + d("read_partial") + d("read_misses") == 3000, (ca, cb)
    assert d("bytes_read_cache") + d("bytes_read_origin") == 3000 * 4096, (ca, cb)
    assert d("write_reqs") == 500, ("cache write_reqs", d("write_reqs"))
print(disk, "counters match:", {k: delta(k) for k in want})
PY
done
# the admission policy changes while running; geometry changes are refused
CTL=$HL_BUILDDIR/hotlunctl
"$CTL" --socket "$sock" /caches/c0 set admission=nhit:2 || hl_fail "admission change refused"
"$CTL" --socket "$sock" /caches/c0 get admission | grep -qx 'admission=nhit:2' || hl_fail "admission not changed"
grep -q 'cache c0: admission now nhit:2' "$HL_LOG" || hl_fail "the engine did not switch policy"
err=$("$CTL" --socket "$sock" /caches/c0 set block_size=4K 2>&1) && hl_fail "block_size changed at run time"
grep -q 'restart' <<<"$err" || hl_fail "refusal does not say why: $err"
hl_stop
echo "stats_counts: OK"
