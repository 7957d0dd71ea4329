#!/bin/bash
# cache_alias.sh - two disks on one origin file, one of them cached
# (ARCHITECTURE invariant 1): the cache keys blocks by the disk, so a write
# through the other disk never reaches it and the cached disk would serve
# the old bytes. hotlund refuses such a configuration at start and on a
# live change (docs/cache-engine.md, "Disk names, LUN ids and origin
# identity"). Each case below, if hotlund took it, reads block 0 through
# the cached disk (a fill), writes it through the other, and reads it
# through the cached disk again: before the check, case 1 read back the
# zeroes of the first read instead of the bytes written (1 stale block).
#  1. disk "san" cached, disk "alias" uncached, both on a.img: refused at start;
#  2. the same through a symbolic link to a.img: refused at start;
#  3. a front started with "san" alone, "alias" added live (hotlunctl
#     /disks create alias origin=file:a.img): refused, "san" still served;
#  4. the alias read-only: allowed (it cannot write), and served.
. "$(dirname "$0")/lib.sh"
hl_cache_front_prereqs
hl_need qemu-io

T=$(hl_tmpdir)
hl_make_disk "$T/a.img" 64M
ln -s "$T/a.img" "$T/link.img"
# either disk may be the one named first
REFUSED="disk alias: origin .* is also disk san's origin|disk san: origin .* is also disk alias's origin"

# ---- 1. the same path
hl_alias_conf alias "file:$T/a.img" "file:$T/a.img"
hl_alias_refused "$CONF" "$REFUSED"
hl_log "1: two disks on one file, one cached: refused at start"

# ---- 2. a symbolic link to it
hl_alias_conf alias "file:$T/a.img" "$T/link.img"
hl_alias_refused "$CONF" "$REFUSED"
hl_log "2: the same through a symbolic link: refused at start"

# ---- 3. added live
hl_alias_conf alias "file:$T/a.img"
hl_front_start "$CONF"
hl_alias_live "file:$T/a.img" "is also disk san's origin"
hl_log "3: added live: refused ($OUT); disk san still served"

# ---- 4. a read-only alias
hl_stop "$FRONT_PID" # (it holds a.img's lock)
hl_alias_conf alias "file:$T/a.img" "file:$T/a.img"
sed -i "/^\[disk alias\]/a read_only = yes" "$CONF"
hl_front_start "$CONF"
qemu-io -r -f raw -c "read 0 64k" "iscsi://127.0.0.1:$PORT/$IQN/1" >"$T/q.out" 2>&1 ||
	hl_fail "the read-only alias: $(cat "$T/q.out")"
hl_log "4: a read-only alias of the cached disk: started and served"
exit 0
