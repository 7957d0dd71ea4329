#!/bin/bash
# gateway_shadow.sh - the warm standby (issue 26; docs/gateways.md, "Warm
# standby"): two hotlund gateways on one rbd image of a throw-away
# single-node Ceph.
#  1. gateway 1 owns the image and warms its cache (random reads of 24 MiB);
#     gateway 2, its standby, reads gateway 1's hot set and pre-reads it
#     (shadow_rate 32 MiB/s): its stats show every hot block shadowed, 0
#     behind, and the origin reads it spent (within the rate);
#  2. staleness: blocks the standby holds are rewritten through the owner,
#     two of them well before the kill (the standby's proof moves past
#     them) and one less than a second before it; the owner is killed
#     (SIGKILL); gateway 2 takes over and drops exactly what changed since
#     its proof: every block it serves is the new data, never the old
#     (the whole image compared);
#     The standby's shadow as hotlunctl stats --json, /metrics and SNMP
#     (hlDiskTable's shadow columns through a real snmpd) show it: equal;
#  3. the new owner serves the hot range from its cache at once: hit ratio
#     of a read load right after the takeover >= 80%.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/snmp_lib.sh" # sets T
hl_cache_front_prereqs
hl_need qemu-img qemu-io bc rbd ceph ceph-mon ceph-osd curl
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_missing "qemu-img has no iscsi driver (install qemu-block-extra)"
CTL=$HL_BUILDDIR/hotlunctl

hl_ceph_up "$T/ceph" origin:64M

IQN=$HL_IQN_PREFIX:gw-shadow
GW_ORIGIN=rbd:rbd/origin
GW_DISK_EXTRA="rbd_conf = $cluster/ceph.conf\nshadow_rate = 32MiB/s"
. "$HL_SRCDIR/tests/functional/gateway_lib.sh"
gw_setup
# gateway 2: the control socket the SNMP subagent reads, and a metrics endpoint
MP=$(hl_free_port)
sed -i "s|^control_socket = .*|control_socket = $T/ctl.sock|; s|^threads = 2$|&\nmetrics_listen = 127.0.0.1:$MP|" "$T/gw2/hotlund.conf"
SOCK[2]=$T/ctl.sock

# shd G KEY: a field of gateway G's shadow of disk san
shd() {
	local out
	out=$("$CTL" --socket "${SOCK[$1]}" stats --json 2>/dev/null) || { echo "?"; return; }
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])["disks"]["san"]["shadow"][sys.argv[2]])' \
		"$out" "$2" 2>/dev/null || echo "?"
}
# write_at OFF BYTE: a 64 KiB pattern through gateway 1, and into want.img
write_at() {
	qemu-io -f raw -c "write -P $2 $1 64k" "$(url 1)" >"$T/w.out" 2>&1 ||
		hl_fail "write through gateway 1: $(cat "$T/w.out")"
	python3 - "$T/want.img" "$1" "$2" <<-'PY'
	import sys
	with open(sys.argv[1], 'r+b') as f:
	    f.seek(int(sys.argv[2]))
	    f.write(bytes([int(sys.argv[3], 16)]) * 65536)
	PY
}

# ---- 1. the owner warms, the standby shadows
head -c $((64 * 1024 * 1024)) /dev/urandom >"$T/want.img"
start_gw 1
wait_owner 1 20
timeout 120 qemu-img convert -n -f raw -O raw "$T/want.img" "$(url 1)" ||
	hl_fail "could not write the image through gateway 1"
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --range 24M --time 6 "$(url 1)" >"$T/warm.out" 2>&1 ||
	hl_fail "warming through gateway 1: $(tail -3 "$T/warm.out")"
hot1=$(hl_cache_stat "${SOCK[1]}" ssd used_slots)
[ "$hot1" -ge 300 ] || hl_fail "gateway 1 cached only $hot1 blocks"
start_gw 2
sleep 1
[ "$(own 2 state)" = standby ] || hl_fail "gateway 2 is not a standby: $(own 2 state)"
t0=$(date +%s)
for i in $(seq 1 120); do
	hb=$(shd 2 hot_blocks) sd=$(shd 2 shadowed) bh=$(shd 2 behind)
	[ "$hb" != "?" ] && [ "$hb" -ge 300 ] && [ "$bh" = 0 ] && break
	sleep 0.5
done
[ "$hb" != "?" ] && [ "$hb" -ge 300 ] && [ "$bh" = 0 ] ||
	hl_fail "the standby did not catch up in 60 s: hot $hb, shadowed $sd, behind $bh; $(shd 2 state)"
reads=$(shd 2 origin_reads) bytes=$(shd 2 origin_bytes)
took=$(($(date +%s) - t0))
# within the rate: 32 MiB/s plus one second's burst
[ "$bytes" -le $(((took + 2) * 32 * 1048576)) ] || hl_fail "the shadow read $bytes bytes in $took s at 32 MiB/s"
[ "$(shd 1 role)" = owner ] && [ "$(shd 1 publishes)" -ge 1 ] || hl_fail "gateway 1 publishes no hot set: $(shd 1 state)"
"$CTL" --socket "${SOCK[2]}" stats | grep "shadow:" >&2
hl_log "1: standby shadowed $sd of $hb hot blocks in about $took s: $reads origin reads, $bytes bytes"
# the same through /metrics and SNMP: a stats reply, a scrape, a stats reply; equal when
# both replies agree (a mark move may drop and re-read blocks meanwhile: try again)
metrics_equal() {
	local m got want again
	curl -sf "http://127.0.0.1:$MP/metrics" >"$T/m.txt" || return 1
	for m in hot_blocks:shadow_hot_blocks shadowed:shadowed_blocks behind:shadow_behind_blocks \
		origin_reads:shadow_origin_reads_total origin_bytes:shadow_origin_read_bytes_total; do
		want=$(shd 2 "${m%%:*}")
		curl -sf "http://127.0.0.1:$MP/metrics" >"$T/m.txt" || return 1
		again=$(shd 2 "${m%%:*}")
		got=$(sed -n "s/^hotlun_disk_${m#*:}{disk=\"san\"} \([0-9.e+]*\)\$/\1/p" "$T/m.txt")
		[ "$want" = "$again" ] && [ -n "$got" ] &&
			python3 -c "import sys; sys.exit(float('$got') != float('$want'))" || {
			echo "/metrics hotlun_disk_${m#*:} = '$got', stats ${m%%:*} = $want, then $again"
			return 1
		}
	done
}
ok=0
for i in $(seq 1 60); do
	[ "$(shd 2 behind)" = 0 ] && metrics_equal >"$T/me.out" && { ok=1; break; }
	sleep 0.5
done
[ $ok = 1 ] || hl_fail "$(cat "$T/me.out")"
start_snmpd
start_subagent
D=$(disk_index san)
[ -n "$D" ] || hl_fail "san missing from hlDiskTable"
for o in hlDiskShadowHotBlocks:hot_blocks hlDiskShadowed:shadowed hlDiskShadowBehind:behind \
	hlDiskShadowOriginReads:origin_reads hlDiskShadowOriginBytes:origin_bytes; do
	v=$(wait_equal "${o%%:*}" "${o%%:*}" "$D" "s['disks']['san']['shadow']['${o#*:}']")
	hl_log "1: SNMP ${o%%:*} = $v"
done
[ "$(sget hlDiskShadowed "$D")" -ge 300 ] || hl_fail "hlDiskShadowed: $(sget hlDiskShadowed "$D")"
hl_stop "$SUB_PID"
hl_stop "$SNMPD_PID"

# ---- 2. writes through the owner, one in its last second
write_at $((1 * 1048576)) 0x41
write_at $((5 * 1048576 + 65536)) 0x42
# the owner makes a new mark every 20 s: the standby moves its proof past both writes
m0=$(shd 2 marks)
for i in $(seq 1 60); do
	[ "$(shd 2 marks)" -gt "$m0" ] && [ "$(shd 2 behind)" = 0 ] && break
	sleep 0.5
done
[ "$(shd 2 marks)" -gt "$m0" ] || hl_fail "the standby's proof did not move in 30 s: $(shd 2 state)"
# it moved by the owner's exact diff since the mark before (a standby's own diff sees whole objects)
grep "shadow: proof moved" "$LOG2" | tail -1 | grep -q "the owner's diff since its previous mark: [1-9]" ||
	hl_fail "the standby did not move its proof by the owner's diff: $(grep "shadow: proof moved" "$LOG2" | tail -2)"
hl_log "2: $(grep "shadow: proof moved" "$LOG2" | tail -1 | sed 's/.*shadow: //')"
write_at $((9 * 1048576)) 0x43 # less than a second before the kill
kill -KILL "${PID[1]}"
wait "${PID[1]}" 2>/dev/null
hl_forget "${PID[1]}"
wait_owner 2 30
ws=$(hl_cache_stat "${SOCK[2]}" ssd warm_start san)
hl_log "2: takeover: $ws"
kept=$(sed -n 's/^kept \([0-9]*\), dropped \([0-9]*\).*/\1/p' <<<"$ws")
[ -n "$kept" ] && [ "$kept" -ge $((hot1 * 8 / 10)) ] || hl_fail "the new owner kept too little: $ws (owner had $hot1)"

# ---- 3. hits at once through the new owner
h0=$(hl_cache_stat "${SOCK[2]}" ssd read_hits) r0=$(hl_cache_stat "${SOCK[2]}" ssd read_reqs)
"$BENCH" --quiet --read 100 --bs 64K --qd 8 --range 24M --time 4 "$(url 2)" >"$T/after.out" 2>&1 ||
	hl_fail "reading through gateway 2: $(tail -3 "$T/after.out")"
h1=$(hl_cache_stat "${SOCK[2]}" ssd read_hits) r1=$(hl_cache_stat "${SOCK[2]}" ssd read_reqs)
pct=$(((h1 - h0) * 100 / (r1 - r0)))
hl_log "3: hit ratio right after the takeover: $pct% ($((h1 - h0)) of $((r1 - r0)) reads)"
[ "$pct" -ge 80 ] || hl_fail "the new owner's hit ratio after the takeover is $pct%, want >= 80%"

# never stale: the whole image through the new owner, the three writes included
rm -f "$T/r2.img"
timeout 120 qemu-img convert -f raw -O raw "$(url 2)" "$T/r2.img" || hl_fail "read through gateway 2"
stale=$(stale_blocks "$T/want.img" "$T/r2.img")
[ "$stale" = 0 ] || hl_fail "STALE after the takeover: $stale block(s) differ"
for off in 1048576 $((5 * 1048576 + 65536)) $((9 * 1048576)); do
	cmp -s <(dd if="$T/want.img" bs=64K skip=$((off / 65536)) count=1 2>/dev/null) \
		<(dd if="$T/r2.img" bs=64K skip=$((off / 65536)) count=1 2>/dev/null) ||
		hl_fail "STALE: the write at $off reads back old"
done
hl_log "2: 0 stale blocks through the new owner (3 writes, the last < 1 s before the kill)"
exit 0
