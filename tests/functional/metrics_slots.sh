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
hl_metrics_start --size 16M

# holders: 4 addresses x 10 connections, each parked after half a request line
hl_metrics_park 'GET /met' <<'PY' || hl_fail "a scrape was kept out (see above)"
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
