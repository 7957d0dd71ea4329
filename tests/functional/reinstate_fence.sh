#!/bin/bash
# reinstate_fence.sh - a login that reinstates a session (same initiator,
# ISID and target: RFC 7143 6.3.5) is answered only once the old session's
# WRITEs have reached the origin, so no write of the replaced session can
# land after the new one is up. hotlun's own iscsi origin counts on that
# from a SAN to fence a dead run's writes (src/origin/iscsi_isid.c).
#  1. disk "slow" adds 1.5 s to every origin I/O (origin_latency_ms): a
#     session sends 16 WRITEs of 4 KiB without waiting for them, and a
#     second connection logs in with the same ISID. When its login is
#     answered, all 16 are in the origin file.
#  2. disk "stuck" adds 7 s, more than the 4 s a login waits: the login
#     fails with 0x0301 (service unavailable); a retry after the WRITEs
#     landed succeeds.
# On the code before h34b step 1 fails: the login was answered at once,
# with none of the 16 WRITEs in the file (measured last wave with held
# writes: 13 of 40 landed by the time the new session was up).
. "$(dirname "$0")/lib.sh"
hl_need python3
T=$(hl_tmpdir)
HL_IQN=$HL_IQN_PREFIX:fence
hl_make_disk "$T/slow.img" 16M
hl_make_disk "$T/stuck.img" 16M
PORT=$(hl_free_port) || hl_error "no free port"
mkdir -p "$T/state"
cat >"$T/hotlund.conf" <<CONF
[global]
portal = 127.0.0.1:$PORT
state_dir = $T/state
control_socket = $T/state/ctl.sock
log_level = info

[disk slow]
origin = file:$T/slow.img
origin_latency_ms = 1500

[disk stuck]
origin = file:$T/stuck.img
origin_latency_ms = 7000

[target $HL_IQN-slow]
lun.0 = slow
allow = ALL

[target $HL_IQN-stuck]
lun.0 = stuck
allow = ALL
CONF
hl_start_hotlund "$T/hotlund.conf"

# fence TARGET DISKFILE MODE: MODE wait (step 1) or bound (step 2); prints one result line.
fence() {
	python3 - "$(dirname "$0")" 127.0.0.1 "$PORT" "$1" "$2" "$3" <<'PY'
import struct, sys, time
sys.path.insert(0, sys.argv[1])
import pdu_client as pc

host, port, target, disk, mode = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
INI = "iqn.2026-11.io.hotlun:fence-initiator"
N = 16

a = pc.Conn(host, port, timeout=30)
a.login(target, initiator=INI)
a.clear_ua(0)
st, cap, _ = a.scsi(pc.cdb_rc10(), read_len=8)
bs = struct.unpack(">I", cap[4:8])[0]
per = 4096 // bs


def pattern(i):
    return bytes([0xA0 + i]) * 4096


for i in range(N):   # WRITE(10)s with immediate data, their answers not awaited
    a.send(a.scsi_bhs(pc.cdb_write10(i * per, per), write_len=4096), pattern(i))
    a.cmdsn += 1
time.sleep(0.2)      # they reach the LU (and wait out the origin's latency)


def landed():
    with open(disk, "rb") as f:
        data = f.read(N * 4096)
    return sum(1 for i in range(N) if data[i * 4096:(i + 1) * 4096] == pattern(i))


b = pc.Conn(host, port, timeout=30)
b.isid = a.isid       # the same I_T nexus: a session reinstatement
t0 = time.monotonic()
try:
    b.login(target, initiator=INI)
    status = 0
except AssertionError as e:
    status = -1
    err = str(e)
ms = (time.monotonic() - t0) * 1000
n = landed()
print("login %s after %.0f ms, %d of %d WRITEs in the origin then" %
      ("ok" if status == 0 else "failed (%s)" % err, ms, n, N))
if mode == "wait":
    sys.exit(0 if status == 0 and n == N else 1)
# bound: the login fails 0x0301 after the bound; once the WRITEs land a retry succeeds
if status == 0 or "0x0301" not in err:
    sys.exit(1)
for _ in range(100):
    if landed() == N:
        break
    time.sleep(0.1)
c = pc.Conn(host, port, timeout=30)
c.isid = a.isid
t0 = time.monotonic()
c.login(target, initiator=INI)
print("retry: login ok after %.0f ms, %d of %d WRITEs in the origin" %
      ((time.monotonic() - t0) * 1000, landed(), N))
PY
}

out=$(fence "$HL_IQN-slow" "$T/slow.img" wait) || hl_fail "1: $out"
hl_log "1: origin latency 1.5 s: $out"
grep -q "session reinstatement" "$HL_LOG" || hl_fail "1: no reinstatement logged"

out=$(fence "$HL_IQN-stuck" "$T/stuck.img" bound) || hl_fail "2: $out"
hl_log "2: origin latency 7 s: $(tr '\n' ' ' <<<"$out")"
grep -q "login refused (service unavailable)" "$HL_LOG" || hl_fail "2: no warning logged"
hl_stop "$HL_PID"
hl_log PASS
