#!/bin/sh
# vm_guest_init.sh - /init (PID 1) of the throw-away VM that vm_initiator.sh
# boots: Debian's stock kernel with iscsi_tcp and open-iscsi's iscsid/iscsiadm,
# busybox for everything else. It reads /hlvm.conf, then: SendTargets
# discovery, login (optionally CHAP and CRC32C digests), checks the disk size
# and the negotiated digests, writes random data with O_DIRECT and reads it
# back, writes and reads the last block, logs out, logs in again and checks
# the data survived, then logs out and powers off.
# Lines for the host start with "HLVM: "; the verdict is "HLVM-RESULT: PASS"
# or "HLVM-RESULT: FAIL"; "HLVM-MD5: <md5>" is the checksum of the first
# IO_MB MiB as the guest left them, which the host compares with the file.
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu
/bin/busybox --install -s
mkdir -p /proc /sys /dev /run/lock/iscsi /var/lock /tmp /etc/iscsi
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1

FAILS=0
say() { echo "HLVM: [$(cut -d' ' -f1 /proc/uptime)] $*"; }
ok() { say "ok   $*"; }
bad() {
	say "FAIL $*"
	FAILS=$((FAILS + 1))
}
show() { sed 's/^/HLVM:    | /' "$1"; }
finish() {
	if [ "$FAILS" -eq 0 ] && [ "${DONE:-0}" = 1 ]; then
		echo "HLVM-RESULT: PASS"
	else
		echo "HLVM-RESULT: FAIL ($FAILS failed checks)"
	fi
	sync
	poweroff -f
	echo o >/proc/sysrq-trigger
	sleep 10
}

. /hlvm.conf # PORTAL_IP PORTAL_PORT TARGET INITIATOR IO_MB CHAP_USER CHAP_SECRET DIGEST SIZE_BYTES STEP_TIMEOUT RESTART_S
say "kernel $(uname -r); portal $PORTAL_IP:$PORTAL_PORT target $TARGET digest $DIGEST chap ${CHAP_USER:+yes}"

for m in $(cat /etc/hlvm-modules); do
	insmod "$m" 2>/tmp/insmod.err || grep -q 'File exists' /tmp/insmod.err || { bad "insmod $m"; show /tmp/insmod.err; }
done
[ -d /sys/class/iscsi_transport/tcp ] || { bad "iscsi_tcp transport missing"; finish; }

ip link set lo up
NIC=
for i in $(seq 1 50); do
	for n in /sys/class/net/*; do
		[ "${n##*/}" != lo ] && NIC=${n##*/} && break
	done
	[ -n "$NIC" ] && break
	sleep 0.1
done
[ -n "$NIC" ] || { bad "no network interface"; finish; }
ip addr add 10.0.2.15/24 dev "$NIC"
ip link set "$NIC" up
ip route add default via 10.0.2.2

mkdir -p /etc/iscsi/nodes /etc/iscsi/send_targets /etc/iscsi/ifaces
echo "InitiatorName=$INITIATOR" >/etc/iscsi/initiatorname.iscsi
{
	echo "node.startup = manual"
	echo "node.session.timeo.replacement_timeout = 10"
	echo "node.conn[0].timeo.login_timeout = 10"
	echo "node.conn[0].timeo.logout_timeout = 10"
	echo "node.session.initial_login_retry_max = 1"
	echo "node.conn[0].iscsi.HeaderDigest = $DIGEST"
	echo "node.conn[0].iscsi.DataDigest = $DIGEST"
	if [ -n "$CHAP_USER" ]; then
		echo "node.session.auth.authmethod = CHAP"
		echo "node.session.auth.username = $CHAP_USER"
		echo "node.session.auth.password = $CHAP_SECRET"
	fi
} >/etc/iscsi/iscsid.conf

iscsid -f -n >/tmp/iscsid.log 2>&1 &
for i in $(seq 1 50); do
	grep -q ISCSIADM_ABSTRACT_NAMESPACE /proc/net/unix 2>/dev/null && break
	sleep 0.1
done
P=$PORTAL_IP:$PORTAL_PORT

if timeout "$STEP_TIMEOUT" iscsiadm -m discovery -t sendtargets -p "$P" >/tmp/disc.out 2>&1; then
	show /tmp/disc.out
	if grep -q " $TARGET\$" /tmp/disc.out; then ok "discovery lists $TARGET"; else bad "discovery does not list $TARGET"; fi
else
	bad "SendTargets discovery failed"
	show /tmp/disc.out
	finish
fi

login() {
	# The target may advertise its host-side address (127.0.0.1); always use
	# the portal as the guest sees it.
	iscsiadm -m node -T "$TARGET" -p "$P" -o new >/dev/null 2>&1
	for kv in "node.conn[0].iscsi.HeaderDigest=$DIGEST" "node.conn[0].iscsi.DataDigest=$DIGEST"; do
		iscsiadm -m node -T "$TARGET" -p "$P" -o update -n "${kv%%=*}" -v "${kv#*=}" >/dev/null 2>&1
	done
	if [ -n "$CHAP_USER" ]; then
		iscsiadm -m node -T "$TARGET" -p "$P" -o update -n node.session.auth.authmethod -v CHAP >/dev/null
		iscsiadm -m node -T "$TARGET" -p "$P" -o update -n node.session.auth.username -v "$CHAP_USER" >/dev/null
		iscsiadm -m node -T "$TARGET" -p "$P" -o update -n node.session.auth.password -v "$CHAP_SECRET" >/dev/null
	fi
	timeout "$STEP_TIMEOUT" iscsiadm -m node -T "$TARGET" -p "$P" --login >/tmp/login.out 2>&1
}
logout() { timeout "$STEP_TIMEOUT" iscsiadm -m node -T "$TARGET" -p "$P" --logout >/tmp/logout.out 2>&1; }
find_disk() {
	DISK=
	for i in $(seq 1 300); do
		for b in /sys/class/iscsi_session/session*/device/target*/*:*:*:*/block/*; do
			[ -e "$b" ] && DISK=${b##*/} && [ -b "/dev/$DISK" ] && return 0
		done
		sleep 0.1
	done
	return 1
}

if login; then ok "login"; else
	bad "login failed"
	show /tmp/login.out
	dmesg | grep -i iscsi | tail -5 | sed 's/^/HLVM:    | /'
	finish
fi
find_disk || { bad "no disk appeared on the session"; finish; }
DEV=/dev/$DISK

for c in /sys/class/iscsi_connection/connection*; do
	hd=$(cat "$c/header_digest" 2>/dev/null)
	dd_=$(cat "$c/data_digest" 2>/dev/null)
done
say "negotiated HeaderDigest=$hd DataDigest=$dd_"
if [ "$DIGEST" = CRC32C ]; then
	# sysfs says CRC32C, or 1 on kernels that print the enum value
	case "$hd/$dd_" in
	CRC32C/CRC32C | 1/1) ok "CRC32C header and data digests in use" ;;
	*) bad "digests not in use: $hd/$dd_" ;;
	esac
fi

BYTES=$(($(cat /sys/block/$DISK/size) * 512))
LBS=$(cat /sys/block/$DISK/queue/logical_block_size)
if [ "$BYTES" = "$SIZE_BYTES" ]; then ok "$DEV: $BYTES bytes, logical block $LBS"; else bad "$DEV has $BYTES bytes, want $SIZE_BYTES"; fi

dd if=/dev/urandom of=/tmp/pat bs=1M count="$IO_MB" 2>/dev/null
PAT=$(md5sum </tmp/pat | cut -d' ' -f1)
if dd if=/tmp/pat of="$DEV" bs=1M count="$IO_MB" oflag=direct conv=fsync 2>/tmp/dd.err; then
	ok "wrote $IO_MB MiB (O_DIRECT)"
else
	bad "write failed"
	show /tmp/dd.err
fi
RB=$(dd if="$DEV" bs=1M count="$IO_MB" iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
if [ "$RB" = "$PAT" ]; then ok "read back $IO_MB MiB: identical"; else bad "read-back differs ($RB vs $PAT)"; fi

LAST=$((BYTES / LBS - 1))
dd if=/dev/urandom of=/tmp/last bs="$LBS" count=1 2>/dev/null
dd if=/tmp/last of="$DEV" bs="$LBS" seek="$LAST" count=1 oflag=direct conv=fsync 2>/dev/null
if [ "$(dd if="$DEV" bs="$LBS" skip="$LAST" count=1 iflag=direct 2>/dev/null | md5sum)" = "$(md5sum </tmp/last)" ]; then
	ok "last block (LBA $LAST) written and read back"
else
	bad "last block write/read-back differs"
fi
# Reading past the end must fail cleanly, not hang.
if dd if="$DEV" of=/dev/null bs="$LBS" skip=$((LAST + 1)) count=1 iflag=direct 2>/dev/null; then
	n=$(dd if="$DEV" bs="$LBS" skip=$((LAST + 1)) count=1 iflag=direct 2>/dev/null | wc -c)
	[ "$n" = 0 ] && ok "read past the end returns nothing" || bad "read past the end returned $n bytes"
else
	ok "read past the end refused"
fi

# A restart of the target under I/O (RESTART_S > 0): the host restarts
# hotlund once it sees the marker; every O_DIRECT write and read-back of the
# loop must succeed and match (the kernel retries through the re-login).
if [ "${RESTART_S:-0}" -gt 0 ]; then
	echo "HLVM-MARK: RESTART"
	end=$(($(cut -d. -f1 /proc/uptime) + RESTART_S))
	n=0 errs=0
	while [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ]; do
		off=$((n % IO_MB))
		dd if=/dev/urandom of=/tmp/chunk bs=64k count=1 2>/dev/null
		if ! dd if=/tmp/chunk of="$DEV" bs=64k seek=$((off * 16)) count=1 oflag=direct conv=fsync 2>/tmp/dd.err; then
			errs=$((errs + 1))
			show /tmp/dd.err
		elif [ "$(dd if="$DEV" bs=64k skip=$((off * 16)) count=1 iflag=direct 2>/dev/null | md5sum)" != "$(md5sum </tmp/chunk)" ]; then
			errs=$((errs + 1))
			say "chunk $n read back differs"
		fi
		dd if=/tmp/chunk of=/tmp/pat bs=64k seek=$((off * 16)) count=1 conv=notrunc 2>/dev/null
		n=$((n + 1))
	done
	PAT=$(md5sum </tmp/pat | cut -d' ' -f1)
	if [ "$errs" = 0 ]; then ok "$n writes + read-backs across the target's restart, no error"; else bad "$errs of $n writes/read-backs failed across the restart"; fi
	grep -a 'logout' /tmp/iscsid.log | tail -3 | sed 's/^/HLVM:    | iscsid: /'
fi

if logout; then ok "logout"; else
	bad "logout failed"
	show /tmp/logout.out
fi
sleep 0.5
ls /sys/class/iscsi_session/ 2>/dev/null | grep -q session && bad "session still there after logout"
if login && find_disk; then
	ok "login again"
	DEV=/dev/$DISK
	RB=$(dd if="$DEV" bs=1M count="$IO_MB" iflag=direct 2>/dev/null | md5sum | cut -d' ' -f1)
	if [ "$RB" = "$PAT" ]; then ok "data intact after logout + login"; else bad "data differs after re-login"; fi
	if logout; then ok "final logout"; else bad "final logout failed"; fi
else
	bad "login again failed"
	show /tmp/login.out
fi
echo "HLVM-MD5: $PAT"
if dmesg | grep -qE 'I/O error|detected conn error|digest'; then
	dmesg | grep -E 'I/O error|conn error|digest' | tail -10 | sed 's/^/HLVM:    | /'
	dmesg | grep -qE 'I/O error|detected conn error' && bad "kernel logged I/O or connection errors"
fi
DONE=1
finish
