#!/bin/bash
# origin_rbd.sh - issue 9: a Ceph RBD image as a disk's origin, on a
# throw-away single-node cluster this test starts itself (mini_ceph.sh:
# RAM-backed, loopback only, stopped by PID at the end):
#  - qemu-img writes through hotlund; `rbd export` of the image is identical;
#  - a snapshot origin (@SNAP) is a write-protected LUN;
#  - another client cannot write an image hotlund has open (exclusive lock);
#  - `rbd resize` while a session is logged in, without and with the cache:
#    the next command gets UNIT ATTENTION / CAPACITY DATA HAS CHANGED, READ
#    CAPACITY(16) answers the new size, a read past the new end gets LBA OUT
#    OF RANGE, and a block cached before a shrink reads back as the image has
#    it (zeroes) after the image grows again;
#  - the concurrent verifier (hotlun-bench --verify, 3 sessions, 50% reads)
#    through a cached RBD disk with hotlund killed (-9) and restarted mid-run:
#    no read returns anything but the block's last acknowledged write, and a
#    fresh read-only verify pass finds every block's pattern;
#  - the cluster blocklists the gateway's client of a cached disk: the next
#    read of a cached block fails with sense (never the cached data), other
#    disks keep working, hotlund still stops cleanly;
#  - small, unaligned WRITE SAME UNMAP and UNMAP read back as zeroes (the
#    LUN reports LBPRZ), uncached and cached;
#  - an image replaced with `rbd import` while hotlund is stopped is served
#    fresh after restart (its image id changed: the cache drops its blocks).
. "$(dirname "$0")/lib.sh"
hl_need qemu-img python3 rbd ceph ceph-mon ceph-osd cmp
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
SESSION=$HL_BUILDDIR/tests/functional/hl_session_cmds
BENCH=$HL_BUILDDIR/hotlun-bench
[ -x "$SESSION" ] || hl_missing "$SESSION not built (make check builds it)"
[ -x "$BENCH" ] || hl_missing "$BENCH not built"

tmp=$(hl_tmpdir)
hl_ceph_up "$tmp/ceph" origin:128M rsz:64M fence:16M
rbd snap create rbd/origin@empty >/dev/null || hl_fail "rbd snap create"

port=$(hl_free_port)
st=$tmp/state
hl_conf_global "$tmp/c.conf" "$port" "$st"
hl_conf_section "$tmp/c.conf" "cache c0" device="$tmp/c0.cache" size=64M block_size=64K admission=always
cat >>"$tmp/c.conf" <<CONF

[disk plain]
origin = rbd:rbd/origin
rbd_conf = $cluster/ceph.conf
rbd_id = admin

[disk snap]
origin = rbd:rbd/origin@empty
rbd_conf = $cluster/ceph.conf

[disk rsz]
origin = rbd:rbd/rsz
rbd_conf = $cluster/ceph.conf

[disk fence]
origin = rbd:rbd/fence
rbd_conf = $cluster/ceph.conf
cache = c0

[target iqn.2026-11.io.hotlun:rbd]
lun.0 = plain
lun.1 = snap
lun.2 = rsz
lun.3 = fence
allow = ALL
CONF
hl_start_hotlund "$tmp/c.conf"
url=iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:rbd

# ---- sessions driven line by line (hl_session_cmds), to see what the next command gets
declare -A SFD
sess_start() { # NAME URL
	mkfifo "$tmp/$1.in"
	# The output file exists before the session starts: the child opens it
	# only after the FIFO's rendezvous, and sess() may count its lines first.
	: >"$tmp/$1.out"
	"$SESSION" "$2" <"$tmp/$1.in" >>"$tmp/$1.out" 2>&1 &
	HL_PIDS+=($!)
	HL_PID_NAMES+=("session-$1")
	local fd
	exec {fd}>"$tmp/$1.in"
	SFD[$1]=$fd
}
sess_end() { # NAME: end of input, the session logs out
	local fd=${SFD[$1]}
	exec {fd}>&-
}
sess() { # NAME COMMAND: run it, print its one-line answer
	local n i
	n=$(wc -l <"$tmp/$1.out")
	echo "$2" >&"${SFD[$1]}"
	for i in $(seq 300); do
		[ "$(wc -l <"$tmp/$1.out")" -gt "$n" ] && break
		sleep 0.05
	done
	[ "$(wc -l <"$tmp/$1.out")" -gt "$n" ] || hl_fail "session $1: no answer to '$2': $(tail -3 "$tmp/$1.out")"
	tail -n 1 "$tmp/$1.out"
}
expect() { # NAME COMMAND ANSWER-REGEX WHAT
	local a
	a=$(sess "$1" "$2")
	[[ $a =~ ^$3$ ]] || hl_fail "$4: '$2' answered '$a', expected '$3'"
}
# wait_log REGEX N: until the current hotlund's log has more than N lines matching REGEX
wait_log() {
	local i
	for i in $(seq 200); do
		[ "$(grep -cE "$1" "$HL_LOG")" -gt "$2" ] && return 0
		sleep 0.05
	done
	hl_fail "hotlund never logged '$1': $(tail -3 "$HL_LOG")"
}

# resize_check LABEL: the rsz image is 64 MiB (131072 blocks of 512) on entry and on exit
resize_check() {
	local n
	sess_start "$1" "$url/2"
	expect "$1" rc16 "GOOD blocks=131072 bs=512" "$1: capacity before"
	expect "$1" "write 131000" GOOD "$1: write near the end"
	expect "$1" "read 131000" "GOOD first=5a" "$1: read it"
	expect "$1" "read 131000" "GOOD first=5a" "$1: read it again (cached when the disk has a cache)"
	n=$(grep -cE "rsz: capacity changed: .* -> 33554432 bytes" "$HL_LOG")
	rbd resize --allow-shrink --size 32M rbd/rsz >/dev/null 2>&1 || hl_fail "rbd resize (shrink)"
	wait_log "rsz: capacity changed: .* -> 33554432 bytes" "$n"
	expect "$1" tur "CHECK 6/2a/09" "$1: after the shrink, the next command"
	expect "$1" tur GOOD "$1: the unit attention is reported once"
	expect "$1" rc16 "GOOD blocks=65536 bs=512" "$1: capacity after the shrink"
	expect "$1" "read 65535" "GOOD first=00" "$1: last block after the shrink"
	expect "$1" "read 65536" "CHECK 5/21/00" "$1: first block past the new end"
	expect "$1" "read 131000" "CHECK 5/21/00" "$1: the cached block past the new end"
	n=$(grep -cE "rsz: capacity changed: .* -> 67108864 bytes" "$HL_LOG")
	rbd resize --size 64M rbd/rsz >/dev/null 2>&1 || hl_fail "rbd resize (grow)"
	wait_log "rsz: capacity changed: .* -> 67108864 bytes" "$n"
	expect "$1" "read 0" "CHECK 6/2a/09" "$1: after the grow, the next command"
	expect "$1" rc16 "GOOD blocks=131072 bs=512" "$1: capacity after the grow"
	expect "$1" "read 131000" "GOOD first=00" "$1: a block cut off by the shrink reads as the image has it"
	sess_end "$1"
	hl_log "$1: resize reported (UA 2A/09), READ CAPACITY follows, LBA OUT OF RANGE past the end"
}

head -c 32M /dev/urandom >"$tmp/a.img"
qemu-img convert -n -f raw -O raw "$tmp/a.img" "$url/0" || hl_fail "qemu-img convert to the RBD LUN"
rbd export rbd/origin "$tmp/export.img" >"$tmp/export.log" 2>&1 || hl_fail "rbd export: $(tail -3 "$tmp/export.log")"
cmp -n $((32 << 20)) "$tmp/a.img" "$tmp/export.img" || hl_fail "rbd export differs from what was written through hotlund"

# the snapshot LUN: write-protected, reads the snapshot's (empty) content
out=$(iscsi-inq "$url/1" 2>&1) || hl_fail "iscsi-inq on the snapshot LUN: $out"
if qemu-img convert -n -f raw -O raw "$tmp/a.img" "$url/1" 2>/dev/null; then
	hl_fail "a write to a snapshot LUN succeeded"
fi
resize_check uncached

# ---- cached RBD disks
# while hotlund has a writable image open, no other client can write it
# (it holds the exclusive lock with transitions off), so nothing changes
# behind the cache
if rbd bench --io-type write --io-size 4K --io-total 4K rbd/origin >"$tmp/other.log" 2>&1; then
	hl_fail "another client wrote an image that hotlund has open"
fi
grep -q "Read-only file system" "$tmp/other.log" || hl_fail "other writer: $(tail -2 "$tmp/other.log")"
hl_stop
sed -i 's/^origin = rbd:rbd\/\(origin\|rsz\)$/&\ncache = c0/' "$tmp/c.conf"
hl_start_hotlund "$tmp/c.conf"
resize_check cached

# The concurrent verifier through the cache, hotlund killed (-9) mid-run and
# restarted: libiscsi reconnects and the run goes on, so every read after the
# restart is checked against the last write the run saw acknowledged (a
# stale cached block shows up as an older generation).
RANGE=16M
"$BENCH" --quiet --workload seq --read 0 --verify --bs 64K --qd 8 --range $RANGE \
	--count 256 "$url/0" >"$tmp/fill.out" 2>&1 || hl_fail "verify fill: $(tail -3 "$tmp/fill.out")"
"$BENCH" --quiet --workload uniform --read 50 --verify --sessions 3 --qd 8 --bs 4K,64K \
	--range $RANGE --time 10 "$url/0" >"$tmp/mixed.out" 2>"$tmp/mixed.err" &
bpid=$!
HL_PIDS+=($bpid)
HL_PID_NAMES+=(hotlun-bench)
sleep 4
kill -KILL "$HL_PID"
wait "$HL_PID" 2>/dev/null
hl_forget "$HL_PID"
hl_log "hotlund killed (-9) under the verified load"
hl_start_hotlund "$tmp/c.conf"
wait $bpid
brc=$?
hl_forget $bpid
[ $brc = 0 ] || hl_fail "verified load across kill -9: status $brc: $(tail -5 "$tmp/mixed.err")"
summary=$(tail -n 1 "$tmp/mixed.out")
[[ $summary =~ verify_errors=0 ]] || hl_fail "mismatches across kill -9: $summary"
ios=$(tr ' ' '\n' <<<"$summary" | sed -n 's/^ios=//p')
[ "${ios:-0}" -gt 200 ] || hl_fail "too little I/O across the kill: $summary"
"$BENCH" --quiet --workload seq --read 100 --verify --bs 64K --qd 8 --range $RANGE \
	--count 256 "$url/0" >"$tmp/check.out" 2>&1 || hl_fail "fresh verify after kill -9: $(tail -5 "$tmp/check.out")"
grep -q "verify: 256 blocks checked, 0 mismatches\|verify_errors=0" "$tmp/check.out" ||
	hl_fail "fresh verify after kill -9: $(tail -2 "$tmp/check.out")"
hl_log "kill -9 under hotlun-bench --verify (3 sessions, 50% reads): $summary"

# LBPRZ: an RBD LUN reports that deallocated blocks read as zeroes, so a
# small, unaligned WRITE SAME UNMAP or UNMAP must leave zeroes, as Linux
# expects when it zeroes a range with them (librbd's discard skips what is
# smaller than its 64 KiB granularity), uncached and cached
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
[ -x "$TOOL" ] || hl_missing "$TOOL not built (make check builds it)"
for lu in 2:8192 3:4096; do
	"$TOOL" lbprz "$url/${lu%%:*}" "${lu#*:}" >"$tmp/lbprz.out" 2>&1 ||
		hl_fail "LUN ${lu%%:*}: unmapped blocks do not read as zeroes: $(tr '\n' ' ' <"$tmp/lbprz.out")"
done
hl_log "LBPRZ: small unaligned WRITE SAME UNMAP and UNMAP read back as zeroes (uncached and cached)"

# Fencing: the cluster blocklists the client of the cached disk "fence".
sess_start fence "$url/3"
expect fence "write 10" GOOD "fence: write"
expect fence "read 10" "GOOD first=5a" "fence: read"
expect fence "read 10" "GOOD first=5a" "fence: read again (cached)"
# every watcher: the killed hotlund's may still be listed until its watch times out
addrs=$(rbd status rbd/fence | sed -n 's/.*watcher=\([^ ]*\).*/\1/p')
hl_log "watchers of rbd/fence: $(echo $addrs)"
[ -n "$addrs" ] || hl_fail "no watcher of rbd/fence: $(rbd status rbd/fence 2>&1)"
n=$(grep -cE "rbd/fence.*shut this gateway out" "$HL_LOG")
for addr in $addrs; do
	ceph osd blocklist add "$addr" >/dev/null 2>&1 || hl_fail "ceph osd blocklist add $addr"
done
wait_log "rbd/fence.*shut this gateway out" "$n"
# NOT READY / LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED
# (docs/hotlun.conf.5): not a medium error, not a transient BUSY
a=$(sess fence "read 10")
[[ $a =~ ^CHECK\ 2/04/03$ ]] ||
	hl_fail "fence: a blocklisted disk answered a read of a cached block with '$a'"
a2=$(sess fence "write 10")
[[ $a2 =~ ^CHECK\ 2/04/03$ ]] || hl_fail "fence: a blocklisted disk answered a write with '$a2'"
sess_end fence
hl_log "fenced disk: read -> $a, write -> $a2"
qemu-img convert -f raw -O raw "$url/0" "$tmp/after-fence.img" || hl_fail "another disk stopped working after the fence"
for addr in $addrs; do ceph osd blocklist rm "$addr" >/dev/null 2>&1; done

# ---- rbd import while hotlund is stopped: served fresh
"$BENCH" --quiet --workload seq --bs 64K --qd 4 --read 100 --count 512 "$url/0" >/dev/null 2>&1
hl_stop
head -c 128M /dev/urandom >"$tmp/c.img"
rbd snap purge rbd/origin >/dev/null 2>&1
rbd rm rbd/origin >/dev/null 2>&1 || hl_fail "rbd rm"
rbd import "$tmp/c.img" rbd/origin >/dev/null 2>&1 || hl_fail "rbd import"
rbd snap create rbd/origin@empty >/dev/null || hl_fail "rbd snap create"
hl_start_hotlund "$tmp/c.conf"
qemu-img convert -f raw -O raw "$url/0" "$tmp/read2.img" || hl_fail "read after rbd import"
cmp "$tmp/c.img" "$tmp/read2.img" || hl_fail "the cache served blocks of the image that rbd import replaced"
hl_stop
echo "origin_rbd: OK"
