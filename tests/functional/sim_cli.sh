#!/bin/bash
# sim_cli.sh - hotlun-sim end to end: hand-computed hit counts on small
# "blocks" traces (LRU, Belady with bypass, hotlun's default, percent
# sizes), the JSON fields scripts depend on, a vscsi v1 and v2 trace built
# here, an MSR CSV trace, and clear errors (not crashes) for bad input.
# Needs no daemon. Exit 0 pass, 1 fail, 77 skip.
set -u
SIM=${HL_BUILDDIR:-.}/hotlun-sim
[ -x "$SIM" ] || { echo "SKIP: $SIM not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
T=$(mktemp -d /tmp/hl-sim-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# jget FILE POLICY FIELD -> value of FIELD in the object whose policy is POLICY
jget() {
	python3 - "$1" "$2" "$3" <<'PY'
import json, sys
for o in json.load(open(sys.argv[1])):
    if o["policy"] == sys.argv[2]:
        print(o[sys.argv[3]])
        break
PY
}

expect() { # expect FILE POLICY FIELD VALUE
	local got
	got=$(jget "$1" "$2" "$3")
	[ "$got" = "$4" ] || fail "$2 $3: got '$got', want '$4'"
}

# 1 2 3 repeated three times, cache of 2 blocks.
printf '1\n2\n3\n1\n2\n3\n1\n2\n3\n' >"$T/cyc.blocks"
"$SIM" --format blocks --size 8K --block 4K --policy lru,belady,arc,s3fifo,default,always,nhit:2 \
	--json "$T/cyc.blocks" >"$T/cyc.json" || fail "sim exit status $?"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/cyc.json" || fail "invalid JSON"
for f in policy read_hit_ratio byte_hit_ratio cache_write_bytes reads hits; do
	[ -n "$(jget "$T/cyc.json" lru $f)" ] || fail "JSON field $f missing"
done
expect "$T/cyc.json" lru reads 9
expect "$T/cyc.json" lru hits 0                  # LRU thrashes on a loop one larger than it
expect "$T/cyc.json" lru cache_write_bytes 36864 # and writes every miss
expect "$T/cyc.json" belady hits 4               # keeps 1 and 2, bypasses 3
expect "$T/cyc.json" belady cache_write_bytes 8192
# Belady bounds every policy of the same capacity (the RAM window adds capacity: off here).
"$SIM" --format blocks --size 8K --block 4K --window 0 --policy default,always,nhit:2 \
	--json "$T/cyc.blocks" >"$T/cyc0.json" || fail "sim exit status $?"
for p in default always nhit:2; do
	hits=$(jget "$T/cyc0.json" $p hits)
	[ "$hits" -le 4 ] || fail "$p beats Belady's bound: $hits"
done

# Percent of the footprint: 100% of 3 blocks holds the loop.
"$SIM" --format blocks --size 100% --block 4K --policy lru,default --json "$T/cyc.blocks" \
	>"$T/full.json" || fail "sim exit status $?"
expect "$T/full.json" lru hits 6
expect "$T/full.json" default hits 6
expect "$T/full.json" lru cache_blocks 3

# vscsi v1 and v2: the same four requests, a read, the same read (hit), a
# write over it (update), and the read again (hit): 3 reads, 2 hits.
python3 - "$T" <<'PY'
import struct, sys
t = sys.argv[1]
reqs = [(0x28, 8, 65536), (0x28, 8, 65536), (0x2a, 8, 4096), (0x28, 8, 65536)]
with open(t + "/v1.vscsi", "wb") as f:
    for i, (op, lba, ln) in enumerate(reqs):
        f.write(struct.pack("<IIIHHQQ", i, ln, 1, op, 0x100, lba, 1000 * i))
with open(t + "/v2.vscsi", "wb") as f:
    for i, (op, lba, ln) in enumerate(reqs):
        f.write(struct.pack("<HHIIIQQQ", op, 0x200, i, ln, 1, lba, 1000 * i, 50))
with open(t + "/t.csv", "w") as f:
    for i, (op, lba, ln) in enumerate(reqs):
        f.write("%d,host,0,%s,%d,%d,100\n" % (128166372000000000 + i, "Read" if op == 0x28 else "Write", lba * 512, ln))
PY
for tr in v1.vscsi:vscsi v2.vscsi:vscsi t.csv:msr; do
	f=${tr%%:*}
	fmt=${tr##*:}
	"$SIM" --format "$fmt" --size 1M --block 64K --policy lru,default --json "$T/$f" >"$T/$f.json" ||
		fail "$f: exit status $?"
	expect "$T/$f.json" lru reads 3
	expect "$T/$f.json" lru hits 2
	expect "$T/$f.json" default hits 2
	# Two 64K fills (unaligned: 2 blocks) + the 4K update of a cached block.
	expect "$T/$f.json" default cache_write_bytes $((2 * 65536 + 4096))
	# Auto-detection picks the same format.
	"$SIM" --size 1M --block 64K --policy lru --json "$T/$f" >"$T/$f.auto" || fail "$f auto"
	cmp -s <(jget "$T/$f.json" lru hits) <(jget "$T/$f.auto" lru hits) || fail "$f auto-detect"
done

# The human table.
"$SIM" --format blocks --size 8K --block 4K --policy lru "$T/cyc.blocks" | grep -q '^lru ' ||
	fail "no table row"

# Bad input: a clear message and a non-zero status, never a crash (>= 128).
bad() { # bad DESCRIPTION ARGS...
	local d=$1 rc
	shift
	"$SIM" "$@" >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "$d: exit status $rc"
	[ -s "$T/err" ] || fail "$d: no message"
}
printf '1\nx2\n' >"$T/bad.blocks"
printf 'abc' >"$T/short.vscsi"
head -c 100 "$T/v1.vscsi" >"$T/trunc.vscsi"
printf '1,h,0,Read,10\n' >"$T/bad.csv"
bad "bad block line" --format blocks --size 8K "$T/bad.blocks"
printf '1\n4294967296\n' >"$T/high.blocks" # a cache holds the first 2^32 blocks of a disk
bad "block past 2^32" --format blocks --size 8K "$T/high.blocks"
grep -q "past the 4294967296 blocks" "$T/err" || fail "block past 2^32: $(cat "$T/err")"
bad "not vscsi" --format vscsi --size 8K "$T/short.vscsi"
bad "truncated vscsi" --format vscsi --size 8K "$T/trunc.vscsi"
bad "short csv line" --format msr --size 8K "$T/bad.csv"
bad "missing file" --size 8K "$T/nope"
bad "no size" "$T/cyc.blocks"
bad "bad size" --size 5x "$T/cyc.blocks"
bad "bad block size" --size 8K --block 3K "$T/cyc.blocks"
bad "bad policy" --size 8K --policy mru "$T/cyc.blocks"
bad "bad nhit" --size 8K --policy nhit:0 "$T/cyc.blocks"
bad "empty trace" --format blocks --size 8K /dev/null
bad "write budget over 100%" --size 8K --write-budget 101 "$T/cyc.blocks"
bad "write budget not a number" --size 8K --write-budget x "$T/cyc.blocks"
"$SIM" --size 8K --write-budget 0 "$T/cyc.blocks" >/dev/null || fail "--write-budget 0"
"$SIM" --size 8K --write-budget 40% "$T/cyc.blocks" >/dev/null || fail "--write-budget 40%"
bad "promote-max 0" --size 8K --promote-max 0 "$T/cyc.blocks"
bad "promote-max not a number" --size 8K --promote-max 2x "$T/cyc.blocks"
"$SIM" --size 8K --promote-max 4 "$T/cyc.blocks" >/dev/null || fail "--promote-max 4"
"$SIM" --size 8K --promote-max any "$T/cyc.blocks" >/dev/null || fail "--promote-max any"

[ $fails -eq 0 ] && echo "PASS: sim_cli" && exit 0
exit 1
