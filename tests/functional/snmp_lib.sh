# tests/functional/snmp_lib.sh - helpers shared by the snmp_*.sh tests.
#
# Sourced after lib.sh. It owns: resolving HOTLUN-MIB names to OIDs from
# contrib/HOTLUN-MIB.txt itself (no IETF MIB files needed), snmpget/walk
# wrappers, the control socket's stats as seen by Python, waiting until the
# subagent's value equals the control socket's, the service scalars read
# between two stats replies (service_now), and starting a private
# snmpd (AgentX master on a private socket, SNMP on a free loopback UDP
# port) and hotlun-snmp. Every process goes through hl_spawn (stopped by PID).

hl_need snmpd snmpget snmpwalk python3
HL_SNMP=$HL_BUILDDIR/hotlun-snmp
HL_BENCH=$HL_BUILDDIR/hotlun-bench
HL_CTL=$HL_BUILDDIR/hotlunctl
[ -x "$HL_SNMP" ] || hl_missing "$HL_SNMP not built"
[ -x "$HL_BENCH" ] || hl_missing "$HL_BENCH not built"
[ -x "$HL_CTL" ] || hl_missing "$HL_CTL not built"
MIB=$HL_SRCDIR/contrib/HOTLUN-MIB.txt

T=$(hl_tmpdir)
INITIATOR=iqn.2026-11.io.hotlun:snmp-test-initiator

# ---------------------------------------------------------------- helpers

# oid NAME: the numeric OID of a HOTLUN-MIB object, from the MIB file.
declare -A OIDS
while read -r name num; do
	OIDS[$name]=$num
done < <(python3 - "$MIB" <<'EOF'
import re, sys
text = re.sub(r'--[^\n]*', '', open(sys.argv[1]).read())
text = re.sub(r'IMPORTS.*?;', '', text, count=1, flags=re.S)
known = {'enterprises': '1.3.6.1.4.1'}
defs = re.findall(r'(\w+)\s+(?:OBJECT-TYPE|OBJECT\s+IDENTIFIER|MODULE-IDENTITY|NOTIFICATION-TYPE)'
                  r'.*?::=\s*\{\s*(\w+)\s+(\d+)\s*\}', text, re.S)
while defs:
    left = [d for d in defs if d[1] not in known]
    for name, parent, n in defs:
        if parent in known:
            known[name] = known[parent] + '.' + n
    if len(left) == len(defs):
        sys.exit('unresolved: %s' % left)
    defs = left
for k, v in known.items():
    print(k, v)
EOF
)
[ -n "${OIDS[hlDiskReadCmds]:-}" ] || hl_error "cannot parse OIDs from $MIB"
oid() {
	[ -n "${OIDS[$1]:-}" ] || hl_error "no $1 in HOTLUN-MIB"
	echo ".${OIDS[$1]}"
}

# udp_free_port: a UDP port on 127.0.0.1 that nothing is bound to now.
udp_free_port() {
	python3 -c 'import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

SNMP_PORT=$(udp_free_port) || hl_error "no free UDP port"
SNMP_AGENT=udp:127.0.0.1:$SNMP_PORT
SNMPOPTS=(-v2c -c public -t 2 -r 1 -On -Oqv -m "" -M /nonexistent)

# sget OBJECT INDEX: one value (quotes stripped); empty when absent.
sget() {
	local v
	v=$(snmpget "${SNMPOPTS[@]}" "$SNMP_AGENT" "$(oid "$1").$2" 2>/dev/null) || return 1
	case $v in
	"No Such"*) return 1 ;;
	esac
	v=${v#\"}
	echo "${v%\"}"
}

# swalk OBJECT: "index value" lines of a column.
swalk() {
	local base
	base=$(oid "$1")
	snmpwalk -v2c -c public -t 2 -r 1 -On -Oq -m "" -M /nonexistent "$SNMP_AGENT" "$base" 2>/dev/null |
		sed -n "s|^$base\.\([0-9.]*\) \"\{0,1\}\([^\"]*\)\"\{0,1\}\$|\1 \2|p"
}

# stats: the control socket's stats, saved to $T/stats.json.
stats() {
	"$HL_CTL" --socket "$T/ctl.sock" stats --json >"$T/stats.json" || hl_fail "hotlunctl stats failed"
}

# ctl PYEXPR: evaluate a Python expression over s (the stats just saved).
ctl() {
	python3 -c "import json; s = json.load(open('$T/stats.json')); print($1)"
}

# wait_equal DESC OBJECT INDEX PYEXPR: poll (the subagent caches ~200 ms)
# until the SNMP value equals the control socket's; fail after 10 s.
wait_equal() {
	local desc=$1 obj=$2 idx=$3 expr=$4 want got i
	for i in $(seq 1 50); do
		stats
		want=$(ctl "$expr")
		got=$(sget "$obj" "$idx")
		[ "$got" = "$want" ] && {
			echo "$got"
			return 0
		}
		sleep 0.2
	done
	hl_fail "$desc: SNMP $obj.$idx = '$got', control socket = '$want'"
}

# The service scalars (hlAgent) and the member of the stats reply each
# renames (docs/snmp.md): hlAgentGroup, hlAgentGroup2 and hlAgentGroup3.
SERVICE_OBJECTS=(
	hlSessionCount:sessions
	hlAuthFailures:iscsi.auth_failures hlAuthThrottled:iscsi.auth_throttled
	hlLogins:iscsi.logins hlLoginFailures:iscsi.login_failures
	hlConnections:iscsi.connections hlPendingLogins:iscsi.pending_logins
	hlPendingEvicted:iscsi.pending_evicted hlRefusedPending:iscsi.refused_pending
	hlRefusedSessions:iscsi.refused_sessions hlAcceptPaused:iscsi.accept_paused
	hlWriteBufferLimit:write_buffers.limit hlWriteBufferConnLimit:write_buffers.conn_limit
	hlWriteBufferHeld:write_buffers.held_bytes hlWriteBufferPeak:write_buffers.peak_bytes
	hlWriteBufferWaiting:write_buffers.waiting
	hlWriteBufferWaitingBytes:write_buffers.waiting_bytes
	hlWriteBufferDeferred:write_buffers.r2t_deferred
	hlWriteBufferTaskSetFull:write_buffers.task_set_full
	hlWriteBufferWindowClosed:write_buffers.window_closed
	hlWriteBufferSourceLimit:write_buffers.source_limit
	hlWriteBufferSources:write_buffers.sources
	hlWriteBufferSourceCapped:write_buffers.source_capped
	hlWriteBufferClosedSlow:write_buffers.closed_slow
	hlWriteBufferClosedNoData:write_buffers.closed_no_data
	hlScratchBufferLimit:scratch_buffers.limit
	hlScratchBufferUsed:scratch_buffers.used_bytes
	hlScratchBufferPeak:scratch_buffers.peak_bytes
	hlScratchBufferRefused:scratch_buffers.refused
)

# service_now FILE: a stats reply, one snmpget of every SERVICE_OBJECTS
# scalar (one PDU: one poll of the subagent), a second stats reply. When
# the two replies agree on every member and each SNMP value equals it,
# write "OBJECT VALUE" lines to FILE and return; otherwise retry (the
# subagent polls every 200 ms, a connection may still be closing) and
# fail after 10 s, naming the objects that differ.
service_now() {
	local out=$1 o i oids=()
	for o in "${SERVICE_OBJECTS[@]}"; do
		oids+=("$(oid "${o%%:*}").0")
	done
	for i in $(seq 1 50); do
		"$HL_CTL" --socket "$T/ctl.sock" stats --json >"$T/svc.a.json" || hl_fail "hotlunctl stats failed"
		snmpget "${SNMPOPTS[@]}" "$SNMP_AGENT" "${oids[@]}" >"$T/svc.snmp" 2>&1 || :
		"$HL_CTL" --socket "$T/ctl.sock" stats --json >"$T/svc.b.json" || hl_fail "hotlunctl stats failed"
		python3 - "$out" "$T/svc.a.json" "$T/svc.b.json" "$T/svc.snmp" "$i" "${SERVICE_OBJECTS[@]}" <<'EOF' && return 0
import json, sys
out, fa, fb, fs, try_n = sys.argv[1:6]
a, b = json.load(open(fa)), json.load(open(fb))
got = [l.strip().strip('"') for l in open(fs)]
def member(s, path):
    for k in path.split("."):
        s = s[k]
    return s
bad, lines = [], []
objs = [o.split(":", 1) for o in sys.argv[6:]]
if len(got) != len(objs):
    bad.append(f"snmpget answered {len(got)} lines for {len(objs)} objects: {got[:3]}")
for (name, path), v in zip(objs, got):
    x, y = member(a, path), member(b, path)
    if x != y or v != str(x):
        bad.append(f"{name} = {v}, stats {path} = {x} then {y}")
    lines.append(f"{name} {v}")
if bad:
    if int(try_n) == 50:
        print("SNMP and the control socket differ:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
open(out, "w").write("\n".join(lines) + "\n")
EOF
		sleep 0.2
	done
	hl_fail "the service scalars never equalled two stats replies around them (see above)"
}

# svc FILE OBJECT: a value that service_now saved.
svc() {
	awk -v o="$2" '$1 == o { print $2 }' "$1"
}

# wait_for DESC CMD...: retry CMD for up to 20 s.
wait_for() {
	local desc=$1 i
	shift
	for i in $(seq 1 100); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	hl_fail "timed out waiting for: $desc"
}

# sis OBJECT INDEX WANT: true when the SNMP value is WANT (for wait_for).
sis() {
	[ "$(sget "$1" "$2")" = "$3" ]
}

# has_session: true when the session table holds exactly our initiator.
has_session() {
	[ "$(swalk hlSessionInitiator | awk '{ print $2 }')" = "$INITIATOR" ]
}

# disk_index NAME: the hlDiskIndex of a disk, found by walking hlDiskName.
disk_index() {
	swalk hlDiskName | awk -v n="$1" '$2 == n { print $1 }'
}

bench() {
	"$HL_BENCH" --quiet --initiator "$INITIATOR" --bs 4K --qd 4 --seed 7 "$@" >>"$T/bench.log" 2>&1 ||
		hl_fail "hotlun-bench $* failed (see $T/bench.log)"
}

start_snmpd() {
	cat >"$T/snmpd.conf" <<EOF
master agentx
agentXSocket unix:$T/agentx.sock
agentXTimeout 5
rocommunity public 127.0.0.1
${SNMPD_EXTRA:-}
EOF
	rm -f "$T/agentx.sock"
	# -C: only this file; MIBS= : no MIB files (Debian ships few; not needed).
	SNMPD_LOG=$T/snmpd.$((${SNMPD_N:-0} + 1)).log
	SNMPD_N=$((${SNMPD_N:-0} + 1))
	hl_spawn snmpd "$SNMPD_LOG" env MIBS= snmpd -f -Lo -C -c "$T/snmpd.conf" \
		-p "$T/snmpd.pid" "$SNMP_AGENT"
	SNMPD_PID=$HL_LAST_PID
	wait_for "snmpd's AgentX socket" test -S "$T/agentx.sock"
}

# start_subagent: hotlun-snmp on $T/ctl.sock and $T/agentx.sock, fast polls
# and pings for the test; waits until it serves hlDaemonReachable = true.
start_subagent() {
	hl_spawn hotlun-snmp "$T/hotlun-snmp.log" "$HL_SNMP" --socket "$T/ctl.sock" \
		--agentx "$T/agentx.sock" --interval 200 --ping 1 --log-level info
	SUB_PID=$HL_LAST_PID
	wait_for "hlDaemonReachable = true" sis hlDaemonReachable 0 1
}

