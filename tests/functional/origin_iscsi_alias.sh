#!/bin/bash
# origin_iscsi_alias.sh - one SAN LUN under two spellings of its iscsi://
# URL, one disk cached and the other writable (ARCHITECTURE invariant 1): a
# write through the other disk never drops the cached disk's blocks, so the
# cached disk would serve the old bytes. The SAN is a first hotlund with two
# portals (hl_target_start --portal2). Each case, if the front took it,
# reads block 0 through the cached disk (a fill), writes it through the
# other and reads it through the cached disk again: on main the URL text
# differed, the front started, and the second read returned the old zeroes.
#  1. the same portal, target and LUN with query options (?qd=64&timeout=30)
#     and another case of the scheme: refused at start, by the normalised
#     URL (no login needed to see it);
#  2. the same LUN through the SAN's second portal (no text rule can tell):
#     refused at open by the LUN's VPD 83h designator;
#  3. the front started with the cached disk alone, the alias added live
#     (hotlunctl /disks create) through the second portal: refused, the
#     cached disk still served.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-io

T=$(hl_tmpdir)
hl_target_start --size 64M --portal2
SAN_PID=$HL_PID SAN_IQN=$HL_IQN SAN_LUN=$HL_LUN
SAN1=iscsi://127.0.0.1:$HL_PORT/$SAN_IQN/$SAN_LUN
SAN2=iscsi://127.0.0.1:$HL_PORT2/$SAN_IQN/$SAN_LUN
# ---- 1. options and the scheme's case: the normalised URL
hl_alias_conf iscsi-alias "$SAN1" "ISCSI://127.0.0.1:$HL_PORT/$SAN_IQN/$SAN_LUN?qd=64\&timeout=30"
hl_alias_refused "$CONF" "disk alias: origin .* is also disk san's origin"
hl_log "1: the same LUN with query options: refused at start"

# ---- 2. the SAN's second portal: the LUN's own designator
hl_alias_conf iscsi-alias "$SAN1" "$SAN2"
hl_alias_refused "$CONF" "disk alias: origin .* is disk san's origin under another name"
grep -h "is disk san's origin under another name" "$T/refused$N.log" | head -1 >&2
hl_log "2: the same LUN through a second portal: refused at open"

# ---- 3. added live through the second portal
hl_alias_conf iscsi-alias "$SAN1"
hl_front_start "$CONF"
hl_alias_live "$SAN2" "is disk san's origin under another name"
hl_check_alive "$FRONT_PID"
hl_log "3: added live: refused ($OUT); disk san still served"
hl_stop "$FRONT_PID"
hl_stop "$SAN_PID"
exit 0
