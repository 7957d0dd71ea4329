#!/bin/bash
# ctl_timeout.sh - issue 24 item 6: a control request its client gave up on
# never runs later (a `luns delete ... force` that timed out client-side once
# ran 6.5 s after). The control thread is held by the test hook
# (HL_TEST_STALL_REACTOR=ctl, SIGUSR1), as a long request holds it; meanwhile:
# - a raw client sends a create and closes its connection (a hotlunctl killed
#   by Ctrl-C or by timeout(1)): when the thread is free, it is not run;
# - a raw client sends a set with a deadline 1 s ahead and keeps waiting:
#   when its turn comes the deadline has passed; it gets "timed out before it
#   ran; nothing was changed";
# - `hotlunctl --timeout 1 ... delete lun0` gives up after about 1 s, saying
#   nothing was changed (exit status 1).
# Then nothing of the three happened, the log names them, a request whose
# deadline is ahead runs (a "started" line, then its reply), hotlunctl works
# with its default timeout, and a bad --timeout is a usage error.
. "$(dirname "$0")/lib.sh"
hl_need python3

CTL=$HL_BUILDDIR/hotlunctl
tmp=$(hl_tmpdir)
port=$(hl_free_port)
hl_make_disk "$tmp/d.img" 16M
conf=$tmp/hotlun.conf
hl_write_config "$conf" "$port" "$tmp/d.img" alias=before
sock=$tmp/state/ctl.sock
iqn=$HL_IQN_PREFIX:test
tgt=/iscsi/$iqn
HL_WRAPPER="env HL_TEST_STALL_REACTOR=ctl ${HL_WRAPPER:-}" hl_start_hotlund "$conf"

"$CTL" --socket "$sock" "$tgt" get alias | grep -qx 'alias=before' || hl_fail "no alias to start with"

# ---- hold the control thread
kill -USR1 "$HL_PID"
for _ in $(seq 1 100); do grep -q 'control stalls' "$HL_LOG" && break; sleep 0.1; done
grep -q 'control stalls' "$HL_LOG" || hl_fail "the test hook did not stall the control thread: $(tail -5 "$HL_LOG")"

# The raw clients: one gone before its turn, one whose deadline passes while it waits.
cat >"$tmp/raw.py" <<'PY'
import json, socket, sys, time
path, tgt = sys.argv[1:3]
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(path)
    return s
gone = conn()
gone.sendall(json.dumps({"cmd": "create", "args": {"path": tgt + "/tpg1/acls",
                         "name": "iqn.2026-11.io.x:gone"}}).encode() + b"\n")
gone.close()
late = conn()
late.sendall(json.dumps({"cmd": "set", "args": {"path": tgt, "params": {"alias": "late"}},
                         "deadline": int(time.time() * 1000) + 1000}).encode() + b"\n")
print("SENT", flush=True)
f = late.makefile("rb")
for line in f:
    print(line.decode().strip(), flush=True)
    if b'"ok"' in line:
        break
PY
hl_spawn raw-clients "$tmp/raw.out" python3 "$tmp/raw.py" "$sock" "$tgt"
raw_pid=$HL_LAST_PID
for _ in $(seq 1 100); do grep -q SENT "$tmp/raw.out" && break; sleep 0.1; done
grep -q SENT "$tmp/raw.out" || hl_fail "the raw clients did not send: $(cat "$tmp/raw.out")"

t0=$(date +%s%N)
out=$(timeout 20 "$CTL" --socket "$sock" --timeout 1 "$tgt/tpg1/luns" delete lun0 2>&1)
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
hl_log "hotlunctl --timeout 1 delete lun0: status $rc after $ms ms: $out"
[ "$rc" = 124 ] && hl_fail "hotlunctl --timeout 1 was still waiting after 20 s"
sleep 1 # the raw client's deadline passes too

# ---- free the thread: the queued requests get their turn
kill -USR1 "$HL_PID"
for _ in $(seq 1 100); do grep -q 'control released' "$HL_LOG" && break; sleep 0.1; done
for _ in $(seq 1 100); do hl_alive "$raw_pid" || break; sleep 0.1; done
hl_alive "$raw_pid" && hl_fail "the raw client got no reply: $(cat "$tmp/raw.out")"
wait "$raw_pid"
hl_forget "$raw_pid"

state=$("$CTL" --socket "$sock" "$tgt" ls 2>&1) || hl_fail "ls after the stall: $state"
grep -q 'iqn.2026-11.io.x:gone' <<<"$state" &&
	hl_fail "the create of a client that had closed its connection ran when its turn came: $state"
grep -q 'o- lun0' <<<"$state" || hl_fail "lun0 was deleted although hotlunctl gave up: $state"
alias=$("$CTL" --socket "$sock" "$tgt" get alias 2>&1)
[ "$alias" = alias=before ] || hl_fail "the set whose deadline had passed ran: $alias"
hl_log "ok: nothing given up on ran (ACL, lun0, alias unchanged)"

[ "$rc" = 1 ] || hl_fail "hotlunctl --timeout 1: status $rc, expected 1: $out"
[ "$ms" -lt 4000 ] || hl_fail "hotlunctl --timeout 1 gave up only after $ms ms"
grep -q 'timed out before it ran; nothing was changed' <<<"$out" ||
	hl_fail "hotlunctl did not say that nothing was changed: $out"
grep -q '"ok": *false' "$tmp/raw.out" && grep -q 'timed out before it ran; nothing was changed' "$tmp/raw.out" ||
	hl_fail "the request whose deadline passed did not get a clear refusal: $(cat "$tmp/raw.out")"
grep -q 'not run: its client closed the connection before its turn' "$HL_LOG" ||
	hl_fail "no log line for the request of the client that had gone: $(grep ctl "$HL_LOG" | tail -5)"
grep -q 'set from .* not run: its deadline passed' "$HL_LOG" ||
	hl_fail "no log line for the late set: $(grep ctl "$HL_LOG" | tail -5)"
hl_log "ok: hotlunctl gave up after $ms ms: $out"

# ---- a deadline ahead: "started", then the reply; hotlunctl's default timeout
python3 - "$sock" "$tgt" <<'PY' || hl_fail "a request with a deadline ahead"
import json, socket, sys, time
path, tgt = sys.argv[1:3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(path)
f = s.makefile("rb")
s.sendall(json.dumps({"cmd": "set", "args": {"path": tgt, "params": {"alias": "ahead"}},
                      "deadline": int(time.time() * 1000) + 10000}).encode() + b"\n")
first = json.loads(f.readline())
assert first == {"started": True}, first
reply = json.loads(f.readline())
assert reply["ok"] is True, reply
for bad in ("soon", -5, 1.5):
    s.sendall(json.dumps({"cmd": "version", "deadline": bad}).encode() + b"\n")
    r = json.loads(f.readline())
    assert r["ok"] is False and "deadline" in r["error"], (bad, r)
# without a deadline: no "started" line, as before
s.sendall(b'{"cmd": "version"}\n')
r = json.loads(f.readline())
assert r["ok"] is True, r
PY
"$CTL" --socket "$sock" "$tgt" get alias | grep -qx 'alias=ahead' || hl_fail "the set with a deadline ahead did not run"
"$CTL" --socket "$sock" --timeout 3 "$tgt" set alias=again || hl_fail "hotlunctl --timeout 3 set"
"$CTL" --socket "$sock" "$tgt" get alias | grep -qx 'alias=again' || hl_fail "hotlunctl --timeout 3 set did not apply"
for bad in x -1 0.5s ''; do
	out=$("$CTL" --socket "$sock" --timeout "$bad" ls 2>&1) && hl_fail "--timeout '$bad' accepted"
	grep -q -- '--timeout' <<<"$out" || hl_fail "--timeout '$bad': unclear message: $out"
done
hl_log "ok: a deadline ahead runs (started, then the reply); bad deadlines and --timeout values refused"

hl_stop "$HL_PID"
hl_log "PASS"
