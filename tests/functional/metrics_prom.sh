#!/bin/bash
# metrics_prom.sh - the Prometheus endpoint with Prometheus's own tools
# (issue 28; docs/metrics.md): two hotlund serve /metrics (a "SAN" with a
# plain file LUN, and a gateway (gateway = 1 of 1,2) whose shared disk sits
# on the SAN's LUN behind a cache); a real Prometheus server (Debian's
# package, started here on loopback with a throw-away config and data dir,
# stopped by PID) scrapes both every second while hotlun-bench runs, and
# loads contrib/prometheus/hotlun-rules.yml. Then:
#  - `promtool check metrics` accepts a scrape taken under load (format and
#    naming lint), `promtool check rules` the rules file;
#  - every expression of contrib/grafana/hotlun.json returns data through
#    Prometheus's HTTP API (a panel that names a metric that does not
#    exist fails the test);
#  - every rule evaluates without error; every recording rule returns data,
#    and so does each side of every alert's comparison;
#  - metrics_listen moves and stops with `hotlunctl set`.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need prometheus promtool curl python3
CTL=$HL_BUILDDIR/hotlunctl
T=$(hl_tmpdir)
RULES=$HL_SRCDIR/contrib/prometheus/hotlun-rules.yml
DASH=$HL_SRCDIR/contrib/grafana/hotlun.json

promtool check rules "$RULES" >"$T/rules.out" 2>&1 || hl_fail "promtool check rules: $(cat "$T/rules.out")"

# the SAN: a plain file LUN (its reads are "uncached"), with its own endpoint
MP_SAN=$(hl_free_port)
HL_IQN=$HL_IQN_PREFIX:metrics-san HL_GLOBAL_EXTRA="metrics_listen = 127.0.0.1:$MP_SAN" \
	hl_target_start --size 64M
SAN_URL=$HL_URL

# the gateway: disk "san" on the SAN's LUN, cached, shared (gateway 1 of 1,2)
MP_GW=$(hl_free_port)
GW_PORT=$(hl_free_port)
IQN=$HL_IQN_PREFIX:metrics-gw
mkdir -p "$T/gw"
truncate -s 64M "$T/gw/cache.img"
hl_cache_front_conf "$T/gw/hotlund.conf" "$GW_PORT" "$T/gw" "$IQN" "$SAN_URL" \
	device="$T/gw/cache.img" size=64M block_size=64K admission=always
sed -i "s|^threads = 2$|&\ngateway = 1\ngateways = 1,2\nmetrics_listen = 127.0.0.1:$MP_GW|" "$T/gw/hotlund.conf"
sed -i "s|^cache = ssd$|&\nserial = metrics0001\nnaa = 6001405aa0000000000000000000c0de|" "$T/gw/hotlund.conf"
hl_start_hotlund "$T/gw/hotlund.conf"
GW_PID=$HL_PID
SOCK=$T/gw/ctl.sock
GW_URL=iscsi://127.0.0.1:$GW_PORT/$IQN/0
for _ in $(seq 1 200); do
	"$CTL" --socket "$SOCK" stats --json 2>/dev/null | python3 -c \
		'import json,sys; sys.exit(json.load(sys.stdin)["disks"]["san"]["ownership"]["alua"] != "active/optimized")' &&
		break
	sleep 0.1
done
hl_wait_port "$GW_PID" 127.0.0.1 "$MP_GW" "$HL_LOG"

# Prometheus: scrapes both every second, evaluates the shipped rules every second
PP=$(hl_free_port)
mkdir -p "$T/prom/data"
cp "$RULES" "$T/prom/hotlun-rules.yml"
cat >"$T/prom/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - hotlun-rules.yml
scrape_configs:
  - job_name: hotlun
    static_configs:
      - targets: ['127.0.0.1:$MP_SAN', '127.0.0.1:$MP_GW']
EOF
promtool check config "$T/prom/prometheus.yml" >"$T/config.out" 2>&1 ||
	hl_fail "promtool check config: $(cat "$T/config.out")"
hl_spawn prometheus "$T/prom.log" prometheus --config.file="$T/prom/prometheus.yml" \
	--storage.tsdb.path="$T/prom/data" --web.listen-address="127.0.0.1:$PP" \
	--storage.tsdb.retention.time=1h
PROM_PID=$HL_LAST_PID
hl_wait_port "$PROM_PID" 127.0.0.1 "$PP" "$T/prom.log" 60

# load through the gateway: reads and writes, a cold then warming cache
"$BENCH" --quiet --read 70 --qd 8 --bs 16K --range 32M --time 25 "$GW_URL" >"$T/bench.out" 2>&1 &
BENCH_PID=$!
HL_PIDS+=("$BENCH_PID")
HL_PID_NAMES+=(hotlun-bench)
sleep 8
curl -sf "http://127.0.0.1:$MP_GW/metrics" >"$T/scrape.txt" || hl_fail "no scrape from the gateway"
promtool check metrics <"$T/scrape.txt" >"$T/lint.out" 2>&1 ||
	hl_fail "promtool check metrics: $(head -20 "$T/lint.out")"
curl -sf "http://127.0.0.1:$MP_SAN/metrics" | promtool check metrics >"$T/lint2.out" 2>&1 ||
	hl_fail "promtool check metrics (SAN): $(head -20 "$T/lint2.out")"
hl_log "promtool check metrics: $(wc -l <"$T/scrape.txt") lines, no complaint"
wait "$BENCH_PID" || hl_fail "hotlun-bench failed: $(tail -3 "$T/bench.out")"
hl_forget "$BENCH_PID"
sleep 3 # the last scrapes and rule evaluations

python3 - "$PP" "$DASH" "$RULES" <<'PY' || hl_fail "expressions without data"
import json, re, sys, urllib.parse, urllib.request
port, dash, rules = sys.argv[1:4]
api = f"http://127.0.0.1:{port}/api/v1"

def query(expr):
    url = f"{api}/query?" + urllib.parse.urlencode({"query": expr})
    try:
        r = json.load(urllib.request.urlopen(url, timeout=10))
    except urllib.error.HTTPError as e:
        return "error", json.load(e).get("error")
    if r["status"] != "success":
        return "error", r.get("error")
    return "ok", r["data"]["result"]

bad = []
def must_have_data(what, expr):
    st, res = query(expr)
    if st != "ok":
        bad.append(f"{what}: {expr}: {res}")
    elif not res:
        bad.append(f"{what}: no data: {expr}")

# every target was scraped
st, res = query('up{job="hotlun"}')
assert st == "ok" and len(res) == 2 and all(r["value"][1] == "1" for r in res), res

# Grafana: every panel's every query, template variables as "All"
d = json.load(open(dash))
n = 0
for p in d["panels"]:
    for t in p.get("targets", []):
        e = t["expr"].replace("$__rate_interval", "15s").replace("$__range", "1m")
        e = re.sub(r'\$(instance|disk|cache)\b', '.*', e)
        must_have_data(f'panel "{p["title"]}"', e)
        n += 1
for v in d["templating"]["list"]:
    m = re.match(r"label_values\((\w+), (\w+)\)", v.get("definition", ""))
    if m:
        must_have_data(f'variable {v["name"]}', f'count by ({m.group(2)}) ({m.group(1)})')

# the rules Prometheus loaded: healthy; recordings return data; alerts' operands too
r = json.load(urllib.request.urlopen(f"{api}/rules", timeout=10))
loaded = [x for g in r["data"]["groups"] for x in g["rules"]]
assert len(loaded) >= 13, loaded
for x in loaded:
    if x["health"] != "ok":
        bad.append(f'rule {x["name"]}: {x["health"]} {x.get("lastError")}')
    if x["type"] == "recording":
        must_have_data(f'recording {x["name"]}', x["name"])
        continue
    # split "A op B [and|or|unless C op D]" at the top level; each operand must have data
    expr = x["query"]
    def top_split(s, words):
        depth, out, cur, i = 0, [], "", 0
        while i < len(s):
            c = s[i]
            depth += c in "([{"
            depth -= c in ")]}"
            hit = next((w for w in words if depth == 0 and s.startswith(w, i)), None)
            if hit:
                out.append(cur); cur = ""; i += len(hit); continue
            cur += c; i += 1
        return out + [cur]
    for part in top_split(expr, [" and ", " or ", " unless "]):
        for side in top_split(part, [" >= ", " <= ", " == ", " != ", " > ", " < "]):
            side = side.strip()
            if re.fullmatch(r"[0-9.e+-]+", side):
                continue
            side = re.sub(r"^[0-9.]+ \* ", "", side)
            must_have_data(f'alert {x["name"]}', side)
    n += 1
print(f"{n} expressions checked")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
PY

# hit latency against miss latency: both seen, and hits faster on average
python3 - "$PP" <<'PY' || hl_fail "hit and miss latency not as expected"
import json, sys, urllib.parse, urllib.request
api = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?"
def q(e):
    return json.load(urllib.request.urlopen(api + urllib.parse.urlencode({"query": e})))["data"]["result"]
mean = {r["metric"]["source"]: float(r["value"][1]) for r in q(
    'sum by (source) (hotlun_disk_read_latency_seconds_sum{disk="san"})'
    ' / sum by (source) (hotlun_disk_read_latency_seconds_count{disk="san"})')}
print("mean read latency by source:", mean)
assert mean.get("hit", 0) > 0 and mean.get("miss", 0) > 0, mean
uncached = q('hotlun_disk_read_latency_seconds_count{disk="disk0",source="uncached"}')
assert uncached and float(uncached[0]["value"][1]) > 0, uncached
PY

# live changes: move the endpoint, then stop it
MP2=$(hl_free_port)
"$CTL" --socket "$SOCK" / set metrics_listen="127.0.0.1:$MP2" >"$T/set.out" 2>&1 ||
	hl_fail "set metrics_listen: $(cat "$T/set.out")"
{ curl -sf "http://127.0.0.1:$MP2/metrics" >"$T/m.txt" && grep -q '^hotlun_disk_reads_completed_total{disk="san"}' "$T/m.txt"; } ||
	hl_fail "no metrics on the new address"
hl_port_open 127.0.0.1 "$MP_GW" && hl_fail "the old metrics address still answers"
"$CTL" --socket "$SOCK" / set metrics_listen=off >"$T/set.out" 2>&1 ||
	hl_fail "set metrics_listen=off: $(cat "$T/set.out")"
hl_port_open 127.0.0.1 "$MP2" && hl_fail "metrics_listen=off still answers"
"$CTL" --socket "$SOCK" / set metrics_listen=nonsense >"$T/set.out" 2>&1 &&
	hl_fail "a bad metrics_listen was taken"
hl_check_alive "$GW_PID"
hl_log "Prometheus evaluated the dashboard and rules; metrics_listen moves and stops"
exit 0
