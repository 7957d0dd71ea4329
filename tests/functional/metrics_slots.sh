#!/bin/bash
# metrics_slots.sh - a few addresses cannot keep a scrape out of the
# metrics endpoint (docs/metrics.md, "Limits"). Four loopback addresses
# (127.0.0.2-5) open as many connections as the endpoint takes and park
# each after half a request line, holding every slot; then a scrape from
# 127.0.0.1 must be served (before: refused at accept until the holders'
# idle timeout, and forever for a holder that trickles a byte now and
# then). Also: one address gets no more than its share (8) in all.
. "$(dirname "$0")/lib.sh"
hl_need python3
MP=$(hl_free_port)
HL_GLOBAL_EXTRA="metrics_listen = 127.0.0.1:$MP" hl_target_start --size 16M
hl_wait_port "$HL_PID" 127.0.0.1 "$MP" "$HL_LOG"

python3 - "$MP" <<'PY' || hl_fail "a scrape was kept out (see above)"
import socket, sys, time
port = int(sys.argv[1])

def conn(src):
    s = socket.socket()
    s.settimeout(5)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s

def alive(s):
    """False once the server closed s (EOF or reset)."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.settimeout(5)

def scrape(src):
    try:
        s = conn(src)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
        s.close()
        return data.split(b"\r\n")[0].decode(errors="replace") or "closed"
    except OSError as e:
        return "error: %s" % e

# holders: 4 addresses x 10 connections, each parked after half a request line
held = []
for a in range(2, 6):
    for _ in range(10):
        try:
            s = conn("127.0.0.%d" % a)
            s.sendall(b"GET /met")
            held.append((a, s))
        except OSError:
            pass
time.sleep(0.5)  # let the server act on the last accepts (it closes, never waits)
per = {}
for a, s in held:
    if alive(s):
        per[a] = per.get(a, 0) + 1
print("held per address:", per)
bad = [a for a, n in per.items() if n > 8]
got = scrape("127.0.0.1")
print("scrape from 127.0.0.1 with every slot held:", got)
for _, s in held:
    s.close()
if bad:
    print("an address holds more than 8:", bad, file=sys.stderr)
    sys.exit(1)
if "200" not in got:
    sys.exit(1)
PY
hl_check_alive
hl_target_stop
hl_log "PASS"
