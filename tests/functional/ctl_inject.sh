#!/bin/bash
# ctl_inject.sh - issue 19 item 4: a value with a newline, a carriage return
# or another control character, set through hotlunctl or the raw control
# socket, is refused with a clear message and changes nothing (it once
# became `allow = ALL` or `chap_user = x` lines in the saved file, and every
# later change failed). Values with printable oddities (; # " \ blanks) are
# kept; saveconfig writes a file that reads back as the running state:
# --check-config accepts it, and a reload from it changes no `get`.
. "$(dirname "$0")/lib.sh"
hl_need python3

CTL=$HL_BUILDDIR/hotlunctl
tmp=$(hl_tmpdir)
port=$(hl_free_port)
hl_make_disk "$tmp/d.img" 16M
conf=$tmp/hotlun.conf
hl_write_config "$conf" "$port" "$tmp/d.img"
sock=$tmp/state/ctl.sock
iqn=$HL_IQN_PREFIX:test
tgt=/iscsi/$iqn
chmod 0644 "$conf" # as an editor under umask 022 would leave it
hl_start_hotlund "$conf"

# the issue's reproduction through the shell: a newline inside one argument
out=$("$CTL" --socket "$sock" "$tgt" set "alias=x
allow = ALL" 2>&1) && hl_fail "set alias with a newline was accepted: $out"
grep -q 'alias: control character 0x0a' <<<"$out" || hl_fail "unclear refusal: $out"
hl_log "ok: hotlunctl set alias with a newline refused: $out"

python3 - "$sock" "$iqn" "$tmp" <<'PY' || hl_fail "control socket refuses control characters"
import json, socket, sys
path, iqn, tmp = sys.argv[1:4]
tgt = "/iscsi/" + iqn
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(path)
f = s.makefile("rb")
def ask(cmd, **args):
    s.sendall(json.dumps({"cmd": cmd, "args": args}).encode() + b"\n")
    return json.loads(f.readline())

before = ask("get", path=tgt)["result"]
bad = [("alias", "x\nallow = ALL"), ("alias", "x\rchap_user = x"), ("alias", "a\x01b"),
       ("alias", "tab\there"), ("alias", "del\x7f"), ("chap_user", "u\nchap_secret = s")]
for key, val in bad:
    r = ask("set", path=tgt, params={key: val})
    assert r["ok"] is False, (key, val, r)
    assert "%s: control character" % key in r["error"], (key, val, r)
# every other way a string reaches the configuration
r = ask("set", path="/disks/disk0", params={"origin": "file:" + tmp + "/d.img\n[disk x]"})
assert r["ok"] is False and "control character" in r["error"], r
r = ask("create", path="/disks", name="x", params={"origin": "file:/x\nread_only = yes"})
assert r["ok"] is False and "control character" in r["error"], r
r = ask("create", path=tgt + "/tpg1/acls", name="iqn.2026-11.io.x:a\nallow = ALL")
assert r["ok"] is False, r
r = ask("create", path=tgt + "/tpg1/portals", name="127.0.0.1:1\nportal = 0.0.0.0:3260")
assert r["ok"] is False, r
r = ask("create", path=tgt + "/tpg1/luns", name="disk0\n", params={"lun": 3})
assert r["ok"] is False, r
r = ask("set", path="/", params={"discovery_chap_user": "d\n", "discovery_chap_secret": "0123456789ab"})
assert r["ok"] is False and "control character" in r["error"], r
assert ask("get", path=tgt)["result"] == before, "a refused set changed the target"

# later changes still work (they failed with "Invalid argument" after an injection)
odd = ' a ; b # "c" \\ d '
r = ask("set", path=tgt, params={"alias": odd})
assert r["ok"] is True, r
assert ask("get", path=tgt)["result"]["alias"] == odd
r = ask("create", path="/disks", name="d2", params={"origin": "file:" + tmp + "/d.img", "read_only": True})
assert r["ok"] is True, r
r = ask("saveconfig")
assert r["ok"] is True, r
print("refused and kept as they must be")
PY

saved=$(cat "$conf")
grep -qx 'allow = ALL' <<<"$saved" || hl_fail "saved file lost allow = ALL"
[ "$(grep -c '^allow' <<<"$saved")" = 1 ] || hl_fail "saved file has extra allow lines: $saved"
grep -q 'chap_user' <<<"$saved" && hl_fail "saved file has chap_user: $saved"
hl_run "saved file passes --check-config" "$HL_HOTLUND" --check-config "$conf"

# the saved file, read back, is what ran: every get is the same after a reload from it
getall() {
	local p
	for p in / /disks/disk0 /disks/d2 "$tgt"; do
		echo "== $p"
		"$CTL" --socket "$sock" "$p" get || hl_fail "get $p failed"
	done
}
getall >"$tmp/before.txt"
hl_run "reload from the saved file" "$CTL" --socket "$sock" reload
getall >"$tmp/after.txt"
diff -u "$tmp/before.txt" "$tmp/after.txt" >&2 || hl_fail "reloading the saved file changed the state"
grep -q '^alias= a ; b # "c" \\ d $' "$tmp/after.txt" || hl_fail "alias not kept: $(cat "$tmp/after.txt")"
# the saved file holds secrets: whatever the umask, nobody else may read it
mode=$(stat -c %a "$conf")
[ "$mode" = 640 ] || hl_fail "saveconfig left $conf with mode $mode (want 640: the 0644 original without other-read)"
hl_check_alive
hl_stop # a clean exit (under ASan: no leak)
hl_log "PASS"
