#!/bin/bash
# ctl_peer_owner.sh - hotlunctl sends secrets (set chap_secret=...) to
# whatever listens at its socket path. Another local user who can put a
# socket there (hotlund not running, or a folder it may write) would read
# them. hotlunctl must check the server's credentials (SO_PEERCRED) and
# talk only to root or to its own user: against a socket of uid 65534 it
# refuses and the fake server receives nothing; against hotlund (root) it
# works as before.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || hl_skip "needs root (a server of another user)"
hl_need python3 setpriv
CTL=$HL_BUILDDIR/hotlunctl
[ -x "$CTL" ] || hl_error "no $CTL"
tmp=$(hl_tmpdir)
chmod 755 "$tmp"
evil=$tmp/evil
mkdir -p "$evil"
chown 65534:65534 "$evil"
SECRET=would-be-stolen-0123

# the other user's server: writes every byte it receives to got.txt (a python
# that user can run: not one under root's home)
PY=/usr/bin/python3
[ -x "$PY" ] || hl_missing "no $PY for the other user"
hl_spawn fake "$tmp/fake.log" setpriv --reuid=65534 --regid=65534 --clear-groups \
	"$PY" -c '
import os, socket, sys
d = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
s.bind(d + "/ctl.sock")
s.listen(4)
open(d + "/ready", "w").close()
while True:
    c, _ = s.accept()
    c.settimeout(2)
    try:
        data = c.recv(65536)
    except OSError:
        data = b""
    with open(d + "/got.txt", "ab") as f:
        f.write(data)
    c.close()
' "$evil"
for _ in $(seq 100); do [ -e "$evil/ready" ] && break; sleep 0.1; done
[ -e "$evil/ready" ] || hl_fail "the fake server did not start: $(cat "$tmp/fake.log")"

rc=0
timeout 10 "$CTL" --timeout 2 --socket "$evil/ctl.sock" / set "discovery_chap_secret=$SECRET" \
	>"$tmp/ctl.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || hl_fail "hotlunctl reported success against another user's server"
if grep -qF -- "$SECRET" "$evil/got.txt" 2>/dev/null; then
	hl_fail "hotlunctl sent the secret to a server of uid 65534: $(head -c 200 "$evil/got.txt")"
fi
grep -q "neither root nor you" "$tmp/ctl.out" || hl_fail "hotlunctl does not say why: $(cat "$tmp/ctl.out")"
hl_log "refused: $(cat "$tmp/ctl.out")"

# hotlund's own socket (root) works as before
hl_target_start --size 16M
"$CTL" --socket "$tmp/state/ctl.sock" ls / >/dev/null || hl_fail "hotlunctl against hotlund failed"
hl_log "ok: hotlunctl talks only to root's or its own user's server"
