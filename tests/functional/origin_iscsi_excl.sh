#!/bin/bash
# origin_iscsi_excl.sh - "exclusive = yes" on an iscsi:// origin keeps the
# cache's blocks across a restart only for the LUN they came from. The SAN
# (a first hotlund) has two LUNs of one size with different bytes; the
# front caches LUN 0 (block 0 admitted), stops cleanly, and comes back with
# the SAN renumbered: its LUN 0 is now the other disk, under the same URL
# (or the admin pointed the URL at a clone). On main the proof was
# "excl:SIZE": the size and the URL matched, the blocks of the first disk
# were kept, and the read returned its bytes (0x11, stale). Now the proof
# carries the LUN's VPD 83h designator:
#  1. the restart is cold (warm_start names the identity) and reads the
#     new LUN's bytes (0x22);
#  2. a restart on the same LUN again is warm (the proof still works).
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-io

T=$(hl_tmpdir)
# ---- the SAN: LUN 0 all 0x11, LUN 1 all 0x22, 16 MiB each
python3 -c 'import sys
for name, b in ((sys.argv[1], 0x11), (sys.argv[2], 0x22)):
    open(name, "wb").write(bytes([b]) * (16 << 20))' "$T/lun0.img" "$T/lun1.img"
SAN_PORT=$(hl_free_port)
HL_IQN=$HL_IQN_PREFIX:iscsi-excl-san
hl_write_config "$T/san.conf" "$SAN_PORT" "$T/lun0.img"
sed -i "s|^\[target |[disk disk1]\norigin = file:$T/lun1.img\n\n&|" "$T/san.conf"
sed -i "s|^lun.0 = disk0$|&\nlun.1 = disk1|" "$T/san.conf"
mkdir -p "$T/san-state" # (the front's is $T/state)
sed -i "s|^state_dir = .*|state_dir = $T/san-state|; s|^control_socket = .*|control_socket = $T/san-state/ctl.sock|" "$T/san.conf"
hl_start_hotlund "$T/san.conf"
SAN_PID=$HL_PID

# ---- the front: disk san on LUN 0, cached, exclusive
hl_cache_front_one iscsi-excl "iscsi://127.0.0.1:$SAN_PORT/$HL_IQN/0" 16M 64K
sed -i 's/^cache = ssd$/&\nexclusive = yes/' "$T/hotlund.conf"
hl_front_start "$T/hotlund.conf"
qemu-io -f raw -c "read -P 0x11 0 64k" "$URL" >"$T/q.out" 2>&1 || hl_fail "read LUN 0: $(cat "$T/q.out")"
hl_cache_settle "$SOCK" ssd
[ "$(stat_of used_slots)" -ge 1 ] || hl_fail "block 0 was not admitted"
hl_stop "$FRONT_PID"

# ---- 1. the SAN renumbers its LUNs: the same URL now names disk1
hl_stop "$SAN_PID"
sed -i 's/^lun.0 = disk0$/lun.0 = disk1/; s/^lun.1 = disk1$/lun.1 = disk0/' "$T/san.conf"
grep -q "^lun.0 = disk1$" "$T/san.conf" || hl_error "the SAN's LUNs were not swapped"
hl_start_hotlund "$T/san.conf"
SAN_PID=$HL_PID
hl_front_start "$T/hotlund.conf"
ws=$(stat_of warm_start san)
hl_log "1: restart, LUN 0 is now disk1: warm_start: $ws, kept $(stat_of warm_kept san)"
qemu-io -f raw -c "read -P 0x22 0 64k" "$URL" >"$T/q.out" 2>&1 ||
	hl_fail "stale read: disk1 through the front: $(head -3 "$T/q.out")"
grep -q "Pattern verification failed" "$T/q.out" &&
	hl_fail "stale read: the front served disk0's cached block for disk1 ($ws)"
[ "$(stat_of warm_kept san)" = 0 ] || hl_fail "blocks of disk0 were kept for disk1: $ws"
grep -q "identity" <<<"$ws" || hl_fail "warm_start does not say the identity changed: $ws"
hl_cache_settle "$SOCK" ssd
hl_stop "$FRONT_PID"

# ---- 2. disk1 again: warm
hl_front_start "$T/hotlund.conf"
ws=$(stat_of warm_start san)
hl_log "2: restart on disk1 again: warm_start: $ws, kept $(stat_of warm_kept san)"
[ "$(stat_of warm_kept san)" -ge 1 ] || hl_fail "an exclusive iscsi origin restarted cold on its own LUN: $ws"
qemu-io -f raw -c "read -P 0x22 0 64k" "$URL" >"$T/q.out" 2>&1 || hl_fail "disk1 warm: $(cat "$T/q.out")"
grep -q "Pattern verification failed" "$T/q.out" && hl_fail "disk1 warm: wrong bytes"
hl_stop "$FRONT_PID"
hl_stop "$SAN_PID"
exit 0
