#!/bin/bash
# mgmt_files.sh - what hotlund's management surfaces give other local users
# and a metrics reader (h33g, docs/security.md):
#  - the config file: one any user may write, or another user owns, is
#    refused (start, --check-config, reload: it decides what root's hotlund
#    serves), and so is one in a folder any user may write (not sticky) or
#    another user owns (h34c); one holding a secret that others may read
#    starts with a warning; 0600 starts silently; saveconfig's backups are
#    0600 (h34c);
#  - a cache file any user may write fails --check-config (FILE:LINE);
#  - the files hotlund creates under umask 022 (install-id, the cache map)
#    are 0600;
#  - /metrics: an origin given as a bare path with ':' in it shows as
#    origin="file" (before: origin="/tmp/.../acme"), and an initiator that
#    logged in with '"' and '\' in its name is nowhere in the text, which
#    promtool still accepts.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || hl_skip "needs root (a file of another user)"
hl_need iscsi-inq curl
HOTLUND=$HL_HOTLUND
CTL=$HL_BUILDDIR/hotlunctl
T=$(hl_tmpdir)
umask 022

# ---- the config file's owner and mode (--check-config: nothing is started)
disk=$T/disk0.img
hl_make_disk "$disk" 16M
PORT=$(hl_free_port)
conf=$T/check.conf
hl_write_config "$conf" "$PORT" "$disk" chap_user=u chap_secret=config-secret-0123
check() { "$HOTLUND" --check-config "$conf" >"$T/check.out" 2>&1; }

chmod 0666 "$conf"
check && hl_fail "a config any user may write passed --check-config"
grep -q "may be written by any user" "$T/check.out" || hl_fail "no reason given: $(cat "$T/check.out")"
chmod 0644 "$conf"
chown 65534 "$conf"
check && hl_fail "a config of uid 65534 passed --check-config"
grep -q "owned by uid 65534" "$T/check.out" || hl_fail "no reason given: $(cat "$T/check.out")"
chown 0 "$conf"
check || hl_fail "root's 0644 config refused: $(cat "$T/check.out")"
grep -q "holds a secret (chap_secret) and any user may read it" "$T/check.out" ||
	hl_fail "no warning for a secret others may read: $(cat "$T/check.out")"
grep -q "config-secret-0123" "$T/check.out" && hl_fail "the warning shows the secret"
chmod 0600 "$conf"
check || hl_fail "root's 0600 config refused: $(cat "$T/check.out")"
grep -q "secret" "$T/check.out" && hl_fail "a warning for a 0600 file: $(cat "$T/check.out")"
hl_log "config file: 0666 and uid 65534 refused, 0644 with a secret warned, 0600 silent"

# ---- the folders that hold it: one any user may write lets any user replace the file
mkdir -p "$T/open/etc"
cp "$conf" "$T/open/etc/check.conf"
chmod 0777 "$T/open"
"$HOTLUND" --check-config "$T/open/etc/check.conf" >"$T/check.out" 2>&1 &&
	hl_fail "a config under a folder any user may write passed --check-config"
grep -q "its folder $T/open may be written by any user" "$T/check.out" ||
	hl_fail "no reason naming the folder: $(cat "$T/check.out")"
chmod 1777 "$T/open" # sticky, root's: as /tmp, others cannot replace root's file there
"$HOTLUND" --check-config "$T/open/etc/check.conf" >"$T/check.out" 2>&1 ||
	hl_fail "a config under a sticky root folder refused: $(cat "$T/check.out")"
chmod 0755 "$T/open"
chown 65534 "$T/open/etc"
"$HOTLUND" --check-config "$T/open/etc/check.conf" >"$T/check.out" 2>&1 &&
	hl_fail "a config in a folder of uid 65534 passed --check-config"
grep -q "its folder $T/open/etc is owned by uid 65534" "$T/check.out" ||
	hl_fail "no reason naming the folder: $(cat "$T/check.out")"
hl_log "config folders: 0777 and uid 65534's refused, root's 1777 passes"

# ---- a cache file others may write: --check-config names it with FILE:LINE
truncate -s 24M "$T/cache-x.img"
chmod 0666 "$T/cache-x.img"
hl_cache_disk0 "$conf" "$T/cache-x.img"
check && hl_fail "a cache file any user may write passed --check-config"
grep -q "check.conf:[0-9]*: \[cache ssd\] device .* mode 0666" "$T/check.out" ||
	hl_fail "no FILE:LINE reason: $(cat "$T/check.out")"
chmod 0660 "$T/cache-x.img"
chgrp 65534 "$T/cache-x.img"
check && hl_fail "a cache file group 65534 may write passed --check-config"
chgrp 0 "$T/cache-x.img"
check || hl_fail "root:root 0660 cache file refused (only root may write it): $(cat "$T/check.out")"
chmod 0600 "$T/cache-x.img"
check || hl_fail "root's 0600 cache file refused: $(cat "$T/check.out")"
hl_log "cache file: 0666 and group 65534's 0660 refused by --check-config, root:root 0660 and 0600 pass"

# ---- a running hotlund: bare-path origin with ':', a cache, metrics
origin=$T/acme:lun0.img
hl_make_disk "$origin" 16M
truncate -s 24M "$T/cache0.img"
MP=$(hl_free_port)
conf=$T/hotlund.conf
HL_GLOBAL_EXTRA="metrics_listen = 127.0.0.1:$MP
control_idle_timeout = 1" HL_IQN=$HL_IQN_PREFIX:mgmt-files \
	hl_write_config "$conf" "$PORT" "$origin"
hl_cache_disk0 "$conf" "$T/cache0.img"
sed -i "s|^origin = file:.*|origin = $origin|" "$conf"
chmod 0600 "$conf"
STATE=$T/state
hl_start_hotlund "$conf"
hl_wait_port "$HL_PID" 127.0.0.1 "$MP" "$HL_LOG"
SOCK=$STATE/ctl.sock

ini='iqn.2026-01.test:evil"x\y'
iscsi-inq -i "$ini" "iscsi://127.0.0.1:$PORT/$HL_IQN_PREFIX:mgmt-files/0" >"$T/inq.out" 2>&1 ||
	hl_fail "iscsi-inq with initiator $ini: $(cat "$T/inq.out")"
grep -q 'evil"x' "$HL_LOG" || hl_log "(the log does not name the initiator)"
curl -sf "http://127.0.0.1:$MP/metrics" >"$T/metrics.txt" || hl_fail "no /metrics"
grep -q 'hotlun_disk_info{disk="disk0",origin="file",cache="ssd"} 1' "$T/metrics.txt" ||
	hl_fail "disk0's info: $(grep hotlun_disk_info "$T/metrics.txt")"
grep -q "acme" "$T/metrics.txt" && hl_fail "/metrics shows the origin's path: $(grep acme "$T/metrics.txt")"
grep -q "$T" "$T/metrics.txt" && hl_fail "/metrics shows a path under $T"
grep -q 'evil' "$T/metrics.txt" && hl_fail "/metrics names the initiator"
if command -v promtool >/dev/null; then
	promtool check metrics <"$T/metrics.txt" >"$T/promtool.out" 2>&1 ||
		hl_fail "promtool check metrics: $(head -20 "$T/promtool.out")"
fi
hl_log "metrics: origin=\"file\", no path, no initiator name"

# ---- a control connection that sends nothing: closed after control_idle_timeout (1 s)
python3 - "$SOCK" >"$T/idle.out" 2>&1 <<'PY' || hl_fail "idle control connection: $(cat "$T/idle.out")"
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(10)
t = time.monotonic()
got = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    got += b
took = time.monotonic() - t
print("%.2f s: %s" % (took, got.decode().strip()))
sys.exit(0 if b"idle for 1 s" in got and 0.5 < took < 5 else 1)
PY
"$CTL" --socket "$SOCK" / get >"$T/get.out" 2>&1 || hl_fail "/ get: $(cat "$T/get.out")"
grep -q "control_idle_timeout.*1" "$T/get.out" || hl_fail "/ get does not show control_idle_timeout: $(cat "$T/get.out")"
hl_log "control connection idle 1 s: closed ($(cat "$T/idle.out"))"

# ---- what hotlund wrote under umask 022
for f in "$STATE/install-id" "$STATE/cache-ssd.map"; do
	[ -e "$f" ] || hl_fail "$f not written"
	m=$(stat -c %a "$f")
	[ "$m" = 600 ] || hl_fail "$f is mode $m (umask 022)"
done
hl_log "install-id and the cache map: 0600"

# ---- saveconfig's numbered backups: the old file's mode was 0644, theirs is 0600
chmod 0644 "$conf"
for i in 1 2; do
	"$CTL" --socket "$SOCK" saveconfig >"$T/save.out" 2>&1 || hl_fail "saveconfig: $(cat "$T/save.out")"
done
for f in "$conf.1" "$conf.2"; do
	[ -f "$f" ] || hl_fail "no backup $f"
	m=$(stat -c %a "$f")
	[ "$m" = 600 ] || hl_fail "backup $f is mode $m (the config was 0644)"
done
hl_log "saveconfig backups of a 0644 config: 0600"

# ---- a reload from a file any user may write: refused, nothing changed
chmod 0666 "$conf"
"$CTL" --socket "$SOCK" reload >"$T/reload.out" 2>&1 && hl_fail "reload of a 0666 config succeeded"
grep -q "may be written by any user" "$T/reload.out" || hl_fail "reload: $(cat "$T/reload.out")"
chmod 0600 "$conf"
"$CTL" --socket "$SOCK" reload >"$T/reload.out" 2>&1 || hl_fail "reload: $(cat "$T/reload.out")"
hl_target_stop
hl_log "ok"
