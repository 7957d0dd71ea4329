#!/bin/bash
# metrics_abuse.sh - the metrics endpoint under abuse (issue 28;
# docs/metrics.md, "Limits"): slow clients that trickle a request, many
# connections at once, a huge header, a huge URL, a huge body, other
# methods and paths, bytes that are not HTTP. Each gets an answer or a
# refusal (an HTTP error, or the connection closed), never a hang past the
# connection timeout; hotlund stays up; a scrape works again once the
# abusers are gone; and the data path does not notice: hotlun-bench,
# running meanwhile, sees no error and no I/O stalled for a second.
. "$(dirname "$0")/lib.sh"
hl_need python3 curl
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$BENCH" ] || hl_skip "hotlun-bench not built"
T=$(hl_tmpdir)
hl_metrics_start --size 64M
MP=$HL_METRICS_PORT
SOCK=$T/state/ctl.sock
{ curl -sf "http://127.0.0.1:$MP/metrics" >"$T/m.txt" && grep -q '^hotlun_disk_reads_completed_total' "$T/m.txt"; } ||
	hl_fail "no scrape before the abuse"

"$BENCH" --quiet --read 70 --qd 16 --bs 4K --time 20 "$HL_URL" >"$T/bench.out" 2>&1 &
BENCH_PID=$!
HL_PIDS+=("$BENCH_PID")
HL_PID_NAMES+=(hotlun-bench)
sleep 1

python3 - "$MP" <<'PY' || hl_fail "the endpoint misbehaved under abuse"
import socket, sys, threading, time
port = int(sys.argv[1])
T_OUT = 10 + 5  # HL_METRICS_TIMEOUT_S and slack

def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=T_OUT)
    return s

def answer(s):
    """The status line, or 'closed' when the server closed without one."""
    data = b""
    try:
        while b"\r\n" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
    except ConnectionResetError:
        return "closed"
    except socket.timeout:
        return "HUNG"
    return data.split(b"\r\n")[0].decode(errors="replace") or "closed"

def one(req, expect):
    s = conn()
    try:
        s.sendall(req)
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused while we were still sending: that is an answer
    got = answer(s)
    s.close()
    ok = any(e in got for e in expect)
    print(f"{req[:40]!r}... -> {got}")
    return ok

bad = []
def check(name, req, expect):
    if not one(req, expect):
        bad.append(name)

check("huge header", b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
      ["431", "413", "400", "closed"])
check("huge URL", b"GET /" + b"m" * 200000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
      ["414", "431", "400", "closed"])
check("huge body", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n" +
      b"x" * (1 << 20), ["405", "413", "closed"])
check("other method", b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", ["405"])
check("other path", b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n", ["404"])
check("not HTTP", bytes(range(256)) * 16 + b"\r\n\r\n", ["400", "closed"])

# many connections at once: each is served or refused, none hangs
results = []
def scrape():
    try:
        s = conn()
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        results.append(answer(s))
        s.close()
    except OSError as e:
        results.append("refused")
threads = [threading.Thread(target=scrape) for _ in range(100)]
for t in threads: t.start()
for t in threads: t.join()
hung = [r for r in results if r == "HUNG"]
served = [r for r in results if "200" in r]
print(f"100 at once: {len(served)} served, {len(results) - len(served) - len(hung)} refused, "
      f"{len(hung)} hung")
if hung or not served:
    bad.append("many connections")

# slow clients: trickle a request, one byte a second, from 40 sockets
slow = []
for _ in range(40):
    try:
        s = conn()
        s.sendall(b"GET /met")
        slow.append(s)
    except OSError:
        pass
t0 = time.time()
while time.time() - t0 < 4:
    for s in slow:
        try:
            s.send(b"r")
        except OSError:
            pass
    time.sleep(1)
# the server drops them after its timeout; then a scrape is served again
deadline = time.time() + T_OUT + 5
ok = False
while time.time() < deadline and not ok:
    try:
        s = conn()
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ok = "200" in answer(s)
        s.close()
    except OSError:
        pass
    if not ok:
        time.sleep(1)
print(f"after the slow clients: scrape served {ok} ({time.time() - t0:.1f} s)")
for s in slow:
    s.close()
if not ok:
    bad.append("scrape after slow clients")
if bad:
    print("failed:", bad, file=sys.stderr)
    sys.exit(1)
PY

wait "$BENCH_PID" || hl_fail "hotlun-bench failed under the abuse: $(tail -3 "$T/bench.out")"
hl_forget "$BENCH_PID"
sum=$(tail -n 1 "$T/bench.out")
hl_log "data path meanwhile: $sum"
grep -q ' errors=0 ' <<<"$sum" || hl_fail "I/O errors while the endpoint was abused: $sum"
max=$(sed -n 's/.* max_us=\([0-9]*\).*/\1/p' <<<"$sum")
[ -n "$max" ] && [ "$max" -lt 1000000 ] || hl_fail "an I/O stalled ${max} us while the endpoint was abused"
hl_check_alive
"$HL_BUILDDIR/hotlunctl" --socket "$SOCK" stats --json >/dev/null || hl_fail "control socket gone"
{ curl -sf "http://127.0.0.1:$MP/metrics" >"$T/m.txt" && grep -q '^hotlun_disk_reads_completed_total' "$T/m.txt"; } ||
	hl_fail "no scrape after the abuse"
exit 0
