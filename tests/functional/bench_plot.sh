#!/bin/bash
# bench_plot.sh - hotlun-bench's reports: the summary line, the per-second
# CSV, the SVG of one run and the overlay of several runs, which must render
# (rsvg-convert to PNG) at the expected size. Also: --count is exact, bad
# arguments exit 2, CHAP from the URL logs in (and a wrong secret does not).
. "$(dirname "$0")/bench_common.sh"
hl_need rsvg-convert python3

T=$(hl_tmpdir)
# The target wants CHAP: the URL's user%secret@ must reach the login.
hl_target_start --size 64M --chap benchuser benchsecret0123
hl_log "target: $HL_TARGET at $HL_CHAP_URL"
bench_run "a wrong CHAP secret is a setup error" 2 "$T/chap.out" --count 10 \
	"iscsi://benchuser%wrongsecret0123@127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN"
grep -q "login to .* failed" "$T/chap.out.err" || hl_fail "no login failure: $(cat "$T/chap.out.err")"
HL_URL=$HL_CHAP_URL

bench_run "bad workload is a usage error" 2 "$T/bad1.out" --workload zipf:-1 "$HL_URL"
grep -q "zipf needs an exponent" "$T/bad1.out.err" || hl_fail "no reason given for zipf:-1"
bench_run "bad --bs is a usage error" 2 "$T/bad2.out" --bs 1000 "$HL_URL"
bench_run "unknown target is a setup error" 2 "$T/bad3.out" --time 1 \
	"iscsi://127.0.0.1:$HL_PORT/iqn.2026-11.io.hotlun:nosuch/0"

bench_run "exact I/O count" 0 "$T/count.out" --count 1000 --qd 8 "$HL_URL"
[ "$(bench_field "$T/count.out" ios)" = 1000 ] || hl_fail "--count 1000 did $(bench_field "$T/count.out" ios)"

# Two runs, with a warm-up, that differ in queue depth; a mixed one with writes.
bench_run "run qd1" 0 "$T/qd1.out" --workload zipf:0.9 --qd 1 --warmup 1 --time 3 \
	--csv "$T/qd1.csv" --svg "$T/qd1.svg" --label "qd 1" "$HL_URL"
bench_run "run qd16" 0 "$T/qd16.out" --workload hotset:90/10 --qd 16 --sessions 2 --warmup 1 \
	--time 3 --csv "$T/qd16.csv" --label "qd 16 x 2" --svg "$T/qd16.svg" --compare "$T/qd1.csv" \
	"$HL_URL"
grep -q ">qd 1<" "$T/qd16.svg" && grep -q ">qd 16 x 2<" "$T/qd16.svg" ||
	hl_fail "--compare did not draw the earlier run"
bench_run "--compare needs --svg" 2 "$T/cmp.out" --compare "$T/qd1.csv" --count 10 "$HL_URL"
bench_run "run mixed" 0 "$T/mix.out" --read 70 --bs 4K:70,64K:30 --qd 8 --time 3 \
	--csv "$T/mix.csv" --label "70/30 mixed" "$HL_URL"

for r in qd1 qd16 mix; do
	for k in iops mbps p50_us p99_us; do
		v=$(bench_field "$T/$r.out" $k)
		[ -n "$v" ] || hl_fail "$r: no $k= in the summary: $(tail -n 1 "$T/$r.out")"
	done
	[ "$(bench_field "$T/$r.out" iops)" -gt 0 ] || hl_fail "$r: zero IOPS"
done
[ "$(bench_field "$T/mix.out" writes)" -gt 0 ] || hl_fail "mixed run wrote nothing"

# The CSV agrees with the summary: measured rows add up to the I/O count,
# warm-up rows are marked, percentiles are ordered.
python3 - "$T/qd16.csv" "$(bench_field "$T/qd16.out" ios)" "$(bench_field "$T/qd16.out" iops)" <<'PY' ||
import csv, sys
path, ios, iops = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rows = list(csv.DictReader(l for l in open(path) if not l.startswith('#')))
label = [l for l in open(path) if l.startswith('# label=')]
assert label and label[0].strip() == '# label=qd 16 x 2', label
warm = [r for r in rows if r['phase'] == 'w']
meas = [r for r in rows if r['phase'] == 'm']
assert len(warm) >= 1 and len(meas) >= 3, (len(warm), len(meas))
prev = 0.0
total = 0.0
for r in meas:
    t = float(r['t_s'])
    total += float(r['iops']) * (t - prev)
    prev = t
    p50, p99, p999, mx = (float(r[k]) for k in ('p50_us', 'p99_us', 'p999_us', 'max_us'))
    assert 0 < p50 <= p99 <= p999 <= mx * 1.02, r
    assert abs(float(r['iops']) - float(r['read_iops']) - float(r['write_iops'])) < 1, r
prev = float(warm[-1]['t_s'])
total = sum(float(r['iops']) * (float(r['t_s']) - float(p['t_s']))
            for p, r in zip([warm[-1]] + meas[:-1], meas))
assert abs(total - ios) <= 0.02 * ios + 5, (total, ios)
print("csv ok: %d warm-up rows, %d measured rows, %.0f I/Os" % (len(warm), len(meas), total))
PY
	hl_fail "CSV does not match the summary"

# Overlay the three runs and render both charts.
"$HL_BENCH" --plot "$T/all.svg" --title "bench_plot overlay" "$T/qd1.csv" "$T/qd16.csv" \
	"$T/mix.csv" >"$T/plot.out" 2>&1 || hl_fail "--plot failed: $(cat "$T/plot.out")"
grep -q "wrote $T/all.svg (3 runs)" "$T/plot.out" || hl_fail "--plot output: $(cat "$T/plot.out")"
for k in "qd 1" "qd 16 x 2" "70/30 mixed" "bench_plot overlay"; do
	grep -q "$k" "$T/all.svg" || hl_fail "legend/title '$k' missing from the overlay"
done
hl_expect_fail "--plot of a file that is not a CSV" "$HL_BENCH" --plot "$T/x.svg" "$HL_DISK"

for svg in qd1 qd16 all; do
	rsvg-convert -o "$T/$svg.png" "$T/$svg.svg" 2>"$T/$svg.rsvg.err" ||
		hl_fail "rsvg-convert $svg.svg: $(cat "$T/$svg.rsvg.err")"
	[ -s "$T/$svg.rsvg.err" ] && hl_fail "rsvg-convert warned: $(cat "$T/$svg.rsvg.err")"
	python3 - "$T/$svg.png" <<'PY' || hl_fail "$svg.png is not the expected picture"
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
w, h = struct.unpack('>II', data[16:24])
assert data[12:16] == b'IHDR' and w == 960 and 500 < h < 900, (w, h)
# decode enough to know it is not blank: count distinct colours in the image
pos, idat = 8, b''
while pos < len(data):
    n, = struct.unpack('>I', data[pos:pos + 4]); typ = data[pos + 4:pos + 8]
    if typ == b'IDAT':
        idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
colours = len(set(raw[i:i + 3] for i in range(0, min(len(raw), 2_000_000), 3)))
assert colours > 20, colours
print("png ok: %dx%d, %d bytes" % (w, h, len(data)))
PY
done

if [ -n "${HL_BENCH_KEEP_PLOTS:-}" ]; then
	mkdir -p "$HL_BENCH_KEEP_PLOTS" && cp "$T"/*.svg "$T"/*.png "$T"/*.csv "$HL_BENCH_KEEP_PLOTS"/
fi
[ "$HL_TARGET" = tgt ] || hl_check_alive
hl_target_stop
exit 0
