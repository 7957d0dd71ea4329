#!/bin/bash
# daemon_cli.sh - hotlund's command line: --version, --check-config with
# file:line errors, usage errors, clean SIGTERM, and start-up failures that
# name what is wrong (missing origin, portal in use).
. "$(dirname "$0")/lib.sh"

HOTLUND=$HL_BUILDDIR/hotlund
[ -x "$HOTLUND" ] || hl_error "no $HOTLUND"
tmp=$(hl_tmpdir)

out=$("$HOTLUND" --version) || hl_fail "--version failed"
grep -q '^hotlund [0-9]' <<<"$out" || hl_fail "--version: '$out'"
grep -q 'file' <<<"$out" || hl_fail "--version does not list the file backend: '$out'"

"$HOTLUND" >/dev/null 2>&1
[ $? -eq 2 ] || hl_fail "no arguments should exit 2"
"$HOTLUND" --config a --check-config b >/dev/null 2>&1
[ $? -eq 2 ] || hl_fail "--config with --check-config should exit 2"

# The issue's example, as written but for its origin, which must now exist
# (--check-config checks the files it names: check_config.sh).
cat >"$tmp/example.conf" <<'CONF'
[global]
portal = 127.0.0.1:3260          ; repeatable; IPv6 as [::1]:3260
state_dir = /var/lib/hotlun       ; persistent ids, later the cache metadata

[disk vm-store]
origin = file:/srv/vm-store.img  ; a regular file or a block device
# block_size = 512               ; logical block size (512 or 4096)

[target iqn.2026-11.io.hotlun:demo]
lun.0 = vm-store
allow = ALL                      ; or a list of initiator IQNs
# chap_user = ... / chap_secret = ...            one-way CHAP
# mutual_user = ... / mutual_secret = ...        mutual CHAP
CONF
hl_make_disk "$tmp/vm-store.img" 16M
sed -i "s|/srv/vm-store.img|$tmp/vm-store.img|" "$tmp/example.conf"
out=$("$HOTLUND" --check-config "$tmp/example.conf") || hl_fail "example config rejected: $out"
grep -q 'OK' <<<"$out" || hl_fail "--check-config printed '$out'"

printf '[global]\nportal = 127.0.0.1:1\n\n[disk d]\norigin = /x\nblok_size = 512\n' >"$tmp/bad.conf"
err=$("$HOTLUND" --check-config "$tmp/bad.conf" 2>&1)
[ $? -eq 1 ] || hl_fail "bad config should exit 1"
grep -q "bad.conf:6: unknown key 'blok_size'" <<<"$err" || hl_fail "error does not name file:line: '$err'"

# Start-up failure: the origin does not exist.
port=$(hl_free_port)
printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s/state\n[disk d]\norigin = file:%s/missing.img\n[target iqn.2026-11.io.hotlun:t]\nlun.0 = d\nallow = ALL\n' \
	"$port" "$tmp" "$tmp" >"$tmp/missing.conf"
err=$(timeout 10 "$HOTLUND" --config "$tmp/missing.conf" 2>&1)
rc=$?
[ $rc -eq 1 ] || hl_fail "missing origin: exit $rc, want 1"
grep -q 'missing.img' <<<"$err" || hl_fail "missing origin not named: '$err'"

# A real start, a second daemon on the same portal fails, SIGTERM stops cleanly.
hl_make_disk "$tmp/d.img" 64M
printf '[global]\nportal = 127.0.0.1:%s\nstate_dir = %s/state\n[disk d]\norigin = file:%s/d.img\n[target iqn.2026-11.io.hotlun:t]\nlun.0 = d\nallow = ALL\n' \
	"$port" "$tmp" "$tmp" >"$tmp/ok.conf"
hl_start_hotlund "$tmp/ok.conf"
[ -s "$tmp/state/install-id" ] || hl_fail "no install-id in state_dir"
# (its own control socket: the same one is refused first, see ctl_socket.sh;
# its own origin file: the same one is refused too, below)
hl_make_disk "$tmp/d2.img" 64M
sed -e "s|^state_dir = .*|&\ncontrol_socket = $tmp/second.sock|" -e "s|/d.img|/d2.img|" \
	"$tmp/ok.conf" >"$tmp/ok2.conf"
err=$(timeout 10 "$HOTLUND" --config "$tmp/ok2.conf" 2>&1)
rc=$?
[ $rc -eq 1 ] || hl_fail "second daemon on a busy portal: exit $rc, want 1"
grep -qi 'in use' <<<"$err" || hl_fail "busy portal not reported: '$err'"

# A second gateway on the same file origin (its own portal, state and
# control socket) is refused: a file has no cluster lock (issue 17).
port3=$(hl_free_port)
sed -e "s|127.0.0.1:$port|127.0.0.1:$port3|" -e "s|^state_dir = .*|state_dir = $tmp/state3\ncontrol_socket = $tmp/third.sock|" \
	"$tmp/ok.conf" >"$tmp/ok3.conf"
err=$(timeout 30 "$HOTLUND" --config "$tmp/ok3.conf" 2>&1)
rc=$?
[ $rc -eq 1 ] || hl_fail "second gateway on the same file origin: exit $rc, want 1"
grep -q "served by one gateway at a time" <<<"$err" || hl_fail "second gateway on one file not explained: '$err'"
hl_port_open 127.0.0.1 "$port3" && hl_fail "the refused gateway listens"
hl_stop
echo "daemon_cli: OK"
