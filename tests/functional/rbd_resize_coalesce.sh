#!/bin/bash
# rbd_resize_coalesce.sh - an rbd image that shrinks and grows again before
# the gateway looks at its size: librbd gives only the size of the moment,
# so the gateway never sees the shrink. The blocks past the shrink point
# are zeroes in the image now; a cache that kept them would serve the old
# bytes for ever. HOTLUN_TEST_RBD_CHECK_DELAY_MS makes the gateway's look
# late (a busy service thread, a slow cluster) so that both changes happen
# before it. Each round caches a block near the end, then shrinks and
# grows the image back to its size within one client (python rbd), then
# reads the block: it must read as the image has it (zeroes). Then a
# snapshot made and removed (what backups and the cache's own marks do)
# and a plain grow must not drop the cache: reads of a cached block stay
# hits.
. "$(dirname "$0")/lib.sh"
hl_need python3 rbd ceph ceph-mon ceph-osd
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
SESSION=$HL_BUILDDIR/tests/functional/hl_session_cmds
[ -x "$SESSION" ] || hl_missing "$SESSION not built (make check builds it)"
ROUNDS=${ROUNDS:-5}

tmp=$(hl_tmpdir)
hl_ceph_up "$tmp/ceph" rsz:64M

port=$(hl_free_port)
st=$tmp/state
hl_conf_global "$tmp/c.conf" "$port" "$st" log_level=debug
hl_conf_section "$tmp/c.conf" "cache c0" device="$tmp/c0.cache" size=64M block_size=64K admission=always
cat >>"$tmp/c.conf" <<CONF

[disk rsz]
origin = rbd:rbd/rsz
rbd_conf = $cluster/ceph.conf
cache = c0

[target iqn.2026-11.io.hotlun:rbd]
lun.0 = rsz
allow = ALL
CONF
export HOTLUN_TEST_RBD_CHECK_DELAY_MS=500
hl_start_hotlund "$tmp/c.conf"
unset HOTLUN_TEST_RBD_CHECK_DELAY_MS
url=iscsi://127.0.0.1:$port/iqn.2026-11.io.hotlun:rbd/0

mkfifo "$tmp/s.in"
: >"$tmp/s.out"
"$SESSION" "$url" <"$tmp/s.in" >>"$tmp/s.out" 2>&1 &
HL_PIDS+=($!)
HL_PID_NAMES+=(session)
exec {SFD}>"$tmp/s.in"
sess() { # COMMAND: run it, print its one-line answer
	local n i
	n=$(wc -l <"$tmp/s.out")
	echo "$1" >&"$SFD"
	for i in $(seq 300); do
		[ "$(wc -l <"$tmp/s.out")" -gt "$n" ] && break
		sleep 0.05
	done
	[ "$(wc -l <"$tmp/s.out")" -gt "$n" ] || hl_fail "no answer to '$1': $(tail -3 "$tmp/s.out")"
	tail -n 1 "$tmp/s.out"
}
# answer COMMAND: its answer, past any unit attention the resizes left
answer() {
	local a
	a=$(sess "$1")
	[[ $a =~ ^CHECK\ 6/ ]] && a=$(sess "$1")
	echo "$a"
}

# image_op OP: on the image from one client: shrink_grow (64M -> 32M -> 64M,
# back to back), snap_create, snap_remove, grow (to 96M)
image_op() {
	/usr/bin/python3 - "$cluster/ceph.conf" "$1" <<'PY'
import sys, rados, rbd
with rados.Rados(conffile=sys.argv[1]) as c:
    with c.open_ioctx("rbd") as io:
        with rbd.Image(io, "rsz") as im:
            op = sys.argv[2]
            if op == "shrink_grow":
                im.resize(32 << 20)
                im.resize(64 << 20)
            elif op == "snap_create":
                im.create_snap("backup")
            elif op == "snap_remove":
                im.remove_snap("backup")
            elif op == "grow":
                im.resize(96 << 20)
PY
}
shrink_grow() { image_op shrink_grow; }
# changed_looks: how many lines of the gateway's log report header looks
# that found changes (a look with none, queued by an earlier change's late
# notes, is not the look of the change a step makes)
changed_looks() { grep -cE ' [1-9][0-9]* header change\(s\)' "$HL_LOG"; }
# looks LINES: wait until the gateway's log has more than LINES such lines
looks() {
	local i
	for i in $(seq 200); do
		[ "$(changed_looks)" -gt "$1" ] && return 0
		sleep 0.05
	done
	hl_fail "the gateway did not look at the header change: $(tail -3 "$HL_LOG")"
}

stale=0
for r in $(seq "$ROUNDS"); do
	a=$(answer "write 131000")
	[ "$a" = GOOD ] || hl_fail "round $r: write near the end: $a"
	a=$(answer "read 131000")
	[ "$a" = "GOOD first=5a" ] || hl_fail "round $r: read it: $a"
	n=$(grep -c "may hide in them" "$HL_LOG")
	shrink_grow || hl_fail "round $r: shrink and grow"
	# the gateway's look, which says what it drops (the old code: nothing, 5 s)
	for i in $(seq 100); do
		[ "$(grep -c "may hide in them" "$HL_LOG")" -gt "$n" ] && break
		sleep 0.05
	done
	a=$(answer "read 131000")
	case $a in
	"GOOD first=00") ;;
	"GOOD first=5a") stale=$((stale + 1)) ;;
	*) hl_fail "round $r: read after the shrink and grow: $a" ;;
	esac
done
grep -E "header change|resized" "$HL_LOG" | tail -4 >&2
[ $stale = 0 ] || hl_fail "$stale of $ROUNDS rounds served the bytes cut off by the shrink (stale)"
hl_log "$ROUNDS rounds of shrink+grow: the cut-off block read as zeroes each time"

# what is explained keeps the cache: a snapshot made, removed, a grow
a=$(answer "write 1000")
[ "$a" = GOOD ] || hl_fail "write: $a"
drops=$(grep -c "may hide in them" "$HL_LOG")
for op in snap_create snap_remove grow; do
	n=$(changed_looks)
	image_op $op || hl_fail "$op"
	looks "$n"
	d=$(grep -c "may hide in them" "$HL_LOG")
	[ "$d" = "$drops" ] || hl_fail "$op dropped the cache: $(grep "header change" "$HL_LOG" | tail -2)"
	a=$(answer "read 1000")
	[ "$a" = "GOOD first=5a" ] || hl_fail "read after $op: $a"
done
exec {SFD}>&-
hl_log "PASS: snapshot made and removed, a grow: explained, the cache kept"
