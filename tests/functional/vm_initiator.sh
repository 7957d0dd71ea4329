#!/bin/bash
# vm_initiator.sh - the Linux kernel initiator against hotlund: boots Debian's
# stock kernel under qemu (no host kernel modules involved) with iscsi_tcp and
# open-iscsi's iscsid/iscsiadm in an initramfs, and runs
# tests/functional/vm_guest_init.sh as PID 1: discovery, login, size check,
# O_DIRECT write/read-back, last block, logout, login again, data intact.
# Three boots: plain, then one-way CHAP with CRC32C header and data digests
# and an SSD cache in front (hits, streamed hits), then plain again with the
# cache, hotlund restarted (SIGTERM, start: a warm restart) under write +
# read-back I/O, which must see no error and no old data.
# After each boot the host checks that the backing file holds exactly what
# the guest wrote.
#
# The kernel and busybox-static .debs are fetched once with `apt-get download`
# (nothing is installed) into $HL_VM_CACHE (default ~/.cache/hotlun-vm), and
# the initramfs is built from them plus the host's open-iscsi binaries.
# Environment: HL_VM_ACCEL=tcg|kvm (default tcg: works everywhere, ~20 s a
# boot), HL_VM_TIMEOUT=300 (s per boot), HL_VM_CACHE, HL_VM_IO_MB=4 (16 MiB and more
# stalls for seconds in qemu's user-mode network under TCG, with tgt too).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/vm_lib.sh"
hl_need qemu-system-x86_64 dpkg-deb apt-get gzip
for t in iscsid iscsiadm; do
	command -v $t >/dev/null || [ -x /usr/sbin/$t ] || [ -x /sbin/$t ] ||
		hl_missing "$t missing (apt-get install open-iscsi)"
done
export PATH=$PATH:/usr/sbin:/sbin

CACHE=${HL_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/hotlun-vm}
ACCEL=${HL_VM_ACCEL:-tcg}
VM_TIMEOUT=${HL_VM_TIMEOUT:-300}
IO_MB=${HL_VM_IO_MB:-4}
SIZE=$((128 * 1024 * 1024))
MODULES="iscsi_tcp sd_mod virtio_pci virtio_net crc32c_generic"
T=$(hl_tmpdir)
mkdir -p "$CACHE" || hl_error "cannot create $CACHE"

# ---------------------------------------------------------------- image build

build_image() {
	local B=$CACHE/build kpkg
	rm -rf "$B"
	mkdir -p "$CACHE/debs" "$B/k" "$B/bb" "$B/root"
	kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	[ -n "$kpkg" ] || hl_error "cannot resolve linux-image-amd64 (no apt lists? run apt-get update)"
	if ! ls "$CACHE/debs/${kpkg}"_*.deb >/dev/null 2>&1 || ! ls "$CACHE"/debs/busybox-static_*.deb >/dev/null 2>&1; then
		hl_log "downloading $kpkg and busybox-static (apt-get download, nothing is installed)"
		rm -f "$CACHE"/debs/*.deb
		(cd "$CACHE/debs" && apt-get download -q "$kpkg" busybox-static) >"$B/download.log" 2>&1 ||
			{ cat "$B/download.log" >&2; hl_error "apt-get download failed"; }
	fi
	dpkg-deb -x "$(ls "$CACHE/debs/${kpkg}"_*.deb | head -1)" "$B/k" || hl_error "unpacking the kernel failed"
	dpkg-deb -x "$(ls "$CACHE"/debs/busybox-static_*.deb | head -1)" "$B/bb" || hl_error "unpacking busybox failed"
	local vmlinuz kver moddir
	vmlinuz=$(ls "$B"/k/boot/vmlinuz-* | head -1)
	kver=${vmlinuz##*/vmlinuz-}
	moddir=$B/k/lib/modules/$kver
	[ -d "$moddir" ] || moddir=$B/k/usr/lib/modules/$kver
	[ -d "$moddir" ] || hl_error "no modules for $kver"

	local R=$B/root
	mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib/x86_64-linux-gnu,lib64,etc/iscsi,proc,sys,dev,run,tmp,var}
	cp "$B/bb/bin/busybox" "$R/bin/busybox"
	ln -s busybox "$R/bin/sh"
	local t p lib
	for t in iscsid iscsiadm; do
		p=$(command -v $t)
		cp "$(readlink -f "$p")" "$R/sbin/$t"
		for lib in $(ldd "$p" | awk '/=> \// {print $3}'); do
			cp -n "$(readlink -f "$lib")" "$R/lib/x86_64-linux-gnu/${lib##*/}"
		done
	done
	cp "$(readlink -f /lib64/ld-linux-x86-64.so.2)" "$R/lib64/ld-linux-x86-64.so.2"
	echo 'root:x:0:0:root:/:/bin/sh' >"$R/etc/passwd"
	echo 'root:x:0:' >"$R/etc/group"

	vm_modules "$R" "$moddir" $MODULES
	hl_log "kernel $kver; modules: ${VM_MODULES[*]}"
	vm_pack "$R" "$B/bb/bin/busybox" "$vmlinuz" "$kver" "$CACHE"
	rm -rf "$B"
}

# One build at a time, even when several test runs share the cache.
exec 9>"$CACHE/.lock"
flock -w 600 9 || hl_error "cannot lock $CACHE"
if [ ! -s "$CACHE/vmlinuz" ] || [ ! -s "$CACHE/initramfs.gz" ] || [ ! -x "$CACHE/busybox" ]; then
	t0=$SECONDS
	build_image
	hl_log "VM image built in $((SECONDS - t0)) s"
fi
flock -u 9

# ---------------------------------------------------------------- one boot

# boot LABEL DIGEST [CHAP_USER CHAP_SECRET]; RESTART_S=N in the environment:
# the guest runs N seconds of write + read-back I/O and the host restarts
# hotlund (SIGTERM, start again) as soon as that I/O has begun.
boot() {
	local label=$1 digest=$2 user=${3:-} secret=${4:-} run=$T/$1
	mkdir -p "$run/cfg"
	q() { printf "%s='%s'\n" "$1" "$2"; }
	{
		q PORTAL_IP 10.0.2.2
		q PORTAL_PORT "$HL_PORT"
		q TARGET "$HL_IQN"
		q INITIATOR "iqn.2026-11.io.hotlun.test:vm-$label"
		q IO_MB "$IO_MB"
		q CHAP_USER "$user"
		q CHAP_SECRET "$secret"
		q DIGEST "$digest"
		q SIZE_BYTES "$SIZE"
		q STEP_TIMEOUT 60
		q RESTART_S "${RESTART_S:-0}"
	} >"$run/cfg/hlvm.conf"
	cp "$HL_SRCDIR/tests/functional/vm_guest_init.sh" "$run/cfg/init"
	chmod 755 "$run/cfg/init"
	(cd "$run/cfg" && printf './init\n./hlvm.conf\n' | "$CACHE/busybox" cpio -o -H newc -R 0:0 2>/dev/null) |
		gzip >"$run/cfg.gz"
	cat "$CACHE/initramfs.gz" "$run/cfg.gz" >"$run/initrd.gz"

	local t0=$SECONDS mem=$((IO_MB * 4 + 256)) rc=0
	hl_log "$label: booting $(cat "$CACHE/kver") (accel=$ACCEL), portal 10.0.2.2:$HL_PORT as the guest sees it"
	timeout -k 5 "$VM_TIMEOUT" qemu-system-x86_64 -machine "pc,accel=$ACCEL" -cpu max -smp 1 -m "$mem" \
		-nodefaults -no-user-config -display none -no-reboot \
		-serial "file:$run/console.log" -monitor none \
		-kernel "$CACHE/vmlinuz" -initrd "$run/initrd.gz" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 oops=panic" \
		-netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
		</dev/null >"$run/qemu.out" 2>&1 &
	local qemu=$!
	if [ "${RESTART_S:-0}" -gt 0 ]; then
		local deadline=$((SECONDS + VM_TIMEOUT))
		until tr -d '\r' 2>/dev/null <"$run/console.log" | grep -aq '^HLVM-MARK: RESTART'; do
			kill -0 "$qemu" 2>/dev/null || break
			[ $SECONDS -lt $deadline ] || break
			sleep 0.2
		done
		if tr -d '\r' <"$run/console.log" | grep -aq '^HLVM-MARK: RESTART'; then
			sleep 2 # mid-I/O
			hl_log "$label: restarting hotlund under the guest's I/O"
			hl_target_restart
			grep -q 'all 1 session(s) logged out' "$(hl_tmpdir)"/hotlund.*.log ||
				hl_fail "$label: the kernel initiator did not log out when asked"
		fi
	fi
	wait "$qemu" || rc=$?
	tr -d '\r' <"$run/console.log" | grep -a '^HLVM' | sed "s/^/  [$label] /"
	hl_check_alive
	local verdict md5
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
	# What the guest wrote is in the backing file.
	md5=$(tr -d '\r' <"$run/console.log" | sed -n 's/^HLVM-MD5: //p' | tail -1)
	[ "$(head -c $((IO_MB * 1024 * 1024)) "$HL_DISK" | md5sum | cut -d' ' -f1)" = "$md5" ] ||
		hl_fail "$label: the backing file does not hold what the guest wrote"
	hl_log "$label: PASS in $((SECONDS - t0)) s (backing file matches the guest's data)"
}

hl_target_start --size $SIZE
boot plain None
hl_target_stop

# vm_cache_stat KEY: a statistic of the SSD cache in front of the LUN.
vm_cache_stat() { hl_cache_stat "$(hl_tmpdir)/state/ctl.sock" ssd "$1"; }

# With an SSD cache in front (every miss admitted): the guest's read-back
# after the write fills it, and its read after the re-login is served from
# it: 1 MiB O_DIRECT reads, which the kernel splits into READs of up to its
# max_sectors_kb; with 64 KiB streaming chunks every all-hit READ above that
# goes out streamed, with CRC32C data digests; the guest compares every byte.
HOTLUN_HIT_CHUNK=65536 hl_target_start --disk "$HL_DISK" --chap vmuser vm-secret-4567 --cache 64K
boot chap-crc32c CRC32C vmuser vm-secret-4567
HITS=$(vm_cache_stat read_hits) STREAMS=$(vm_cache_stat hit_streams)
[ "$HITS" -gt 0 ] || hl_fail "chap-crc32c: the cache served no hit to the kernel initiator"
[ "$STREAMS" -gt 0 ] || hl_fail "chap-crc32c: no hit was streamed to the kernel initiator ($HITS hits)"
hl_log "chap-crc32c: $HITS cache hits, $STREAMS of them streamed (partial $(vm_cache_stat read_partial), misses $(vm_cache_stat read_misses), fills dropped $(vm_cache_stat fills_dropped), admissions $(vm_cache_stat admissions))"
hl_target_stop

# A restart of hotlund under the kernel initiator's I/O: no I/O error. The
# cache in front restarts warm (the same 64K blocks are written and read
# back again and again, so they are cached): every read-back must still
# match what the guest last wrote.
hl_target_start --disk "$HL_DISK" --cache 64K
RESTART_S=20 boot restart None
[ "$(vm_cache_stat read_hits)" -gt 0 ] || hl_fail "restart: no cache hit after the warm restart"
hl_log "restart: $(vm_cache_stat read_hits) cache hits after the warm restart (the restart kept $(hl_cache_stat "$(hl_tmpdir)/state/ctl.sock" ssd warm_kept disk0) block(s))"
hl_target_stop
hl_log "PASS"
