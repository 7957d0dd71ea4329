#!/bin/bash
# origin_iscsi_resize.sh - h31c: a SAN LUN resized under a caching front
# hotlund whose disk is iscsi:// on it. The SAN is a second hotlund with a
# 16 MiB file LUN; the front caches it (admission = always).
#  1. the SAN file's last 4 KiB hold a pattern; the front reads them twice
#     (the second a cache hit);
#  2. the SAN's file is shrunk to 8 MiB and grown back to 16 MiB (each seen
#     by the SAN, which queues CAPACITY DATA HAS CHANGED, 2Ah/09h, to its
#     nexuses): the same size as before, the tail is zeroes now. No command
#     of the initiator reaches the SAN meanwhile (its reads hit the cache).
#     The front may see the two changes or one (its poll and the SAN's
#     look each take up to a second); either way it must read zeroes
#     (before h31c: the cached pattern);
#  3. the file grows to 24 MiB: the front's initiator gets 2Ah/09h and
#     READ CAPACITY through the front shows the new size.
# Prints how long from the SAN's resize to the front's drop.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
[ "$HL_TARGET" = tgt ] && hl_skip "the SAN here is hotlund (it must see its file resized)"

MIB=$((1024 * 1024))
hl_target_start --size 16M
SAN_PID=$HL_PID SAN_LOG=$HL_LOG SAN_URL=$HL_URL SAN_DISK=$HL_DISK
T=$(hl_tmpdir)/front
mkdir -p "$T"
hl_cache_front_one resize "$SAN_URL" 64M 4096
hl_front_start "$T/hotlund.conf"

python3 -c "
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(16 * 1024 * 1024 - 4096)
    f.write(b'\xab' * 4096)
" "$SAN_DISK"

# front OP: one step through the front (python, pdu_client): "read": the
# first byte of each 512-byte block of the last 4 KiB of 16 MiB, as hex;
# "grow": the SAN's file grown to 24 MiB while logged in, TEST UNIT READY
# until 2Ah/09h, then READ CAPACITY(16) (blocks).
front() {
	PORT=$PORT IQN=$IQN SRC=$HL_SRCDIR DISK=$SAN_DISK python3 - "$1" <<'PY'
import os, struct, sys, time
sys.path.insert(0, os.environ["SRC"] + "/tests/functional")
import pdu_client as pc

c = pc.Conn("127.0.0.1", int(os.environ["PORT"]))
c.login(os.environ["IQN"], initiator="iqn.2026-11.test:resize")
if sys.argv[1] == "read":
    c.clear_ua(0)
    lba = 16 * 2048 - 8
    cdb = bytes([0x88, 0]) + struct.pack(">QIBB", lba, 8, 0, 0)
    end = time.time() + 10
    while True:
        st, data, sense = c.scsi(cdb, read_len=4096)
        if st == 0:
            break
        key = pc.sense_key(sense) or (0, 0, 0)
        # a unit attention; or LBA OUT OF RANGE while the front still has
        # the shrink and not yet the grow back (it may see both, or one)
        if key[0] != 6 and key[:2] != (5, 0x21) or time.time() > end:
            sys.exit("READ(16): status 0x%02x sense %s" % (st, sense.hex()))
        time.sleep(0.1)
    print("".join("%02x" % data[i] for i in range(0, 4096, 512)))
else:
    c.clear_ua(0)
    os.truncate(os.environ["DISK"], 24 * 1024 * 1024)  # with this session logged in
    seen = None
    end = time.time() + 10
    while time.time() < end and not seen:
        st, _, sense = c.scsi(bytes(6))
        if st and pc.sense_key(sense) == (6, 0x2A, 0x09):
            seen = True
        elif st == 0:
            time.sleep(0.1)
    st, data, _ = c.scsi(bytes([0x9E, 0x10]) + bytes(8) + struct.pack(">I", 32) + bytes(2),
                         read_len=32)
    print("ua=%s blocks=%d" % ("2a09" if seen else "none", struct.unpack(">Q", data[:8])[0] + 1))
c.logout()
PY
}

# ---- 1. the tail, cached
[ "$(front read)" = abababababababab ] || hl_fail "the front did not read the SAN's pattern"
[ "$(front read)" = abababababababab ] || hl_fail "second read"
hl_log "the tail read twice through the front"

# ---- 2. shrink and grow back on the SAN
t0=$(date +%s.%N)
truncate -s 8M "$SAN_DISK"
hl_wait_grep "$SAN_LOG" "the file was resized: 16777216 -> 8388608" 10 ||
	hl_fail "the SAN did not see its file shrink"
truncate -s 16M "$SAN_DISK"
hl_wait_grep "$SAN_LOG" "the file was resized: 8388608 -> 16777216" 10 ||
	hl_fail "the SAN did not see its file grow back"
if hl_wait_grep "$FRONT_LOG" "the cache drops the disk" 10; then
	hl_log "the front's first drop seen $(echo "$(date +%s.%N) - $t0" | bc) s after the shrink (at most)"
else
	hl_log "the front logged no drop within 10 s"
fi
got=$(front read)
[ "$got" = 0000000000000000 ] ||
	hl_fail "after a shrink and a grow back the front read $got where the SAN has zeroes (stale cache)"
hl_log "after the shrink and grow back the front reads zeroes"

# ---- 3. a grow: the front's initiators see it
got=$(front grow)
grep -q "the file was resized: 16777216 -> 25165824" "$SAN_LOG" ||
	hl_fail "the SAN did not see its file grow (the front says: $got)"
[ "$got" = "ua=2a09 blocks=$((24 * 2048))" ] ||
	hl_fail "after the SAN grew to 24 MiB the front says: $got"
hl_log "the front's initiator got 2Ah/09h and READ CAPACITY says 24 MiB"

hl_stop "$FRONT_PID"
hl_stop "$SAN_PID"
hl_log PASS
