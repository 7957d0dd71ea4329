#!/bin/bash
# vm_multipath.sh - the Linux kernel's dm-multipath against a gateway pair
# (docs/gateways.md): Debian's stock kernel under qemu with iscsi_tcp,
# scsi_dh_alua and dm-multipath, open-iscsi and multipath-tools' multipathd
# in an initramfs, tests/functional/vm_multipath_guest.sh as PID 1.
# Two hotlund gateways serve one SAN LUN (a third hotlund with a file LUN is
# the SAN, as in gateway_san.sh). Each boot logs in through both gateways and
# checks one multipath device: the owner's path active (prio 50), the
# standby's path a ghost (prio 1); then the guest runs O_DIRECT write +
# read-back + compare while the host breaks the owner:
#   term: SIGTERM of the owner (planned handover to the standby);
#   kill: SIGKILL of the owner; the kernel's scsi_dh_alua sends SET TARGET
#         PORT GROUPS through the standby, held until it serves: on rbd it
#         takes over once the heartbeat stood still for gateway_dead_ms, on
#         a SAN once the owner left the request unanswered a lease;
#   stop: SIGSTOP of the owner (HL_VM_MP_STOP=1; SIGCONT after the I/O).
# No I/O may fail; the longest chunk (the stall) is logged as
# "<case>: stall N s".
#   pr:   persistent reservations across the pair (HL_VM_MP_ORIGIN=rbd:
#         the gateways serve an rbd image of a single-node Ceph instead;
#         vm_multipath_pr.sh runs this): mpathpersist registers the guest's
#         key on both paths and reserves (Write Exclusive, Registrants
#         Only), sg_persist reads keys and reservation through each path;
#         the owner is killed (SIGKILL); after the takeover the guest still
#         reads its registrations and reservation and writes; the host, as
#         a second node, preempts the guest's key through the new owner (as
#         fence_mpath does), and the guest's writes get RESERVATION
#         CONFLICT while its reads go on.
#
# The kernel, busybox-static and multipath-tools (+ the libraries it needs
# that a host may lack) .debs are fetched once with `apt-get download`
# (nothing is installed) into $HL_VM_CACHE (default ~/.cache/hotlun-vm).
# Environment: HL_VM_ACCEL=tcg|kvm (default tcg), HL_VM_TIMEOUT=240 (s per
# boot), HL_VM_CACHE, HL_VM_MP_CASES="term kill" (add stop for SIGSTOP),
# HL_VM_MP_STOP=1 (same as adding stop), HL_VM_MP_ORIGIN=san|rbd (default
# san; the pr case needs rbd: a SAN pair offers no reservations),
# HL_VM_MP_LEASE_MS / HL_VM_MP_DEAD_MS (default 1000 / 2000; empty: hotlund's
# defaults). The guest uses the initiator settings hotlun ships
# (contrib/multipath/hotlun.conf, iscsid-hotlun.conf).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/vm_lib.sh"
hl_need qemu-system-x86_64 dpkg-deb apt-get gzip python3
for t in iscsid iscsiadm; do
	command -v $t >/dev/null || [ -x /usr/sbin/$t ] || [ -x /sbin/$t ] ||
		hl_missing "$t missing (apt-get install open-iscsi)"
done
[ "$HL_TARGET" = tgt ] && hl_skip "the gateways under test are hotlund; nothing to run against tgt"
export PATH=$PATH:/usr/sbin:/sbin

CACHE=${HL_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/hotlun-vm}
IMG=$CACHE/mpath
ACCEL=${HL_VM_ACCEL:-tcg}
VM_TIMEOUT=${HL_VM_TIMEOUT:-240}
CASES=${HL_VM_MP_CASES:-term kill}
[ "${HL_VM_MP_STOP:-0}" = 1 ] && CASES="$CASES stop"
ORIGIN=${HL_VM_MP_ORIGIN:-san}
# the gateways' lease and dead time (docs/gateways.md): the pair that makes
# a takeover 3.5 s; HL_VM_MP_LEASE_MS= HL_VM_MP_DEAD_MS= (empty): the defaults
LEASE_MS=${HL_VM_MP_LEASE_MS-1000}
DEAD_MS=${HL_VM_MP_DEAD_MS-2000}
TOOL=$HL_BUILDDIR/tests/functional/hl_scsi_tool
case " $CASES " in *" pr "*)
	[ "$ORIGIN" = rbd ] || hl_error "the pr case needs HL_VM_MP_ORIGIN=rbd"
	[ -x "$TOOL" ] || hl_missing "$TOOL not built"
	hl_need sg_persist
	;;
esac
if [ "$ORIGIN" = rbd ]; then
	hl_need rbd ceph ceph-mon ceph-osd
	"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"
fi
MODULES="iscsi_tcp sd_mod virtio_pci virtio_net crc32c_generic scsi_dh_alua dm_multipath dm_round_robin dm_service_time"
MP_DEBS="multipath-tools libaio1 libdevmapper1.02.1 liburcu8 libjson-c5 libedit2"
T=$(hl_tmpdir)
mkdir -p "$IMG" || hl_error "cannot create $IMG"

# ---------------------------------------------------------------- image build

build_image() {
	local B=$IMG/build kpkg pk need=
	rm -rf "$B"
	mkdir -p "$IMG/debs" "$B/k" "$B/x" "$B/root"
	kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	[ -n "$kpkg" ] || hl_missing "cannot resolve linux-image-amd64 (no apt lists? run apt-get update)"
	for pk in "$kpkg" busybox-static; do # vm_initiator.sh's, if it has them
		ls "$IMG/debs/${pk}"_*.deb >/dev/null 2>&1 || ln -f "$CACHE/debs/${pk}"_*.deb "$IMG/debs/" 2>/dev/null
	done
	for pk in "$kpkg" busybox-static $MP_DEBS; do
		ls "$IMG/debs/${pk}"_*.deb >/dev/null 2>&1 || need="$need $pk"
	done
	if [ -n "$need" ]; then
		hl_log "downloading$need (apt-get download, nothing is installed)"
		(cd "$IMG/debs" && apt-get download -q $need) >"$B/download.log" 2>&1 ||
			{ cat "$B/download.log" >&2; hl_missing "apt-get download failed"; }
	fi
	dpkg-deb -x "$(ls "$IMG/debs/${kpkg}"_*.deb | head -1)" "$B/k" || hl_error "unpacking the kernel failed"
	for pk in busybox-static $MP_DEBS; do
		dpkg-deb -x "$(ls "$IMG/debs/${pk}"_*.deb | head -1)" "$B/x" || hl_error "unpacking $pk failed"
	done
	local vmlinuz kver moddir
	vmlinuz=$(ls "$B"/k/boot/vmlinuz-* | head -1)
	kver=${vmlinuz##*/vmlinuz-}
	moddir=$B/k/lib/modules/$kver
	[ -d "$moddir" ] || moddir=$B/k/usr/lib/modules/$kver
	[ -d "$moddir" ] || hl_error "no modules for $kver"

	local R=$B/root L=$B/root/lib/x86_64-linux-gnu
	mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib/multipath,lib64,etc/iscsi,proc,sys,dev,run,tmp,var} "$L"
	cp "$B/x/bin/busybox" "$R/bin/busybox"
	ln -s busybox "$R/bin/sh"
	# libraries: the unpacked .debs first (multipath-tools ships its own), then the host's
	local xlp=$B/x/lib:$B/x/lib/x86_64-linux-gnu:$B/x/usr/lib/x86_64-linux-gnu
	libs_of() {
		local lib
		LD_LIBRARY_PATH=$xlp ldd "$1" | grep -q 'not found' && hl_error "$1: $(LD_LIBRARY_PATH=$xlp ldd "$1" | grep 'not found')"
		for lib in $(LD_LIBRARY_PATH=$xlp ldd "$1" | awk '/=> \// {print $3}'); do
			cp -n "$(readlink -f "$lib")" "$L/${lib##*/}"
		done
	}
	local t p
	for t in iscsid iscsiadm; do
		p=$(command -v $t)
		cp "$(readlink -f "$p")" "$R/sbin/$t"
		libs_of "$p"
	done
	for t in multipath multipathd mpathpersist; do
		cp "$B/x/sbin/$t" "$R/sbin/$t"
		libs_of "$B/x/sbin/$t"
	done
	p=$(command -v sg_persist) || hl_missing "sg_persist missing (apt-get install sg3-utils)"
	cp "$(readlink -f "$p")" "$R/sbin/sg_persist"
	libs_of "$p"
	for p in "$B"/x/lib/multipath/*.so; do
		cp "$p" "$R/lib/multipath/"
		libs_of "$p"
	done
	cp "$(readlink -f /lib64/ld-linux-x86-64.so.2)" "$R/lib64/ld-linux-x86-64.so.2"
	# glibc loads libgcc_s at run time for pthread_cancel (multipathd's threads)
	p=$(ls /lib/x86_64-linux-gnu/libgcc_s.so.1 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 2>/dev/null | head -1)
	[ -n "$p" ] || hl_missing "libgcc_s.so.1 not found on the host"
	cp "$(readlink -f "$p")" "$L/libgcc_s.so.1"
	echo 'root:x:0:0:root:/:/bin/sh' >"$R/etc/passwd"
	echo 'root:x:0:' >"$R/etc/group"

	vm_modules "$R" "$moddir" $MODULES
	hl_log "kernel $kver; modules: ${VM_MODULES[*]}"
	vm_pack "$R" "$B/x/bin/busybox" "$vmlinuz" "$kver" "$IMG"
	echo "$IMG_VERSION" >"$IMG/version"
	rm -rf "$B"
}
# what the image carries changed (2: mpathpersist and sg_persist): built again
IMG_VERSION=2

exec 9>"$CACHE/.lock"
flock -w 600 9 || hl_error "cannot lock $CACHE"
if [ ! -s "$IMG/vmlinuz" ] || [ ! -s "$IMG/initramfs.gz" ] || [ ! -x "$IMG/busybox" ] ||
	[ "$(cat "$IMG/version" 2>/dev/null)" != "$IMG_VERSION" ]; then
	t0=$SECONDS
	build_image
	hl_log "VM image built in $((SECONDS - t0)) s"
fi
flock -u 9

# ---------------------------------------------------------------- the gateway pair

CTL=$HL_BUILDDIR/hotlunctl
if [ "$ORIGIN" = rbd ]; then
	MINI_CEPH=$HL_SRCDIR/tests/functional/mini_ceph.sh
	cluster=$T/ceph
	rc=0
	MINI_CEPH_QUIET=1 "$MINI_CEPH" up "$cluster" origin:64M >"$T/ceph-up.log" 2>&1 || rc=$?
	[ $rc = 3 ] && hl_skip "$(tail -1 "$T/ceph-up.log")"
	[ $rc = 0 ] || hl_fail "single-node Ceph did not start: $(tail -8 "$T/ceph-up.log")"
	GW_ORIGIN=rbd:rbd/origin
	# hotlund goes first: librbd cannot close an image once the cluster is gone
	trap 'rc=$?; for p in "${HL_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done; sleep 1; MINI_CEPH_QUIET=1 "$MINI_CEPH" down "$cluster" >/dev/null 2>&1; (exit $rc); hl_cleanup' EXIT
else
	HL_IQN=$HL_IQN_PREFIX:vm-mp-san hl_target_start --size 64M
	GW_ORIGIN=$HL_URL
	trap 'rc=$?; for p in "${HL_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; done; (exit $rc); hl_cleanup' EXIT
fi

IQN=$HL_IQN_PREFIX:vm-mp
declare -A PORT PID SOCK
PORT[1]=$(hl_free_port)
PORT[2]=$(hl_free_port)
while [ "${PORT[2]}" = "${PORT[1]}" ]; do PORT[2]=$(hl_free_port); done
for g in 1 2; do
	st=$T/gw$g
	mkdir -p "$st"
	truncate -s 96M "$st/cache.img"
	SOCK[$g]=$st/ctl.sock
	hl_cache_front_conf "$st/hotlund.conf" "${PORT[$g]}" "$st" "$IQN" "$GW_ORIGIN" \
		device="$st/cache.img" size=96M block_size=64K admission=always
	sed -i "s|^cache = ssd$|&\nserial = vmmp0001\nnaa = 6001405aa0000000000000000000cafe|" "$st/hotlund.conf"
	[ "$ORIGIN" = rbd ] && sed -i "s|^cache = ssd$|&\nrbd_conf = $cluster/ceph.conf|" "$st/hotlund.conf"
	sed -i "s|^threads = 2$|&\ngateway = $g\ngateways = 1,2|" "$st/hotlund.conf"
	[ -n "$LEASE_MS" ] && sed -i "s|^gateways = 1,2$|&\ngateway_lease_ms = $LEASE_MS|" "$st/hotlund.conf"
	[ -n "$DEAD_MS" ] && sed -i "s|^gateways = 1,2$|&\ngateway_dead_ms = $DEAD_MS|" "$st/hotlund.conf"
done
start_gw() {
	hl_start_hotlund "$T/gw$1/hotlund.conf"
	PID[$1]=$HL_PID
}
# own G KEY: a field of gateway G's view of disk san's ownership
own() {
	local out
	out=$("$CTL" --socket "${SOCK[$1]}" stats --json 2>/dev/null) || { echo "?"; return; }
	python3 -c 'import json,sys; print(json.loads(sys.argv[1])["disks"]["san"]["ownership"][sys.argv[2]])' \
		"$out" "$2" 2>/dev/null || echo "?"
}
wait_state() { # G STATE SECONDS
	for _ in $(seq 1 $(($3 * 10))); do
		[ "$(own "$1" state)" = "$2" ] && return 0
		sleep 0.1
	done
	hl_fail "gateway $1 is not $2 after $3 s: $(own "$1" state), last: $(own "$1" last)"
}
stop_gw() { # G SIGNAL
	kill -"$2" "${PID[$1]}"
	wait "${PID[$1]}" 2>/dev/null
	hl_forget "${PID[$1]}"
}

# ---------------------------------------------------------------- one boot

# wait_mark RUN QEMU DEADLINE MARK: until the guest printed "HLVM-MARK: MARK"
wait_mark() {
	until tr -d '\r' 2>/dev/null <"$1/console.log" | grep -aq "^HLVM-MARK: $4\$"; do
		kill -0 "$2" 2>/dev/null || return 1
		[ $SECONDS -lt "$3" ] || return 1
		sleep 0.2
	done
}

# pr_host RUN QEMU OWNER STANDBY DEADLINE: the host's side of the pr case: it
# kills the owner when the guest has reserved, registers a second node's
# key (0xb2) through the new owner once it serves (the guest waits for that
# key), and fences the guest (PREEMPT of its key 0x123abc) when asked.
pr_host() {
	local run=$1 qemu=$2 owner=$3 standby=$4 deadline=$5 url out
	url=iscsi://127.0.0.1:${PORT[$standby]}/$IQN/0
	wait_mark "$run" "$qemu" "$deadline" PR-KILL || return 0 # the verdict says why
	stop_gw "$owner" KILL
	hl_log "pr: SIGKILL sent to gateway $owner; waiting for gateway $standby to own the disk"
	wait_state "$standby" owner 30
	out=$("$TOOL" pr "$url" 77 register 0 0xb2 0 2>&1)
	hl_log "pr: node 2 registers 0xb2 through gateway $standby: $out"
	[[ $out = GOOD* ]] || hl_fail "pr: node 2's REGISTER through gateway $standby: $out"
	wait_mark "$run" "$qemu" "$deadline" PR-FENCE || return 0
	out=$("$TOOL" pr "$url" 77 preempt 0xb2 0x123abc 5 2>&1)
	hl_log "pr: node 2 preempts the guest's key through gateway $standby: $out"
	[[ $out = GOOD* ]] || hl_fail "pr: node 2's PREEMPT through gateway $standby: $out"
}

# boot CASE OWNER STANDBY IO_SECONDS: the guest logs in through both, the
# host breaks OWNER as CASE says once the guest's I/O runs, which then goes
# on for IO_SECONDS.
boot() {
	local label=$1 owner=$2 standby=$3 run=$T/$1
	rm -rf "$run" # a case may run twice: no old console log
	mkdir -p "$run/cfg"
	q() { printf "%s='%s'\n" "$1" "$2"; }
	{
		q PORTALS "10.0.2.2:${PORT[1]} 10.0.2.2:${PORT[2]}"
		q TARGET "$IQN"
		q INITIATOR "iqn.2026-11.io.hotlun.test:vm-mp"
		q IO_MB 4
		q CHUNK_KB 256
		q IO_SECONDS "$4"
		q STEP_TIMEOUT 60
		[ "$label" = pr ] && q PR 1
	} >"$run/cfg/hlvm.conf"
	cp "$HL_SRCDIR/tests/functional/vm_multipath_guest.sh" "$run/cfg/init"
	chmod 755 "$run/cfg/init"
	# the initiator settings hotlun ships, as an admin installs them
	cp "$HL_SRCDIR/contrib/multipath/hotlun.conf" "$run/cfg/hotlun-multipath.conf"
	cp "$HL_SRCDIR/contrib/multipath/iscsid-hotlun.conf" "$run/cfg/iscsid-hotlun.conf"
	(cd "$run/cfg" && printf './init\n./hlvm.conf\n./hotlun-multipath.conf\n./iscsid-hotlun.conf\n' |
		"$IMG/busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
		gzip >"$run/cfg.gz"
	cat "$IMG/initramfs.gz" "$run/cfg.gz" >"$run/initrd.gz"

	local t0=$SECONDS rc=0
	hl_log "$label: booting $(cat "$IMG/kver") (accel=$ACCEL); gateway $owner owns, $standby standby"
	timeout -k 5 "$VM_TIMEOUT" qemu-system-x86_64 -machine "pc,accel=$ACCEL" -cpu max -smp 1 -m 512 \
		-nodefaults -no-user-config -display none -no-reboot \
		-serial "file:$run/console.log" -monitor none \
		-kernel "$IMG/vmlinuz" -initrd "$run/initrd.gz" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 oops=panic" \
		-netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
		</dev/null >"$run/qemu.out" 2>&1 &
	local qemu=$! deadline=$((SECONDS + VM_TIMEOUT)) marked=0
	if [ "$label" = pr ]; then
		pr_host "$run" "$qemu" "$owner" "$standby" "$deadline"
		marked=1
	fi
	until [ "$label" = pr ] || tr -d '\r' 2>/dev/null <"$run/console.log" | grep -aq '^HLVM-MARK: FAIL'; do
		kill -0 "$qemu" 2>/dev/null || break
		[ $SECONDS -lt $deadline ] || break
		sleep 0.2
	done
	[ "$label" != pr ] && tr -d '\r' <"$run/console.log" | grep -aq '^HLVM-MARK: FAIL' && marked=1
	if [ $marked = 1 ] && [ "$label" != pr ]; then
		sleep 2 # mid-I/O
		if [ "$(own "$owner" state)" != owner ]; then
			hl_fail "$label: gateway $owner no longer owns the disk when it should fail (the initiator moved it: $(own "$standby" last))"
		fi
		case $label in
		term) stop_gw "$owner" TERM ;;
		kill) stop_gw "$owner" KILL ;;
		stop) kill -STOP "${PID[$owner]}" ;;
		esac
		hl_log "$label: SIGNAL sent to gateway $owner (pid ${PID[$owner]})"
	fi
	wait "$qemu" || rc=$?
	[ "$label" = stop ] && kill -CONT "${PID[$owner]}"
	tr -d '\r' <"$run/console.log" | grep -a '^HLVM' | sed "s/^/  [$label] /"
	local verdict stall
	verdict=$(tr -d '\r' <"$run/console.log" | grep -a '^HLVM-RESULT:' | tail -1)
	case $verdict in
	*PASS*) ;;
	*FAIL*) hl_fail "$label: the guest reported failures (see the lines above)" ;;
	*)
		tail -n 30 "$run/console.log" >&2
		cat "$run/qemu.out" >&2
		hl_fail "$label: no verdict from the VM (qemu status $rc after $((SECONDS - t0)) s)"
		;;
	esac
	[ $marked = 1 ] || hl_fail "$label: the guest never started its I/O under failure"
	stall=$(tr -d '\r' <"$run/console.log" | sed -n 's/^HLVM-STALL: \([0-9.]*\).*/\1/p')
	hl_log "$label: PASS in $((SECONDS - t0)) s; stall $stall s; gateway $standby: $(own "$standby" state), last: $(own "$standby" last)"
}

start_gw 1
wait_state 1 owner 20
start_gw 2
wait_state 2 standby 10
owner=1 standby=2
for c in $CASES; do
	case $c in
	term) io_s=12 ;; # ~0.2 s stall
	kill) io_s=25 ;; # ~3.5 s stall on rbd, ~5.5 s on a SAN (docs/gateways.md)
	pr) io_s=0 ;;    # its own steps (the guest's pr_phase)
	*) io_s=40 ;;    # noop-out 1 + 2 s, then as kill
	esac
	boot "$c" $owner $standby $io_s
	wait_state $standby owner 20
	if [ "$c" = pr ]; then
		# what the guest saw, as the host sees it through the surviving gateway
		u=iscsi://127.0.0.1:${PORT[$standby]}/$IQN/0
		out=$("$TOOL" pr "$u" 77 read-rsv 2>&1)
		[[ $out =~ type\ 5\ key\ 0xb2$ ]] || hl_fail "pr: the reservation after the fence: $out"
		hl_log "pr: gateway $standby reports: $out; $("$TOOL" pr "$u" 77 read-keys 2>&1)"
	fi
	if [ "$c" = stop ]; then
		wait_state $owner standby 20 # thawed, it finds itself preempted
	else
		start_gw $owner # back as a standby, by itself
		wait_state $owner standby 10
	fi
	t=$owner owner=$standby standby=$t
	sleep 10 # the hold after a move (docs/gateways.md rule 3)
done
hl_log "PASS"
