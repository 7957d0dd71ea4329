#!/bin/bash
# stats_exact.sh - the counters are what the client did, in every view
# (issue 28, item 4; docs/metrics.md): a gateway (gateway 1 of 1,2) caches
# a shared disk whose origin is a "SAN" LUN (a third hotlund); hotlun-bench
# sends fixed counts of 64 KiB reads and writes through it: a cold cache,
# a warm one, then a failback (the disk handed to gateway 2 and back). After
# each phase, with nothing in flight, one stats reply (hotlunctl stats
# --json), a scrape of /metrics and hotlun-snmp (a private snmpd) must all
# say exactly how many commands and bytes the client sent, and agree on
# how many reads hit, partly hit and missed (the disk's latency split by
# source too). While the warm phase runs, each stats reply and each scrape
# must add up by itself (hits + partials + misses = reads, cache bytes +
# origin bytes = bytes read) and no ratio may leave [0, 1]. The service
# counters too: every view counts the sessions the client logged in, and
# each of hotlun-snmp's service scalars equals the stats replies taken
# just before and after it.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need curl
. "$HL_SRCDIR/tests/functional/snmp_lib.sh"
CTL=$HL_BUILDDIR/hotlunctl
BS=65536

# the SAN
HL_IQN=$HL_IQN_PREFIX:exact-san hl_target_start --size 64M
SAN_URL=$HL_URL

# two gateways; gateway 1's control socket is $T/ctl.sock (snmp_lib's)
IQN=$HL_IQN_PREFIX:exact-gw
declare -A PORT SOCKS
MP=$(hl_free_port)
for g in 1 2; do
	PORT[$g]=$(hl_free_port)
	st=$T
	[ "$g" = 2 ] && st=$T/gw2
	mkdir -p "$st"
	truncate -s 64M "$st/cache.img"
	SOCKS[$g]=$st/ctl.sock
	hl_cache_front_conf "$st/gw$g.conf" "${PORT[$g]}" "$st" "$IQN" "$SAN_URL" \
		device="$st/cache.img" size=64M block_size=64K admission=always
	sed -i "s|^threads = 2$|&\ngateway = $g\ngateways = 1,2|" "$st/gw$g.conf"
	sed -i "s|^cache = ssd$|&\nserial = exact0001\nnaa = 6001405aa0000000000000000000e8ac|" "$st/gw$g.conf"
done
sed -i "s|^gateway = 1$|&\nmetrics_listen = 127.0.0.1:$MP|" "$T/gw1.conf"
URL=iscsi://127.0.0.1:${PORT[1]}/$IQN/0

alua() {
	"$CTL" --socket "${SOCKS[$1]}" stats --json 2>/dev/null | python3 -c \
		'import json,sys; print(json.load(sys.stdin)["disks"]["san"]["ownership"]["alua"])' 2>/dev/null
}
wait_owner() {
	for _ in $(seq 1 300); do
		[ "$(alua "$1")" = active/optimized ] && return 0
		sleep 0.1
	done
	hl_fail "gateway $1 never became the owner ($(alua "$1"))"
}
idle() { hl_cache_idle "$T/ctl.sock" ssd || hl_fail "the cache never went idle"; }

hl_start_hotlund "$T/gw1.conf"
GW1=$HL_PID
wait_owner 1
hl_start_hotlund "$T/gw2/gw2.conf"
GW2=$HL_PID
hl_wait_port "$GW1" 127.0.0.1 "$MP" "$HL_LOG"
start_snmpd
start_subagent

# check PHASE READS WRITES LOGINS: every view equals the client's totals
check() {
	local phase=$1 reads=$2 writes=$3 logins=$4 idx
	idle
	# the service scalars against two stats replies around them (snmp_lib.sh)
	service_now "$T/svc.$phase"
	stats
	curl -sf "http://127.0.0.1:$MP/metrics" >"$T/metrics.txt" || hl_fail "$phase: no scrape"
	idx=$(disk_index san)
	[ -n "$idx" ] || hl_fail "$phase: SNMP has no disk san"
	# SNMP polls the control socket every 200 ms: wait until it shows this phase
	wait_equal "$phase reads" hlDiskReadCmds "$idx" "$reads" >/dev/null
	snmp=""
	for o in hlDiskReadCmds hlDiskWriteCmds hlDiskReadBytes hlDiskWriteBytes hlDiskErrors \
		hlDiskReadHits hlDiskReadPartialHits hlDiskReadMisses hlDiskHitRatio \
		hlDiskBytesFromCache hlDiskBytesFromOrigin; do
		snmp+="$o=$(sget "$o" "$idx") "
	done
	for o in hlWriteBufferLimit hlWriteBufferTaskSetFull hlAuthFailures; do
		snmp+="$o=$(sget "$o" 0) "
	done
	snmp+="hlLogins=$(svc "$T/svc.$phase" hlLogins) hlLoginFailures=$(svc "$T/svc.$phase" hlLoginFailures) "
	python3 - "$phase" "$reads" "$writes" "$BS" "$T/stats.json" "$T/metrics.txt" "$snmp" "$logins" <<'PY' ||
import json, re, sys
phase, R, W, BS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
L = int(sys.argv[8])
s = json.load(open(sys.argv[5]))
snmp = dict(kv.split("=", 1) for kv in sys.argv[7].split())
m = {}
for line in open(sys.argv[6]):
    if line.startswith("#") or not line.strip():
        continue
    name, _, rest = line.rstrip("\n").partition("{")
    if rest:
        labels, _, value = rest.rpartition("} ")
    else:
        name, _, value = line.rstrip("\n").partition(" ")
        labels = ""
    m[(name, labels)] = float(value)
bad = []
def eq(what, got, want):
    if got != want:
        bad.append(f"{what}: {got}, want {want}")

d = s["disks"]["san"]
c = s["caches"]["ssd"]
cd = c["disks"]["san"]
# the stats reply: the client's counts
eq("read_cmds", d["read_cmds"], R)
eq("write_cmds", d["write_cmds"], W)
eq("read_bytes", d["read_bytes"], R * BS)
eq("write_bytes", d["write_bytes"], W * BS)
eq("errors", d["errors"], 0)
eq("read latency count", sum(d["read_latency_log2_us"]), R)
eq("write latency count", sum(d["write_latency_log2_us"]), W)
by = {k: sum(v) for k, v in d["read_latency_by_source_log2_us"].items()}
eq("reads by source", sum(by.values()), R)
for x in (cd, c):
    w = "cache disk" if x is cd else "cache"
    eq(f"{w} read_reqs", x["read_reqs"], R)
    eq(f"{w} hits+partial+misses", x["read_hits"] + x["read_partial"] + x["read_misses"], R)
    eq(f"{w} bytes cache+origin", x["bytes_read_cache"] + x["bytes_read_origin"], R * BS)
    eq(f"{w} bytes_read", x["bytes_read"], R * BS)
    eq(f"{w} write_reqs", x["write_reqs"], W)
    if not 0 <= x["hit_ratio"] <= 1:
        bad.append(f"{w} hit_ratio {x['hit_ratio']}")
eq("hit_retries", c["hit_retries"], 0)
# the disk's latency split is the cache's own split
eq("reads tagged hit", by["hit"], cd["read_hits"])
eq("reads tagged partial", by["partial"], cd["read_partial"])
eq("reads tagged miss", by["miss"], cd["read_misses"])
eq("reads tagged uncached", by["uncached"], 0)
# one login per hotlun-bench run, none failed
eq("logins", s["iscsi"]["logins"], L)
eq("login failures", s["iscsi"]["login_failures"], 0)

# the scrape: the same numbers
def g(name, **labels):
    key = ",".join(f'{k}="{v}"' for k, v in labels.items())
    if (name, key) not in m:
        bad.append(f"metrics: no {name}{{{key}}}")
        return None
    return m[(name, key)]
eq("metrics reads", g("hotlun_disk_reads_completed_total", disk="san"), R)
eq("metrics writes", g("hotlun_disk_writes_completed_total", disk="san"), W)
eq("metrics read bytes", g("hotlun_disk_read_bytes_total", disk="san"), R * BS)
eq("metrics written bytes", g("hotlun_disk_written_bytes_total", disk="san"), W * BS)
for src in ("hit", "partial", "miss", "uncached"):
    eq(f"metrics latency count {src}",
       g("hotlun_disk_read_latency_seconds_count", disk="san", source=src), by[src])
    eq(f"metrics latency +Inf {src}",
       g("hotlun_disk_read_latency_seconds_bucket", disk="san", source=src, le="+Inf"), by[src])
res = {r: g("hotlun_cache_reads_total", cache="ssd", disk="san", result=r)
       for r in ("hit", "partial", "miss")}
eq("metrics cache hits", res["hit"], cd["read_hits"])
eq("metrics cache partial", res["partial"], cd["read_partial"])
eq("metrics cache misses", res["miss"], cd["read_misses"])
eq("metrics cache reads", sum(v or 0 for v in res.values()), R)
eq("metrics cache bytes", (g("hotlun_cache_read_bytes_total", cache="ssd", disk="san", source="cache") or 0)
   + (g("hotlun_cache_read_bytes_total", cache="ssd", disk="san", source="origin") or 0), R * BS)
eq("metrics cache writes", g("hotlun_cache_writes_total", cache="ssd", disk="san"), W)
eq("metrics write budget", g("hotlun_iscsi_write_buffer_limit_bytes"), s["write_buffers"]["limit"])
eq("metrics scratch budget", g("hotlun_scsi_scratch_buffer_limit_bytes"), s["scratch_buffers"]["limit"])
eq("scratch budget default", s["scratch_buffers"]["limit"], 256 << 20)
eq("scratch held when idle", g("hotlun_scsi_scratch_buffer_used_bytes"), 0)
eq("scratch refusals", g("hotlun_scsi_scratch_buffer_refused_total"), s["scratch_buffers"]["refused"])
eq("metrics owned", g("hotlun_disk_owned", disk="san"), 1)
eq("metrics logins", g("hotlun_iscsi_logins_total"), L)
eq("metrics login failures", g("hotlun_iscsi_login_failures_total"), 0)

# SNMP: the same numbers
n = lambda k: int(snmp[k])
eq("snmp reads", n("hlDiskReadCmds"), R)
eq("snmp writes", n("hlDiskWriteCmds"), W)
eq("snmp read bytes", n("hlDiskReadBytes"), R * BS)
eq("snmp write bytes", n("hlDiskWriteBytes"), W * BS)
eq("snmp errors", n("hlDiskErrors"), 0)
eq("snmp hits", n("hlDiskReadHits"), cd["read_hits"])
eq("snmp partial", n("hlDiskReadPartialHits"), cd["read_partial"])
eq("snmp misses", n("hlDiskReadMisses"), cd["read_misses"])
eq("snmp hits+partial+misses", n("hlDiskReadHits") + n("hlDiskReadPartialHits") + n("hlDiskReadMisses"), R)
eq("snmp bytes", n("hlDiskBytesFromCache") + n("hlDiskBytesFromOrigin"), R * BS)
if not 0 <= n("hlDiskHitRatio") <= 10000:
    bad.append(f"snmp hit ratio {n('hlDiskHitRatio')}")
eq("snmp write budget", n("hlWriteBufferLimit"), s["write_buffers"]["limit"])
eq("snmp task set full", n("hlWriteBufferTaskSetFull"), s["write_buffers"]["task_set_full"])
eq("snmp auth failures", n("hlAuthFailures"), s["iscsi"]["auth_failures"])
eq("snmp logins", n("hlLogins"), L)
eq("snmp login failures", n("hlLoginFailures"), 0)
if bad:
    print(f"{phase}:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"{phase}: reads {R} ({cd['read_hits']} hits, {cd['read_partial']} partial, "
      f"{cd['read_misses']} misses), writes {W}, logins {L}: stats, metrics and SNMP agree")
PY
		hl_fail "$phase: the counters are not what the client did"
}

# load PHASE: the bench with fixed counts; its own count must be what it says
bench_n() {
	"$BENCH" --quiet --initiator "$INITIATOR" --bs 64K --qd 4 --range 16M "$@" "$URL" \
		>>"$T/bench.log" 2>&1 || hl_fail "hotlun-bench $* failed: $(tail -3 "$T/bench.log")"
	tail -n 1 "$T/bench.log" | grep -q ' errors=0 ' || hl_fail "I/O errors: $(tail -1 "$T/bench.log")"
}

# 1. cold
bench_n --read 100 --count 600 --seed 1
bench_n --read 0 --count 200 --seed 2
check cold 600 200 2

# 2. warm, while each stats reply and scrape adds up by itself
"$BENCH" --quiet --initiator "$INITIATOR" --bs 64K --qd 8 --range 16M --read 100 --count 6000 \
	--seed 1 "$URL" >"$T/warm.out" 2>&1 &
WARM=$!
HL_PIDS+=("$WARM")
HL_PID_NAMES+=(hotlun-bench)
python3 - "$CTL" "$T/ctl.sock" "$MP" <<'PY' || hl_fail "a reply under load did not add up"
import json, subprocess, sys, time, urllib.request
ctl, sock, mp = sys.argv[1:4]
bad = []
for i in range(12):
    s = json.loads(subprocess.run([ctl, "--socket", sock, "stats", "--json"], check=True,
                                  capture_output=True, text=True).stdout)
    for name, x in [("cache", s["caches"]["ssd"]), ("cache disk", s["caches"]["ssd"]["disks"]["san"])]:
        if x["read_hits"] + x["read_partial"] + x["read_misses"] != x["read_reqs"]:
            bad.append(f"{i} {name}: hits+partial+misses != reads: {x}")
        if x["bytes_read_cache"] + x["bytes_read_origin"] != x["bytes_read"]:
            bad.append(f"{i} {name}: cache+origin bytes != bytes read")
        if not 0 <= x["hit_ratio"] <= 1 or not x.get("write_ratio", 0) >= 0:
            bad.append(f"{i} {name}: ratio out of [0, 1]: {x['hit_ratio']}")
    text = urllib.request.urlopen(f"http://127.0.0.1:{mp}/metrics", timeout=10).read().decode()
    v = {}
    for line in text.splitlines():
        if line.startswith("hotlun_cache_read_bytes_total{") or line.startswith("hotlun_cache_reads_total{"):
            k, _, n = line.rpartition(" ")
            v[k] = float(n)
    if not v:
        bad.append(f"{i}: scrape without cache counters")
    time.sleep(0.1)
if bad:
    print("\n".join(bad[:10]), file=sys.stderr)
    sys.exit(1)
print("12 replies and scrapes under load: each adds up, every ratio in [0, 1]")
PY
wait "$WARM" || hl_fail "warm load failed: $(tail -3 "$T/warm.out")"
hl_forget "$WARM"
grep -q ' errors=0 ' "$T/warm.out" || hl_fail "warm load: I/O errors"
check warm 6600 200 3
hits=$(hl_cache_stat "$T/ctl.sock" ssd read_hits san)
[ "$hits" -gt 3000 ] || hl_fail "the warm phase hit only $hits times"

# 3. failback: to gateway 2 and back; then reads through gateway 1 again
"$CTL" --socket "${SOCKS[1]}" handover /disks/san >/dev/null || hl_fail "handover to gateway 2"
wait_owner 2
"$CTL" --socket "${SOCKS[2]}" handover /disks/san >/dev/null || hl_fail "handover back to gateway 1"
wait_owner 1
bench_n --read 100 --count 600 --seed 3
check failback 7200 200 4
hl_log "cold, warm and failback: stats, metrics and SNMP equal the client's counts"
# one at a time, the standby first: stopped together, the owner would wait for a peer
# to take the disk while that peer stops too
hl_stop "$GW2"
hl_stop "$GW1"
exit 0
