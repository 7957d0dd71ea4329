#!/bin/bash
# ctl_badinput.sh - issue 6: malformed JSON, unknown commands and paths,
# wrong types and oversized requests on the control socket each get an
# error reply; the daemon keeps serving I/O throughout.
. "$(dirname "$0")/lib.sh"
hl_need python3 iscsi-perf

tmp=$(hl_tmpdir)
port=$(hl_free_port)
hl_make_disk "$tmp/d.img" 64M
hl_write_config "$tmp/c.conf" "$port" "$tmp/d.img"
sock=$tmp/state/ctl.sock
hl_start_hotlund "$tmp/c.conf"
[ "$(stat -c %a "$sock")" = 600 ] || hl_fail "control socket mode is $(stat -c %a "$sock"), want 600"

hl_spawn iscsi-perf "$tmp/perf.log" iscsi-perf -t 8 "iscsi://127.0.0.1:$port/$HL_IQN_PREFIX:test/0"
perf_pid=$HL_LAST_PID

python3 - "$sock" <<'PY' || hl_fail "control socket answers"
import json, socket, sys
path = sys.argv[1]

def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s, s.makefile("rb")

def ask(s, f, raw):
    s.sendall(raw)
    line = f.readline()
    assert line.endswith(b"\n"), ("no reply line", raw[:60], line)
    return json.loads(line)

s, f = conn()
cases = [
    (b"{nope\n", "malformed JSON"),
    (b"\"just a string\"\n", "malformed JSON"),
    (b"[1, 2]\n", "JSON object"),
    (b"{\"cmd\": 42}\n", "cmd"),
    (b"{\"cmd\": \"frobnicate\"}\n", "unknown command"),
    (b"{\"cmd\": \"ls\", \"args\": {\"path\": \"/no/such/place\"}}\n", "no such path"),
    (b"{\"cmd\": \"ls\", \"args\": {\"path\": 7}}\n", "path"),
    (b"{\"cmd\": \"get\", \"args\": {\"path\": \"/disks/missing\"}}\n", "no disk"),
    (b"{\"cmd\": \"set\", \"args\": {\"path\": \"/disks/disk0\", \"params\": {\"block_size\": [1]}}}\n", "expected"),
    (b"{\"cmd\": \"set\", \"args\": {\"path\": \"/disks/disk0\", \"params\": {\"block_size\": 1000}}}\n", "512 or 4096"),
    (b"{\"cmd\": \"set\", \"args\": {\"path\": \"/disks/disk0\", \"params\": {\"colour\": \"red\"}}}\n", "unknown key"),
    (b"{\"cmd\": \"create\", \"args\": {\"path\": \"/disks\", \"name\": \"bad name\"}}\n", "disk name"),
    (b"{\"cmd\": \"create\", \"args\": {\"path\": \"/disks\", \"name\": \"x\", \"params\": {\"origin\": \"file:/nonexistent/x.img\"}}}\n", "cannot open origin"),
    (b"{\"cmd\": \"delete\", \"args\": {\"path\": \"/\"}}\n", "cannot be deleted"),
    (b"{\"cmd\": \"ls\", \"args\": {}, \"extra\": 1}\n", "unknown request member"),
]
for raw, want in cases:
    r = ask(s, f, raw)
    assert r.get("ok") is False, (raw, r)
    assert want in r.get("error", ""), (raw, want, r)
# the same connection still works
r = ask(s, f, b"{\"cmd\": \"ls\"}\n")
assert r["ok"] is True and r["result"]["path"] == "/", r
s.close()

# oversized: an error reply, then the server closes that connection only
s, f = conn()
big = b"{\"cmd\": \"ls\", \"args\": {\"path\": \"" + b"a" * (400 * 1024) + b"\"}}\n"
try:
    s.sendall(big)
except (BrokenPipeError, ConnectionResetError):
    pass
line = f.readline()
r = json.loads(line)
assert r["ok"] is False and "too large" in r["error"], r
s.close()

# a fresh connection is served
s, f = conn()
r = ask(s, f, b"{\"cmd\": \"version\"}\n")
assert r["ok"] is True and "version" in r["result"], r
print("control socket: all bad requests answered")
PY

wait "$perf_pid"
rc=$?
hl_forget "$perf_pid"
[ $rc -eq 0 ] || hl_fail "I/O was disturbed (iscsi-perf exit $rc)"
grep -q 'iops average' "$tmp/perf.log" || hl_fail "no I/O progress during the test"
hl_check_alive
hl_stop
echo "ctl_badinput: OK"
