#!/bin/bash
# inquiry.sh - standard INQUIRY and the device identification VPD page:
# iscsi-inq shows a direct-access disk and a NAA designator in VPD 0x83; the
# designator bytes (read raw with pdu_client.py) and the unit serial number
# are the same on a second portal and after a daemon restart, because
# multipath initiators and hypervisors identify the disk by them.
. "$(dirname "$0")/lib.sh"
hl_need iscsi-inq python3

T=$(hl_tmpdir)
hl_target_start --size 64M --portal2

iscsi-inq "$HL_URL" >"$T/std.out" 2>&1 || { cat "$T/std.out" >&2; hl_fail "standard INQUIRY failed"; }
cat "$T/std.out"
grep -q '^Peripheral Device Type:DIRECT_ACCESS' "$T/std.out" || hl_fail "not a direct-access device"
grep -q '^Peripheral Qualifier:CONNECTED' "$T/std.out" || hl_fail "peripheral qualifier is not 'connected'"
grep -Eq '^Vendor:[[:alnum:]]' "$T/std.out" || hl_fail "empty T10 vendor id"
grep -Eq '^Product:[[:alnum:]]' "$T/std.out" || hl_fail "empty product id"
grep -Eq '^Version:[56] ' "$T/std.out" || hl_fail "VERSION is not SPC-3 (5) or SPC-4 (6)"
grep -q '^ReponseDataFormat:2' "$T/std.out" || hl_fail "response data format is not 2"

iscsi-inq -e 1 -c 0 "$HL_URL" >"$T/vpd00.out" 2>&1 || { cat "$T/vpd00.out" >&2; hl_fail "VPD 0x00 failed"; }
for p in 0x00 0x80 0x83; do
	grep -q "^Page:$p " "$T/vpd00.out" || hl_fail "VPD page $p not listed as supported"
done

iscsi-inq -e 1 -c 131 "$HL_URL" >"$T/vpd83.out" 2>&1 || { cat "$T/vpd83.out" >&2; hl_fail "VPD 0x83 failed"; }
grep -q '^Designator Type:(3) NAA' "$T/vpd83.out" || { cat "$T/vpd83.out"; hl_fail "no NAA designator in VPD 0x83"; }

# naa PORT: the logical unit's NAA designator(s) as hex, read over a raw session.
naa() {
	python3 "$HL_SRCDIR/tests/functional/pdu_client.py" vpd83 --portal "127.0.0.1:$1" \
		--target "$HL_IQN" --lun "$HL_LUN" >"$T/raw.$1" 2>&1 || { cat "$T/raw.$1" >&2; hl_fail "raw VPD 0x83 read failed"; }
	awk '$2 == "type=3" && $3 == "assoc=0" {print $5}' "$T/raw.$1"
}
serial() { hl_serial_of "iscsi://127.0.0.1:$1/$HL_IQN/$HL_LUN"; }

n1=$(naa "$HL_PORT")
cat "$T/raw.$HL_PORT"
[ -n "$n1" ] || hl_fail "no NAA designator with LU association"
# Each NAA designator's length matches its NAA type (SPC-4 7.8.6.6).
for d in $n1; do
	case $d in
	[235]???????????????) ;;
	6???????????????????????????????) ;;
	*) hl_fail "malformed NAA designator $d" ;;
	esac
done
n1=$(echo $n1)
s1=$(serial "$HL_PORT")
[ -n "$s1" ] || hl_fail "no unit serial number in VPD 0x80"
hl_log "NAA $n1, serial '$s1'"

n2=$(echo $(naa "$HL_PORT2"))
[ "$n2" = "$n1" ] || hl_fail "second portal shows NAA $n2, first shows $n1"
[ "$(serial "$HL_PORT2")" = "$s1" ] || hl_fail "second portal shows another unit serial number"
hl_log "second portal 127.0.0.1:$HL_PORT2: same NAA and serial"

if [ "$HL_TARGET" = hotlun ]; then
	hl_target_restart
	n3=$(echo $(naa "$HL_PORT"))
	[ "$n3" = "$n1" ] || hl_fail "after a restart the NAA designator changed: $n1 -> $n3"
	[ "$(serial "$HL_PORT")" = "$s1" ] || hl_fail "after a restart the unit serial number changed"
	hl_log "after restart: same NAA and serial"
fi
hl_target_stop
hl_log "PASS"
