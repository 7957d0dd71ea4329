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
hl_metrics_start --size 16M

# headers announcing a 1 MB body, and its first byte
SENT=$'GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nx'
hl_metrics_park "$SENT" <<'PY' || hl_fail "a scrape was kept out (see above)"
got = scrape("127.0.0.1")
print("scrape from 127.0.0.1 with every slot held by a body in progress:", got)
for _, s in held:
    s.close()
sys.exit(0 if "200" in got else 1)
PY
hl_check_alive
hl_target_stop
hl_log "PASS"
