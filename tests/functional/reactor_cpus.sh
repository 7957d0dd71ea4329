#!/bin/bash
# reactor_cpus.sh - issue 25: [global] cpus runs the reactors on the listed
# CPUs, one CPU each in turn (e.g. on the CPU that takes the cache device's
# completion interrupts, docs/service.md "CPUs and interrupts"). Without
# threads, one reactor per listed CPU. A bad list is refused at load with
# its line; a CPU hotlund may not run on stops the start with a message; a
# reload that changes the list is refused. With a cache on a disk that has
# MSI interrupts, the start-up log says which CPUs they reach.
. "$(dirname "$0")/lib.sh"

tmp=$(hl_tmpdir)
hl_make_disk "$tmp/d.img" 16M
last=$(($(nproc) - 1))

# conf FILE PORT [KEY=VALUE...]: one disk, the [global] pairs given
conf() {
	local f=$1 port=$2
	shift 2
	hl_conf_global "$f" "$port" "$tmp/state-$port" "$@"
	printf '\n[disk d]\norigin = file:%s\n\n[target %s:t]\nlun.0 = d\nallow = ALL\n' \
		"$tmp/d.img" "$HL_IQN_PREFIX" >>"$f"
}

# reactors PID: "NAME CPUS_ALLOWED" of each reactor thread, sorted
reactors() {
	local t
	for t in /proc/"$1"/task/*; do
		case "$(cat "$t/comm")" in
		reactor*) echo "$(cat "$t/comm") $(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")" ;;
		esac
	done | sort
}

# the last CPU alone: one reactor, there
port=$(hl_free_port)
conf "$tmp/a.conf" "$port" "cpus=$last"
hl_start_hotlund "$tmp/a.conf"
got=$(reactors "$HL_PID")
[ "$got" = "reactor0 $last" ] || hl_fail "cpus = $last: reactors '$got', want 'reactor0 $last'"
hl_log "ok: cpus = $last: $got"
# a reload cannot move the running reactors
sed -i "s/^cpus = .*/cpus = 0-$last/" "$tmp/a.conf"
out=$("$HL_BUILDDIR/hotlunctl" --socket "$tmp/state-$port/ctl.sock" reload 2>&1) &&
	hl_fail "a reload changed cpus: $out"
grep -qF "cpus cannot change while running" <<<"$out" || hl_fail "reload refused, but not for cpus: $out"
got=$(reactors "$HL_PID")
[ "$got" = "reactor0 $last" ] || hl_fail "after the refused reload: reactors '$got'"
hl_log "ok: reload refused: $out"
hl_stop "$HL_PID"

# a cache on a file of the scratch folder's disk: the log says which CPUs
# that disk's interrupts reach, beside the reactors' (when the disk has MSI
# interrupts at all: not on tmpfs, a loop device or most containers' overlays)
port=$(hl_free_port)
conf "$tmp/e.conf" "$port" "cpus=$last"
sed -i 's/^origin = .*/&\ncache = ssd/' "$tmp/e.conf"
printf '\n[cache ssd]\ndevice = %s/cache.img\nsize = 64M\n' "$tmp" >>"$tmp/e.conf"
hl_start_hotlund "$tmp/e.conf"
dev=$(readlink -f "/sys/dev/block/$(stat -c %Hd:%Ld "$tmp")/device" 2>/dev/null)
while [ -n "$dev" ] && [ "$dev" != / ] && [ ! -d "$dev/msi_irqs" ]; do dev=$(dirname "$dev"); done
if [ -d "$dev/msi_irqs" ]; then
	hl_wait_grep "$HL_LOG" "device interrupts CPUs [0-9].*; reactors on CPUs $last " 10 ||
		hl_fail "no line on the cache device's interrupts in $HL_LOG"
	hl_log "ok: $(grep -o 'cache ssd: [^ ]*.s device interrupts.*' "$HL_LOG")"
else
	hl_log "the scratch folder's disk has no MSI interrupts: no line to check"
fi
hl_stop "$HL_PID"

# threads = 3 over the list "last,0": round robin
port=$(hl_free_port)
conf "$tmp/b.conf" "$port" "threads=3" "cpus=$last,0"
hl_start_hotlund "$tmp/b.conf"
got=$(reactors "$HL_PID" | tr '\n' ' ')
want="reactor0 $last reactor1 0 reactor2 $last "
[ "$got" = "$want" ] || hl_fail "threads = 3, cpus = $last,0: reactors '$got', want '$want'"
hl_log "ok: threads = 3, cpus = $last,0: $got"
hl_stop "$HL_PID"

# a list that is not one: refused with its line
conf "$tmp/c.conf" "$(hl_free_port)" "cpus=0,0"
out=$("$HL_HOTLUND" --check-config "$tmp/c.conf" 2>&1) && hl_fail "cpus = 0,0 accepted: $out"
grep -qF "c.conf:6: cpus: '0,0' is not a CPU list" <<<"$out" || hl_fail "no line and reason in: $out"
hl_log "ok: $out"

# a CPU this machine does not have: the start fails and says why
conf "$tmp/d.conf" "$(hl_free_port)" "cpus=1023"
"$HL_HOTLUND" --config "$tmp/d.conf" >"$tmp/d.out" 2>&1 && hl_fail "started with cpus = 1023"
grep -qF "cannot run on CPU 1023" "$tmp/d.out" || hl_fail "no reason in: $(cat "$tmp/d.out")"
hl_log "ok: cpus = 1023: $(grep -F 'CPU 1023' "$tmp/d.out")"
