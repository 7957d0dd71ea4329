#!/bin/bash
# metrics_slots_body.sh - a holder cannot make its metrics connections
# untouchable by sending full headers and then a body that never ends
# (docs/metrics.md, "Limits"). The trim spares a request in progress; a
# GET whose announced body is still coming is not one yet (nothing to
# answer until the body is in). Four loopback addresses (127.0.0.2-5) each
# open 10 connections with "GET /metrics" headers announcing a 1 MB body
# and send one byte of it; then a scrape from 127.0.0.1 must be served.
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

held = []
for a in range(2, 6):
    for _ in range(10):
        try:
            s = conn("127.0.0.%d" % a)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 1000000\r\n\r\nx")
            held.append(s)
        except OSError:
            pass
time.sleep(0.5)  # let the server read the headers of the last ones
got = scrape("127.0.0.1")
print("scrape from 127.0.0.1 with every slot held by a body in progress:", got)
for s in held:
    s.close()
sys.exit(0 if "200" in got else 1)
PY
hl_check_alive
hl_target_stop
hl_log "PASS"
