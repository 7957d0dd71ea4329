# tests/functional/vm_lib.sh - sourced by the VM tests (vm_initiator.sh,
# vm_multipath.sh) after lib.sh: what building their initramfs shares.

# decompress_ko FILE: the module on stdout, whatever its compression.
decompress_ko() {
	case $1 in
	*.ko.xz) xz -dc "$1" ;;
	*.ko.zst) zstd -dc "$1" ;;
	*.ko.gz) gzip -dc "$1" ;;
	*) cat "$1" ;;
	esac
}

# vm_modules ROOT MODDIR MODULE...: copy MODULE... and what they depend on
# (each .ko's modinfo "depends=" field) into ROOT/lib/modules, listed in load
# order in ROOT/etc/hlvm-modules; sets VM_MODULES to that order.
vm_modules() {
	local R=$1 moddir=$2 f n
	shift 2
	declare -A where=() done_=()
	VM_MODULES=()
	while IFS= read -r f; do
		n=${f##*/}
		n=${n%%.ko*}
		where[${n//-/_}]=$f
	done < <(find "$moddir/kernel" -name '*.ko*')
	add_mod() {
		local m=${1//-/_} d
		[ -n "${done_[$m]:-}" ] && return
		done_[$m]=1
		[ -n "${where[$m]:-}" ] || return 0 # built into the kernel
		for d in $(decompress_ko "${where[$m]}" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -1 | tr ',' ' '); do
			add_mod "$d"
		done
		VM_MODULES+=("$m")
	}
	for n in "$@"; do add_mod "$n"; done
	mkdir -p "$R/lib/modules"
	: >"$R/etc/hlvm-modules"
	for n in "${VM_MODULES[@]}"; do
		decompress_ko "${where[$n]}" >"$R/lib/modules/$n.ko"
		echo "/lib/modules/$n.ko" >>"$R/etc/hlvm-modules"
	done
}

# vm_pack ROOT BUSYBOX VMLINUZ KVER DIR: the initramfs of ROOT, busybox, the
# kernel and its version into DIR (initramfs.gz last, atomically).
vm_pack() {
	local R=$1 bb=$2 vmlinuz=$3 kver=$4 dir=$5
	(cd "$R" && find . | LC_ALL=C sort | "$bb" cpio -o -H newc -R 0:0 2>/dev/null) |
		gzip -6 >"$dir/initramfs.gz.new" || hl_error "cpio failed"
	cp "$bb" "$dir/busybox"
	cp "$vmlinuz" "$dir/vmlinuz"
	echo "$kver" >"$dir/kver"
	mv "$dir/initramfs.gz.new" "$dir/initramfs.gz"
}
