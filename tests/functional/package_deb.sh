#!/bin/bash
# package_deb.sh - the Debian package, built as an admin would build it:
# `dpkg-buildpackage -us -uc -b` in a scratch copy of the source tree, then
#   - each .deb's file list (dpkg -c) holds what the package promises, and
#     the default configuration is a conffile;
#   - lintian reports no error;
#   - unpacked into a scratch root (dpkg -x), the units pass
#     `systemd-analyze verify`, hotlund.service's `systemd-analyze
#     security` exposure stays low, and the packaged programs run.
# The slow test of the suite (a whole build; docs/testing.md). It builds
# with DEB_BUILD_OPTIONS=noopt noautodbgsym (-O0, no -dbgsym packages):
# the file lists, maintainer scripts and units are the same, and the build
# takes half the time. HL_DEB_OPTIMIZED=1 builds as an admin would (-O2,
# hardening, -dbgsym). HL_SKIP_DEB=1 skips the test.
. "$(dirname "$0")/lib.sh"

[ "${HL_SKIP_DEB:-0}" = 1 ] && hl_skip "HL_SKIP_DEB=1"
hl_need dpkg-buildpackage dpkg-deb dpkg-checkbuilddeps lintian systemd-analyze tar
src=$HL_SRCDIR
[ -d "$src/debian" ] || hl_fail "no debian/ folder in $src"
tmp=$(hl_tmpdir)

# ---- a scratch copy of the tree: sources only, no build folders or VCS
mkdir -p "$tmp/src/hotlun"
excl=(--exclude-vcs --exclude=./build --exclude=./build-asan --exclude=./state
	--exclude=./_build --exclude=./autom4te.cache --exclude='*.o' --exclude='*.lo'
	--exclude='*.la' --exclude=./config.status --exclude=./config.log)
case $(cd "$HL_BUILDDIR" && pwd)/ in
"$(cd "$src" && pwd)"/?*) excl+=("--exclude=./$(realpath --relative-to="$src" "$HL_BUILDDIR")") ;;
esac
tar -C "$src" "${excl[@]}" -cf - . | tar -C "$tmp/src/hotlun" -xf - || hl_error "cannot copy the tree"
[ -f "$tmp/src/hotlun/config.status" ] && hl_skip "the source tree is configured in place; build out of tree"
(cd "$tmp/src/hotlun" && dpkg-checkbuilddeps) >"$tmp/builddeps.log" 2>&1 ||
	hl_missing "build dependencies missing: $(cat "$tmp/builddeps.log")"

opts="nocheck parallel=$(nproc)"
[ "${HL_DEB_OPTIMIZED:-0}" = 1 ] || opts="$opts noopt noautodbgsym"
t0=$(date +%s)
(cd "$tmp/src/hotlun" && DEB_BUILD_OPTIONS=$opts dpkg-buildpackage -us -uc -b) \
	>"$tmp/build.log" 2>&1 || {
	tail -40 "$tmp/build.log" >&2
	hl_fail "dpkg-buildpackage failed (log above)"
}
hl_log "dpkg-buildpackage ($opts) took $(($(date +%s) - t0)) s"
ver=$(cd "$tmp/src/hotlun" && dpkg-parsechangelog -S Version)
arch=$(dpkg --print-architecture)
deb=$tmp/src/hotlun_${ver}_$arch.deb
snmpdeb=$tmp/src/hotlun-snmp_${ver}_$arch.deb
changes=$tmp/src/hotlun_${ver}_$arch.changes
[ -f "$deb" ] && [ -f "$snmpdeb" ] && [ -f "$changes" ] || hl_fail "missing output: $(ls "$tmp/src")"

# ---- file lists
# has DEB PATH...: every PATH is in DEB.
has() {
	local deb=$1 list p
	shift
	list=$(dpkg -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
	for p in "$@"; do
		grep -qxF "$p" <<<"$list" || hl_fail "$(basename "$deb") lacks $p"
	done
}
has "$deb" /usr/sbin/hotlund /usr/bin/hotlunctl /usr/bin/hotlun-bench /usr/bin/hotlun-sim \
	/etc/hotlun/hotlun.conf /lib/systemd/system/hotlund.service /usr/lib/tmpfiles.d/hotlun.conf \
	/usr/share/bash-completion/completions/hotlunctl \
	/usr/share/man/man8/hotlund.8.gz /usr/share/man/man8/hotlunctl.8.gz \
	/usr/share/man/man5/hotlun.conf.5.gz /usr/share/man/man1/hotlun-bench.1.gz \
	/usr/share/man/man1/hotlun-sim.1.gz /usr/share/doc/hotlun/copyright
has "$snmpdeb" /usr/bin/hotlun-snmp /lib/systemd/system/hotlun-snmp.service \
	/usr/share/snmp/mibs/HOTLUN-MIB.txt /usr/share/man/man8/hotlun-snmp.8.gz
dpkg -c "$deb" | grep -q 'hotlun-snmp' && hl_fail "hotlun carries hotlun-snmp's files"
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles)
grep -qx /etc/hotlun/hotlun.conf <<<"$conffiles" || hl_fail "hotlun.conf is not a conffile: $conffiles"
dpkg-deb -f "$snmpdeb" Depends | grep -q "hotlun (= $ver)" || hl_fail "hotlun-snmp does not depend on hotlun"

# ---- lintian: no errors (warnings are printed, not fatal)
lintian --fail-on error "$changes" >"$tmp/lintian.log" 2>&1
rc=$?
cat "$tmp/lintian.log" >&2
[ $rc -eq 0 ] || hl_fail "lintian found errors (status $rc)"

# ---- unpacked: the units verify, the programs run
root=$tmp/root
dpkg -x "$deb" "$root" && dpkg -x "$snmpdeb" "$root" || hl_fail "dpkg -x failed"
# what the units refer to outside the package: systemd's own targets, kill(1)
mkdir -p "$root/lib/systemd/system" "$root/bin"
cp -an /lib/systemd/system/. "$root/lib/systemd/system/" 2>/dev/null
cp "$(type -P kill)" "$root/bin/kill"
units=("$root/lib/systemd/system/hotlund.service" "$root/lib/systemd/system/hotlun-snmp.service")
systemd-analyze verify --man=no --root="$root" "${units[@]}" >"$tmp/verify.log" 2>&1 ||
	hl_fail "systemd-analyze verify: $(cat "$tmp/verify.log")"
[ -s "$tmp/verify.log" ] && hl_fail "systemd-analyze verify complains: $(cat "$tmp/verify.log")"
grep -q '^Type=notify' "${units[0]}" || hl_fail "hotlund.service is not Type=notify"
grep -q '^WatchdogSec=' "${units[0]}" || hl_fail "hotlund.service has no watchdog"
grep -q '^After=.*snmpd.service' "${units[1]}" || hl_fail "hotlun-snmp.service is not after snmpd"
for u in "${units[@]}"; do
	expo=$(systemd-analyze security --offline=true --root="$root" "$u" 2>&1 |
		sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
	hl_log "$(basename "$u"): systemd-analyze security exposure $expo"
	[ -n "$expo" ] || hl_fail "no exposure level for $(basename "$u")"
	awk -v e="$expo" 'BEGIN { exit !(e <= 3.0) }' || hl_fail "$(basename "$u"): exposure $expo > 3.0"
done
"$root/usr/sbin/hotlund" --version | grep -q '^systemd: sd_notify' ||
	hl_fail "the packaged hotlund was built without sd_notify"
out=$("$root/usr/sbin/hotlund" --check-config "$root/etc/hotlun/hotlun.conf" 2>&1) ||
	hl_fail "the packaged hotlun.conf does not check: $out"
sock=$(sed -n 's/^control_socket *= *\([^ ;]*\).*/\1/p' "$root/etc/hotlun/hotlun.conf")
rundir=$(sed -n 's/^RuntimeDirectory=//p' "${units[0]}")
[ "$sock" = "/run/$rundir/hotlund.sock" ] ||
	hl_fail "control_socket $sock is not in the unit's RuntimeDirectory /run/$rundir"
"$root/usr/bin/hotlun-snmp" --version >/dev/null || hl_fail "the packaged hotlun-snmp does not run"
exit 0
