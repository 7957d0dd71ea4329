#!/bin/bash
# ctl_roundtrip.sh - issue 19 item 10: the control plane reads back what it
# shows. A walk over the whole tree (every node `ls` lists) gets each node's
# parameters with hotlunctl and sets every settable one back to the value
# get printed, through hotlunctl (key=value) and through the raw socket
# (the JSON value): each set succeeds and no get changes (log_level used to
# print 6, which set refused). Also: `luns create /disks/d lun=N` (the shell
# sends N as a string; it failed for every N), and `/sessions/ID info` for a
# live session shows its initiator, target, portal, connection and
# negotiated parameters ("no such path" before).
. "$(dirname "$0")/lib.sh"
hl_need python3 iscsi-perf

CTL=$HL_BUILDDIR/hotlunctl
tmp=$(hl_tmpdir)
port=$(hl_free_port)
st=$tmp/state
mkdir -p "$st"
hl_make_disk "$tmp/d0.img" 32M
hl_make_disk "$tmp/d1.img" 16M
hl_make_disk "$tmp/ssd.img" 64M
iqn=$HL_IQN_PREFIX:test
iqn2=$HL_IQN_PREFIX:walk
conf=$tmp/hotlun.conf
cat >"$conf" <<EOF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $st/ctl.sock
log_level = info
threads = 2
poll_us = 20

[cache ssd]
device = $tmp/ssd.img
size = 32M
block_size = 64K
admission = nhit:2
write_policy = invalidate
update_buffer = 8M
write_budget = 30%

[disk disk0]
origin = file:$tmp/d0.img
cache = ssd
cache_quota = 16M

[disk disk1]
origin = file:$tmp/d1.img
read_only = yes
origin_iops = 5000
origin_mbps = 200
origin_latency_ms = 1

[target $iqn]
lun.0 = disk0
allow = ALL

[target $iqn2]
alias = walk target ; with a comment sign
lun.0 = disk1
allow = iqn.2026-11.io.example:host1
chap_user = walker
chap_secret = 0123456789abcdef
EOF
sock=$st/ctl.sock
hl_start_hotlund "$conf"

# a live session for /sessions/ID
hl_spawn iscsi-perf "$tmp/perf.log" iscsi-perf -t 60 "iscsi://127.0.0.1:$port/$iqn/0"
perf=$HL_LAST_PID
for _ in $(seq 200); do
	"$CTL" --socket "$sock" ls /sessions 2>/dev/null | grep -q 'iscsi-perf' && break
	sleep 0.1
done

# --- luns create /disks/d lun=N: the shell sends N as a string ---
hl_run "luns create lun=7 through the shell" "$CTL" --socket "$sock" "/iscsi/$iqn2/tpg1/luns" create /disks/disk0 lun=7
"$CTL" --socket "$sock" ls "/iscsi/$iqn2/tpg1/luns" | grep -q 'lun7' || hl_fail "lun7 not created"
hl_expect_fail "lun=256 refused" "$CTL" --socket "$sock" "/iscsi/$iqn2/tpg1/luns" create /disks/disk0 lun=256
hl_expect_fail "lun=x refused" "$CTL" --socket "$sock" "/iscsi/$iqn2/tpg1/luns" create /disks/disk0 lun=x
out=$("$CTL" --socket "$sock" "/iscsi/$iqn2/tpg1/luns" create /disks/disk0 lun=-1 2>&1) &&
	hl_fail "lun=-1 accepted"
grep -q 'expected 0..255' <<<"$out" || hl_fail "lun=-1: $out"

# --- /sessions/ID info ---
tsih=$("$CTL" --socket "$sock" ls /sessions | sed -n 's/^[^0-9]*\([0-9][0-9]*\) .*iscsi-perf.*/\1/p' | head -1)
[ -n "$tsih" ] || hl_fail "no session listed: $("$CTL" --socket "$sock" ls /sessions)"
info=$("$CTL" --socket "$sock" "/sessions/$tsih" info 2>&1) || hl_fail "/sessions/$tsih info: $info"
for want in '"initiator": "iqn.2010-11.libiscsi:iscsi-perf"' "\"target\": \"$iqn\"" \
	"\"portal\": \"127.0.0.1:$port\"" '"MaxRecvDataSegmentLength_initiator": [1-9]' \
	'"HeaderDigest": "\(None\|CRC32C\)"' '"ImmediateData": "\(Yes\|No\)"' \
	'"MaxBurstLength": [1-9]' '"FirstBurstLength": [1-9]' '"ErrorRecoveryLevel": 0' \
	'"MaxConnections": 1' "\"tsih\": $tsih"; do
	grep -q -- "$want" <<<"$info" || hl_fail "/sessions/$tsih info lacks /$want/: $info"
done
hl_expect_fail "an unknown session" "$CTL" --socket "$sock" /sessions/65000 info
hl_log "ok: /sessions/$tsih info: $(tr -d '\n ' <<<"$info" | head -c 300)"

# --- the walk: every node, every parameter, set back to what get printed ---
python3 - "$CTL" "$sock" <<'PY' || hl_fail "get/set round trip"
import json, socket, subprocess, sys
ctl, path = sys.argv[1:3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect(path)
f = s.makefile("rb")
def ask(cmd, **args):
    s.sendall(json.dumps({"cmd": cmd, "args": args}).encode() + b"\n")
    return json.loads(f.readline())
def sh(*argv):
    p = subprocess.run([ctl, "--socket", path] + list(argv), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr

# Read-only: run-time values, the portal list (created/deleted under portals),
# and a session (nothing to set). A secret shows as ********: given back, it
# keeps the secret (checked below with a CHAP login).
READ_ONLY = {"size_bytes", "blocks", "sessions", "portal"}

paths = []
def walk(node):
    paths.append(node["path"])
    for c in node["children"]:
        walk(c)
tree_before = ask("ls", path="/")["result"]
walk(tree_before)
assert any(p.startswith("/sessions/") for p in paths), paths
assert any(p.startswith("/caches/") for p in paths), paths
with_params = settable = 0
for p in paths:
    r = ask("get", path=p)
    if not r["ok"]:
        assert "has no parameters" in r["error"], (p, r)
        continue
    with_params += 1
    before = r["result"]
    rc, shown, err = sh(p, "get")
    assert rc == 0, (p, err)
    lines = shown.splitlines()
    assert len(lines) == len(before), (p, shown, before)
    for line in lines:
        key, _, text = line.partition("=")
        if p.startswith("/sessions/") or key in READ_ONLY:
            if not p.startswith("/sessions/"):
                rc, _, err = sh(p, "set", line)
                assert rc != 0 and ("read-only" in err or "portals are created" in err), (p, line, err)
            continue
        settable += 1
        rc, _, err = sh(p, "set", line)               # as the shell prints it
        assert rc == 0, ("hotlunctl set refused what get printed", p, line, err)
        r = ask("set", path=p, params={key: before[key]})   # as JSON gives it
        assert r["ok"], ("set refused the JSON value get gave", p, key, before[key], r)
    after = ask("get", path=p)["result"]
    assert after == before, ("set back changed", p, before, after)
# and the whole tree once more, every node as it was
assert ask("ls", path="/")["result"] == tree_before, "the tree changed"
# a masked secret where none is set is refused, not taken as the secret
r = ask("set", path="/iscsi/" + [p for p in paths if p.endswith(":test")][0].split("/")[2],
        params={"chap_user": "u", "chap_secret": "********"})
assert r["ok"] is False and "how get shows a secret" in r["error"], r
print("walked %d nodes, %d with parameters, %d values set back" % (len(paths), with_params, settable))
assert settable >= 25, settable
PY
# the walk set chap_secret=******** back: the secret is still the one in the file
hl_need iscsi-inq
"$CTL" --socket "$sock" "/iscsi/$iqn2/tpg1/acls" create iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-inq >/dev/null ||
	hl_fail "ACL for iscsi-inq"
out=$(iscsi-inq "iscsi://walker%0123456789abcdef@127.0.0.1:$port/$iqn2/0" 2>&1) ||
	hl_fail "CHAP login with the file's secret after the walk: $out"
iscsi-inq "iscsi://walker%********@127.0.0.1:$port/$iqn2/0" >/dev/null 2>&1 &&
	hl_fail "the secret became ********"
hl_log "ok: the secret survived the round trip"
hl_check_alive
hl_alive "$perf" || hl_fail "the session's iscsi-perf died: $(tail -3 "$tmp/perf.log")"
hl_stop "$perf"
hl_stop # a clean exit (under ASan: no leak)
hl_log "PASS"
