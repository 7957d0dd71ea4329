#!/bin/bash
# stats_counts.sh - statistics must be true: a known workload (exactly N
# reads and M writes of known sizes through hotlun-bench) moves the control
# socket's per-disk counters by exactly N, M and their bytes, on a plain
# disk and on a cached one (where hits + partial hits + misses = reads).
# A partial hit (a cached block with a hole a write cut in it, in
# invalidate mode) is stitched: the counters say exactly how many bytes came
# from the cache device and how many from the origin.
. "$(dirname "$0")/lib.sh"
hl_need python3

BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_skip "hotlun-bench not built"
tmp=$(hl_tmpdir)
port=$(hl_free_port)
hl_make_disk "$tmp/plain.img" 64M
hl_make_disk "$tmp/cached.img" 64M
hl_make_disk "$tmp/inv.img" 16M
st=$tmp/state
hl_conf_global "$tmp/c.conf" "$port" "$st"
hl_conf_section "$tmp/c.conf" "cache c0" device="$tmp/c0.cache" size=32M block_size=64K admission=always
hl_conf_section "$tmp/c.conf" "cache c1" device="$tmp/c1.cache" size=16M block_size=64K admission=always \
	write_policy=invalidate
cat >>"$tmp/c.conf" <<CONF

[disk inv]
origin = file:$tmp/inv.img
cache = c1

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

[target iqn.2026-11.io.hotlun:inv]
lun.0 = inv
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

# The text form says the same as the JSON (nothing runs between the two).
# The fills and promotions of the last reads run after their replies: wait
# until the cache has nothing in flight (seen under a load of 12: used_slots
# moved between the two snapshots).
for i in $(seq 1 100); do
	stats >"$tmp/j1.json" || hl_fail "stats"
	python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["caches"]["c0"]["inflight"] != 0)' \
		"$tmp/j1.json" && break
	sleep 0.1
done
"$HL_BUILDDIR/hotlunctl" --socket "$sock" stats >"$tmp/text.out" || hl_fail "stats (text)"
stats >"$tmp/j2.json" || hl_fail "stats"
python3 - "$tmp/j1.json" "$tmp/j2.json" "$tmp/text.out" <<'PY' || hl_fail "stats text: $(cat "$tmp/text.out")"
import json, re, sys
j1, j2 = (json.load(open(f)) for f in sys.argv[1:3])
text = open(sys.argv[3]).read()
c, c2 = j1["caches"]["c0"], j2["caches"]["c0"]
keys = ("read_reqs", "read_hits", "used_slots", "nslots", "window_used_slots", "window_slots")
assert all(c[k] == c2[k] for k in keys), "counters moved while idle"
block = text[text.index("cache c0: ok"):].split("\n\n")[0]
m = re.search(r"reads +(\d+): ([\d.]+)% hits", block)
assert m and int(m.group(1)) == c["read_reqs"], block
assert abs(float(m.group(2)) - 100.0 * c["read_hits"] / c["read_reqs"]) < 0.06, block
m = re.search(r"SSD +(\d+) of (\d+) blocks used", block)
assert m and (int(m.group(1)), int(m.group(2))) == (c["used_slots"], c["nslots"]), block
assert c["used_slots"] <= c["nslots"], c
m = re.search(r"window (\d+) of (\d+) blocks", block)
assert m and (int(m.group(1)), int(m.group(2))) == (c["window_used_slots"], c["window_slots"]), block
m = re.search(r"wear +the SSD writes ([\d.]+)% of what an admit-all cache would "
              r"\(recently\); budget (\d+)%", block)
assert m and abs(float(m.group(1)) - 100 * c["write_ratio"]) < 0.06, block
assert int(m.group(2)) == c["write_budget_pct"] == 25, block
# relaxed only when under budget (warm-up wrote about an admit-all cache's bytes: not now)
assert c["write_budget_open"] == (c["write_ratio"] * 100 < 25), c
assert ("so admission is relaxed" in block) == c["write_budget_open"], block
# warm-up: the misses were filled (whole blocks), so the device wrote about
# what an admit-all cache would have
assert c["bytes_cache_write"] > 0 and 0.5 < c["write_ratio"] < 2, c
line = [l for l in text.splitlines() if l.startswith("cached ")][0]
assert line.split()[2] == str(j1["disks"]["cached"]["read_cmds"]), line
print("stats text matches the JSON")
PY
# --watch: the first screen counts since the start, the next ones the last
# interval (nothing ran: no reads per second)
timeout -s INT 2.5 "$HL_BUILDDIR/hotlunctl" --socket "$sock" stats --watch 1 >"$tmp/watch.out" 2>&1
grep -q '^since hotlund started' "$tmp/watch.out" || hl_fail "stats --watch: no first screen"
grep -q '^the last interval' "$tmp/watch.out" || hl_fail "stats --watch: no interval screen"
awk '/^the last interval/ { on = 1 } on && $1 == "cached" { print $3; exit }' "$tmp/watch.out" |
	grep -qx 0 || hl_fail "stats --watch: reads/s of an idle disk is not 0: $(cat "$tmp/watch.out")"

# Partial hit, stitched: block 0 (64K) cached, then an 8K write at 16K drops
# sectors 4-5 (invalidate mode); a 64K read then takes 56K from the cache
# device and exactly 8K from the origin.
if command -v qemu-io >/dev/null; then
	url="iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:inv/0"
	qio() { qemu-io -f raw -c "$1" "$url" >"$tmp/qio.out" 2>&1 || hl_fail "qemu-io $1: $(tail -2 "$tmp/qio.out")"; }
	idle() { # the fills of the last request are done
		for _ in $(seq 100); do
			stats | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["caches"]["c1"]["inflight"] != 0)' && return 0
			sleep 0.1
		done
		hl_fail "cache c1 never idle"
	}
	# read_counts WHAT REQS HITS PARTIAL MISSES CACHE_KIB ORIGIN_KIB: disk inv's read
	# counters moved by exactly that from $tmp/before.json to $tmp/after.json.
	read_counts() {
		python3 - "$tmp/before.json" "$tmp/after.json" "${@:2}" <<'PY' || hl_fail "$1: counters do not match"
import json, sys
b, a = (json.load(open(f))["caches"]["c1"]["disks"]["inv"] for f in sys.argv[1:3])
keys = ("read_reqs", "read_hits", "read_partial", "read_misses",
        "bytes_read_cache", "bytes_read_origin")
n = [int(v) for v in sys.argv[3:9]]
want = dict(zip(keys, n[:4] + [n[4] * 1024, n[5] * 1024]))
got = {k: a[k] - b[k] for k in keys}
assert got == want, (got, want)
PY
		echo "$1 counters match"
	}
	# counted_read WHAT QEMU-IO-COMMAND REQS HITS PARTIAL MISSES CACHE_KIB ORIGIN_KIB:
	# the command moves disk inv's read counters by exactly that
	counted_read() {
		stats >"$tmp/before.json" || hl_fail "stats"
		qio "$2"
		stats >"$tmp/after.json" || hl_fail "stats"
		read_counts "$1" "${@:3}"
	}
	qio "read -P 0 0 64k"; idle
	qio "write -P 0x5a 16k 8k"; idle
	stats >"$tmp/before.json" || hl_fail "stats"
	qio "read -P 0 0 16k"
	qio "read -P 0x5a 16k 8k"
	qio "read -P 0 24k 40k"
	stats >"$tmp/mid.json" || hl_fail "stats"
	idle
	qio "read 0 64k"
	stats >"$tmp/after.json" || hl_fail "stats"
	python3 - "$tmp/before.json" "$tmp/mid.json" "$tmp/after.json" <<'PY' || hl_fail "partial hit: counters do not match"
import json, sys
b, m, a = (json.load(open(f))["caches"]["c1"]["disks"]["inv"] for f in sys.argv[1:4])
K = 1024
d = lambda x, y, k: y[k] - x[k]
# three reads of the block: [0,16K) and [24K,64K) are hits, [16K,24K) a miss
got = {k: d(b, m, k) for k in ("read_reqs", "read_hits", "read_partial", "read_misses",
                                "bytes_read_cache", "bytes_read_origin")}
want = {"read_reqs": 3, "read_hits": 2, "read_partial": 0, "read_misses": 1,
        "bytes_read_cache": 56 * K, "bytes_read_origin": 8 * K}
assert got == want, ("checked reads", got, want)
# the miss filled the hole: the whole block is a hit now
got = {k: d(m, a, k) for k in ("read_reqs", "read_hits", "bytes_read_cache")}
assert got == {"read_reqs": 1, "read_hits": 1, "bytes_read_cache": 64 * K}, ("after fill", got)
print("partial hit counters match")
PY
	# and a true partial hit: cut a new hole, read the whole block once
	qio "write -P 0x33 40k 8k"; idle
	stats >"$tmp/before.json" || hl_fail "stats"
	qemu-io -f raw -c "read -P 0 0 16k" -c "read -P 0x5a 16k 8k" -c "read -P 0x33 40k 8k" "$url" \
		>"$tmp/qio.out" 2>&1 || hl_fail "qemu-io data check: $(tail -2 "$tmp/qio.out")"
	stats >"$tmp/after.json" || hl_fail "stats"
	read_counts "true partial hit" 3 2 0 1 24 8
	idle
	qio "write -P 0x44 8k 4k"; idle
	counted_read "stitched partial hit" "read 0 64k" 1 0 1 0 60 4
	# the stitched reply is right, byte for byte
	qemu-io -f raw -c "read -P 0 0 8k" -c "read -P 0x44 8k 4k" -c "read -P 0 12k 4k" \
		-c "read -P 0x5a 16k 8k" -c "read -P 0 24k 16k" -c "read -P 0x33 40k 8k" \
		-c "read -P 0 48k 16k" "$url" >"$tmp/qio.out" 2>&1 &&
		! grep -q "Pattern verification failed" "$tmp/qio.out" ||
		hl_fail "stitched data wrong: $(grep -m2 -i fail "$tmp/qio.out")"

	# write_policy and update_buffer change while running (cache c1, block 0 cached)
	CTL=$HL_BUILDDIR/hotlunctl
	qio "read 0 64k"; idle
	"$CTL" --socket "$sock" /caches/c1 set write_policy=update || hl_fail "write_policy change refused"
	grep -q 'cache c1: write_policy now update' "$HL_LOG" || hl_fail "the engine kept invalidating"
	qio "write -P 0x66 0 4k"; idle
	counted_read "updated while running" "read -P 0x66 0 4k" 1 1 0 0 4 0
	ub() { stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["caches"]["c1"]["update_buffer_bytes"])'; }
	[ "$(ub)" -ge 4096 ] || hl_fail "the update is not in the RAM update buffer ($(ub) bytes)"
	"$CTL" --socket "$sock" /caches/c1 set update_buffer=0 || hl_fail "update_buffer change refused"
	"$CTL" --socket "$sock" /caches/c1 get update_buffer | grep -qx 'update_buffer=0' ||
		hl_fail "update_buffer not shown as 0"
	grep -q 'cache c1: update buffer now 0 KiB (4 KiB written back)' "$HL_LOG" ||
		hl_fail "the buffer was not written back: $(grep 'update buffer now' "$HL_LOG")"
	[ "$(ub)" = 0 ] || hl_fail "update buffer still holds $(ub) bytes"
	counted_read "written back, served from the cache device" "read -P 0x66 0 4k" 1 1 0 0 4 0
	"$CTL" --socket "$sock" /caches/c1 set write_policy=invalidate update_buffer=8M ||
		hl_fail "second change refused"
	grep -q 'cache c1: update buffer now 8192 KiB' "$HL_LOG" || hl_fail "update buffer not back on"
	qio "write -P 0x77 0 4k"; idle
	counted_read "invalidated again" "read -P 0x77 0 4k" 1 0 0 1 0 4
else
	echo "stats_counts: qemu-io missing: partial-hit and live-change cases skipped"
fi

# the admission policy changes while running; geometry changes are refused
CTL=$HL_BUILDDIR/hotlunctl
"$CTL" --socket "$sock" /caches/c0 set admission=nhit:2 || hl_fail "admission change refused"
"$CTL" --socket "$sock" /caches/c0 get admission | grep -qx 'admission=nhit:2' || hl_fail "admission not changed"
grep -q 'cache c0: admission now nhit:2' "$HL_LOG" || hl_fail "the engine did not switch policy"
# and the write budget (rule 10)
"$CTL" --socket "$sock" /caches/c0 set write_budget=40% || hl_fail "write_budget change refused"
"$CTL" --socket "$sock" /caches/c0 get write_budget | grep -qx 'write_budget=40' ||
	hl_fail "write_budget not shown as 40"
grep -q 'cache c0: write_budget now 40%' "$HL_LOG" || hl_fail "the engine kept its write budget"
[ "$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["caches"]["c0"]["write_budget_pct"])')" = 40 ] ||
	hl_fail "stats do not show the new write budget"
err=$("$CTL" --socket "$sock" /caches/c0 set write_budget=101 2>&1) && hl_fail "write_budget 101 accepted"
grep -q '0..100' <<<"$err" || hl_fail "refusal does not say why: $err"
err=$("$CTL" --socket "$sock" /caches/c0 set block_size=4K 2>&1) && hl_fail "block_size changed at run time"
grep -q 'restart' <<<"$err" || hl_fail "refusal does not say why: $err"
hl_stop
echo "stats_counts: OK"
