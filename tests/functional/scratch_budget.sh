#!/bin/bash
# scratch_budget.sh - the daemon-wide budget for per-command scratch
# buffers (scratch_buffer_limit, src/scsi/scratch.c) in the real hotlund:
# with a 16 MiB budget and an origin that takes 1.5 s per read, 20
# sessions send one VERIFY (16) BYTCHK=0 of 1 MiB each at once. Each holds
# a 1 MiB bounce buffer while its read runs: 16 fit, 4 are answered BUSY;
# those retry in the same session until they are GOOD (a closed
# connection would be an error of the client). The stats count every BUSY the clients saw, the metrics
# and SNMP (hlAgentGroup4, through a private snmpd and hotlun-snmp) agree,
# nothing is held afterwards, and the limit changes live.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/snmp_lib.sh"
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
[ -x "$TOOL" ] || hl_missing "$TOOL not built (make check builds it)"

tmp=$(hl_tmpdir)
port=$(hl_free_port) || hl_error "no free port"
mport=$(hl_free_port) || hl_error "no free port"
st=$tmp/state
mkdir -p "$st"
sock=$T/ctl.sock # snmp_lib's, where hotlun-snmp looks
iqn=$HL_IQN_PREFIX:scratch
hl_make_disk "$tmp/d.img" 64M
cat >"$tmp/c.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $st
control_socket = $sock
scratch_buffer_limit = 16M
metrics_listen = 127.0.0.1:$mport

[disk d]
origin = file:$tmp/d.img
origin_latency_ms = 1500

[target $iqn]
lun.0 = d
allow = ALL
CONF
hl_start_hotlund "$tmp/c.conf"
url=iscsi://127.0.0.1:$port/$iqn/0

sb() {
	"$HL_BUILDDIR/hotlunctl" --socket "$sock" stats --json | python3 -c 'import json, sys
print(json.load(sys.stdin).get("scratch_buffers", {}).get(sys.argv[1], ""))' "$1"
}

[ "$(sb limit)" = $((16 << 20)) ] || hl_fail "limit $(sb limit), want 16M"
refused0=$(sb refused)
if ! "$TOOL" verify-burst "$url" 20 2048 >"$tmp/burst.out" 2>"$tmp/burst.err"; then
	cat "$tmp/burst.out" "$tmp/burst.err" >&2
	hl_fail "verify burst: $(cat "$tmp/burst.out")"
fi
out=$(cat "$tmp/burst.out")
hl_log "$out"
read -r _ first_good _ first_busy _ busy_total _ good _ errors <<<"$out"
[ "$first_good" = 16 ] && [ "$first_busy" = 4 ] ||
	hl_fail "first answers: $first_good GOOD, $first_busy BUSY; want 16 and 4 (16 MiB of 1 MiB buffers)"
[ "$good" = 20 ] && [ "$errors" = 0 ] || hl_fail "not every VERIFY ended GOOD: $out"
refused=$(( $(sb refused) - refused0 ))
[ "$refused" = "$busy_total" ] ||
	hl_fail "stats count $refused refusals, the clients saw $busy_total BUSY"
[ "$(sb used_bytes)" = 0 ] || hl_fail "used_bytes $(sb used_bytes) after the burst"
[ "$(sb peak_bytes)" = $((16 << 20)) ] || hl_fail "peak_bytes $(sb peak_bytes), want 16M"

# the metrics are the same numbers
hl_wait_port "$HL_PID" 127.0.0.1 "$mport" "$HL_LOG"
metrics=$(python3 -c 'import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode())' "$mport") ||
	hl_fail "no metrics"
m() { printf '%s\n' "$metrics" | sed -n "s/^$1 //p"; }
[ "$(m hotlun_scsi_scratch_buffer_refused_total)" = "$(sb refused)" ] ||
	hl_fail "metrics refused $(m hotlun_scsi_scratch_buffer_refused_total), stats $(sb refused)"
[ "$(m hotlun_scsi_scratch_buffer_used_bytes)" = 0 ] || hl_fail "metrics used_bytes not 0"
[ "$(m hotlun_scsi_scratch_buffer_limit_bytes)" = $((16 << 20)) ] || hl_fail "metrics limit"

# and SNMP: every service scalar equals two stats replies around it, the
# scratch ones included (snmp_lib.sh service_now), with the refusals seen
start_snmpd
start_subagent
service_now "$T/svc.scratch"
hl_log "SNMP: $(grep Scratch "$T/svc.scratch" | tr '\n' ' ')"
[ "$(svc "$T/svc.scratch" hlScratchBufferRefused)" = "$(sb refused)" ] &&
	[ "$(sb refused)" -ge 4 ] || hl_fail "hlScratchBufferRefused is not the stats' refusals"
[ "$(svc "$T/svc.scratch" hlScratchBufferPeak)" = $((16 << 20)) ] ||
	hl_fail "hlScratchBufferPeak is not 16M"
[ "$(svc "$T/svc.scratch" hlScratchBufferLimit)" = $((16 << 20)) ] ||
	hl_fail "hlScratchBufferLimit is not 16M"

# live: the limit changes through the control socket; below 16M is refused
"$HL_BUILDDIR/hotlunctl" --socket "$sock" / set scratch_buffer_limit=64M >/dev/null ||
	hl_fail "set scratch_buffer_limit=64M"
[ "$(sb limit)" = $((64 << 20)) ] || hl_fail "limit $(sb limit) after set 64M"
"$HL_BUILDDIR/hotlunctl" --socket "$sock" / set scratch_buffer_limit=8M >/dev/null 2>&1 &&
	hl_fail "scratch_buffer_limit=8M accepted"
[ "$(sb limit)" = $((64 << 20)) ] || hl_fail "limit $(sb limit) after a refused set"
hl_check_alive
hl_log "PASS"
