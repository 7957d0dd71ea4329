#!/bin/bash
# check_config.sh - issue 19 item 11: --check-config checks what start-up
# would trip over in the files a configuration names, without taking them:
# a missing origin, an origin that is a directory, /dev/null or empty, a
# cache device that is not a file or block device or whose folder is
# missing, and a cache larger than the free space of its file system. Each
# is an error naming FILE:LINE of the key; --config refuses the same way
# before it starts. A good configuration is still OK; a cache file that an
# earlier run made at its full size gets a warning, not a refusal.
. "$(dirname "$0")/lib.sh"

tmp=$(hl_tmpdir)
port=$(hl_free_port)
hl_make_disk "$tmp/d.img" 16M
mkdir "$tmp/adir"
: >"$tmp/empty.img"
# more than the scratch folder's file system has free, in whole GiB
free_k=$(df -Pk "$tmp" | awk 'NR == 2 {print $4}')
huge=$((free_k / 1024 / 1024 * 2 + 16))G

# conf FILE ORIGIN [DEVICE SIZE]: a config whose origin is line 6, device line 9, size line 10
conf() {
	{
		printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s/state\n\n' "$port" "$tmp"
		printf '[disk d]\norigin = %s\n' "$2"
		if [ $# -gt 2 ]; then
			printf 'cache = ssd\n[cache ssd]\ndevice = %s\nsize = %s\n' "$3" "$4"
		fi
		printf '[target %s:t]\nlun.0 = d\nallow = ALL\n' "$HL_IQN_PREFIX"
	} >"$1"
}

# expect CONF LINE WORDS: --check-config fails with "CONF:LINE: ...WORDS..."
expect() {
	local f=$1 line=$2 words=$3 out
	out=$("$HL_HOTLUND" --check-config "$f" 2>&1) && hl_fail "--check-config accepted $(sed -n "${line}p" "$f"): $out"
	grep -qF -- "hotlund: $f:$line: " <<<"$out" || hl_fail "no FILE:LINE ($f:$line) in: $out"
	grep -qF -- "$words" <<<"$out" || hl_fail "'$words' not in: $out"
	hl_log "ok: $out"
}

conf "$tmp/c.conf" "file:$tmp/missing.img"
expect "$tmp/c.conf" 6 "missing.img: No such file or directory"
conf "$tmp/c.conf" "$tmp/adir"
expect "$tmp/c.conf" 6 "is a directory"
conf "$tmp/c.conf" /dev/null
expect "$tmp/c.conf" 6 "/dev/null is a character device"
conf "$tmp/c.conf" "file://$tmp/empty.img"
expect "$tmp/c.conf" 6 "is empty"
conf "$tmp/c.conf" "file:$tmp/d.img" "$tmp/ssd.img" "$huge"
expect "$tmp/c.conf" 10 "size $huge does not fit"
conf "$tmp/c.conf" "file:$tmp/d.img" "$tmp/adir" 64M
expect "$tmp/c.conf" 9 "is a directory"
conf "$tmp/c.conf" "file:$tmp/d.img" "$tmp/nofolder/ssd.img" 64M
expect "$tmp/c.conf" 9 "nofolder: No such file or directory"
[ -e "$tmp/ssd.img" ] && hl_fail "--check-config created the cache file"

# a cache file an earlier run made at its size starts as it is, with a warning
truncate -s "$huge" "$tmp/ssd.img" || hl_error "truncate $huge"
conf "$tmp/c.conf" "file:$tmp/d.img" "$tmp/ssd.img" "$huge"
out=$("$HL_HOTLUND" --check-config "$tmp/c.conf" 2>&1) || hl_fail "existing full-size cache file refused: $out"
grep -qF "$tmp/c.conf:10: [cache ssd] the file system of $tmp/ssd.img has" <<<"$out" ||
	hl_fail "no warning about the cache file's room: $out"
rm -f "$tmp/ssd.img"

# --config refuses the same way, with FILE:LINE, and never listens
conf "$tmp/c.conf" "$tmp/adir"
out=$(timeout 20 "$HL_HOTLUND" --config "$tmp/c.conf" 2>&1) && hl_fail "--config started with a directory origin"
grep -qF "$tmp/c.conf:6: [disk d] origin $tmp/adir is a directory" <<<"$out" || hl_fail "--config: $out"
hl_port_open 127.0.0.1 "$port" && hl_fail "something listens on the portal"

# the good ones pass: a file origin with a cache file to be created, and a remote origin
conf "$tmp/c.conf" "file:$tmp/d.img" "$tmp/ssd.img" 64M
hl_run "a good configuration" "$HL_HOTLUND" --check-config "$tmp/c.conf"
conf "$tmp/c.conf" "iscsi://127.0.0.1:1/iqn.2026-11.io.example:nowhere/0"
hl_run "a remote origin is not checked as a file" "$HL_HOTLUND" --check-config "$tmp/c.conf"
# the alias checks start-up makes on the configuration's text (caches.c):
# two disks on one origin, one cached and the other writable, and a cache
# device that is a disk's origin; --check-config refused neither before
cat >"$tmp/a.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/state
[disk a]
origin = file:$tmp/d.img
cache = ssd
[disk b]
origin = $tmp/d.img
[cache ssd]
device = $tmp/ssd.img
size = 64M
CONF
out=$("$HL_HOTLUND" --check-config "$tmp/a.conf" 2>&1) && hl_fail "--check-config accepted two disks on one origin: $out"
grep -qF "hotlund: $tmp/a.conf:8: disk b: origin $tmp/d.img is also disk a's origin" <<<"$out" ||
	hl_fail "alias of a cached disk: $out"
hl_log "ok: $out"
sed -i "/^\[disk b\]/a read_only = yes" "$tmp/a.conf"
hl_run "a read-only view of a cached disk's origin" "$HL_HOTLUND" --check-config "$tmp/a.conf"
conf "$tmp/c.conf" "file:$tmp/d.img" "$tmp/d.img" 64M
expect "$tmp/c.conf" 9 "cache ssd: device $tmp/d.img is disk d's origin"
[ -e "$tmp/ssd.img" ] && hl_fail "--check-config created the cache file"

# a FIFO named as the origin's CHAP secret file: refused at once, never a hang
mkfifo "$tmp/secret.fifo" || hl_error "mkfifo"
cat >"$tmp/f.conf" <<CONF
[global]
portal = 127.0.0.1:$port
state_dir = $tmp/state
[disk d]
origin = iscsi://127.0.0.1:1/iqn.2026-11.io.example:nowhere/0
origin_chap_user = u
origin_chap_secret_file = $tmp/secret.fifo
CONF
out=$(timeout 10 "$HL_HOTLUND" --check-config "$tmp/f.conf" 2>&1)
rc=$?
[ $rc = 124 ] && hl_fail "--check-config hung on a FIFO as the secret file"
[ $rc = 0 ] && hl_fail "a FIFO was taken as the secret file: $out"
grep -qF "$tmp/f.conf:7: origin_chap_secret_file: $tmp/secret.fifo is not a regular file" <<<"$out" ||
	hl_fail "FIFO secret file: $out"
hl_log "PASS"
