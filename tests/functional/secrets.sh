#!/bin/bash
# secrets.sh - an origin's CHAP secret stays in the config (and its secret
# file): a SAN hotlund with CHAP, and a front hotlund (log_level debug,
# stderr captured) with two disks on it, one with user%secret@ in the
# origin URL (cached, so a cache map is written), one with the separate
# keys origin_chap_user + origin_chap_secret_file. Distinctive secrets must
# appear in no control reply (ls, get of every node, stats --json), no log
# line, no SNMP value (snmpwalk of the whole HOTLUN-MIB), no file under
# state_dir. Also: get / shows discovery CHAP masked; a map written with the
# secret (the old format) still matches the same origin (warm) and is
# rewritten without it; mutual CHAP toward the SAN (origin_mutual_*) works
# and a wrong answer from the SAN is refused; a secret file readable by
# others is refused with FILE:LINE; a CHAP secret under 12 bytes gets a
# warning.
. "$(dirname "$0")/lib.sh"
[ "$HL_TARGET" = tgt ] && hl_skip "the front under test is hotlund; the SAN is hotlund too"
. "$(dirname "$0")/snmp_lib.sh"

URL_SECRET=Zq8-URLLEAK-4hT2v
DISC_SECRET=Pd5-DISCLEAK-2xN
SECRETS=("$URL_SECRET" "$DISC_SECRET")
FRONT_IQN=$HL_IQN_PREFIX:secrets-front

# ---- the SAN, with CHAP (the same account for both front disks)
hl_target_start --size 16M --chap hlorigin "$URL_SECRET"
SAN_PID=$HL_PID SAN_PORT=$HL_PORT SAN_IQN=$HL_IQN SAN_CONF=$T/hotlund.conf

# The front reads the second disk's secret from a file only root can read
# (the SAN has one account: the same secret).
printf '%s\n' "$URL_SECRET" >"$T/origin.secret"
chmod 600 "$T/origin.secret"

ST=$T/front-state
mkdir -p "$ST"
FRONT_PORT=$(hl_free_port)
CONF=$T/front.conf
front_conf() {
	cat >"$CONF" <<EOF
[global]
portal = 127.0.0.1:$FRONT_PORT
state_dir = $ST
control_socket = $T/ctl.sock
log_level = debug
threads = 2
discovery_chap_user = disc
discovery_chap_secret = $DISC_SECRET

[cache ssd]
device = $T/ssd.cache
size = 16M
block_size = 64K

[disk san]
origin = iscsi://hlorigin%$URL_SECRET@127.0.0.1:$SAN_PORT/$SAN_IQN/0
cache = ssd

# read-only: a second writable disk on the cached LUN is refused (its
# writes would leave disk san's cache stale), under any spelling of its URL
[disk keys]
origin = iscsi://127.0.0.1:$SAN_PORT/$SAN_IQN/0
origin_chap_user = hlorigin
origin_chap_secret_file = $T/origin.secret
read_only = yes

[target $FRONT_IQN]
lun.0 = san
lun.1 = keys
allow = ALL
chap_user = front
chap_secret = short6
EOF
}
front_conf
hl_start_hotlund "$CONF"
FRONT_PID=$HL_PID FRONT_LOG=$HL_LOG
CTL=(timeout 30 "$HL_CTL" --socket "$T/ctl.sock")

# Reads warm the cache (so its map and metadata are in use) through both disks.
hl_need iscsi-inq
for lun in 0 1; do
	timeout 30 iscsi-inq "iscsi://front%short6@127.0.0.1:$FRONT_PORT/$FRONT_IQN/$lun" >"$T/inq.out" 2>&1 ||
		{ cat "$T/inq.out" >&2; hl_fail "INQUIRY through the front, LUN $lun"; }
done

# ---- control replies: ls, get of every node, stats
OUT=$T/control.out
: >"$OUT"
"${CTL[@]}" ls >>"$OUT" 2>&1 || hl_fail "hotlunctl ls failed"
"${CTL[@]}" stats --json >>"$OUT" 2>&1 || hl_fail "hotlunctl stats failed"
python3 - "$T/ctl.sock" "$URL_SECRET" "$T/origin.secret" >>"$OUT" <<'EOF' || hl_fail "walking the control tree failed"
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rw")
def call(cmd, **args):
    f.write(json.dumps({"cmd": cmd, "args": args}) + "\n")
    f.flush()
    line = f.readline()
    print(line.strip())
    return json.loads(line)
def walk(node):
    r = call("get", path=node["path"])
    for c in node.get("children", []):
        walk(c)
tree = call("ls", path="/")["result"]
walk(tree)
root = call("get", path="/")["result"]
assert root.get("discovery_chap_user") == "disc", root
assert root.get("discovery_chap_secret") == "********", root
san = call("get", path="/disks/san")["result"]
assert san["origin"].startswith("iscsi://hlorigin%***@127.0.0.1:"), san
keys = call("get", path="/disks/keys")["result"]
assert keys["origin_chap_user"] == "hlorigin" and keys["origin_chap_secret"] is None, keys
assert keys["origin_chap_secret_file"].endswith("/origin.secret"), keys
# get's values go back through set unchanged (the masked origin included)
r = call("set", path="/disks/san", params={"origin": san["origin"]})
assert r["ok"], r
r = call("set", path="/", params={"discovery_chap_secret": "********"})
assert r["ok"], r
# the origin's credentials set through the control plane: from the file to the keys
# (the disk is reopened with them), shown write-only
def quiet_set(path, params): # the request holds a secret: not printed
    f.write(json.dumps({"cmd": "set", "args": {"path": path, "params": params}}) + "\n")
    f.flush()
    r = json.loads(f.readline())
    print(json.dumps(r))
    assert r["ok"], r
quiet_set("/disks/keys", {"origin_chap_secret_file": None, "origin_chap_user": "hlorigin",
                          "origin_chap_secret": sys.argv[2]})
keys = call("get", path="/disks/keys")["result"]
assert keys["origin_chap_secret"] == "********" and keys["origin_chap_secret_file"] is None, keys
assert keys["size_bytes"] == 16 << 20, keys
# ... and back to the file
quiet_set("/disks/keys", {"origin_chap_secret": None, "origin_chap_user": "hlorigin",
                          "origin_chap_secret_file": sys.argv[3]})
keys = call("get", path="/disks/keys")["result"]
assert keys["origin_chap_secret"] is None and keys["origin_chap_secret_file"] == sys.argv[3], keys
EOF
hl_log "ok: get / shows discovery_chap_secret as ********; get/set round trip of masked values; origin_chap_* set through the control plane"

# ---- SNMP: every value of HOTLUN-MIB
start_snmpd
start_subagent
wait_for "hlDiskOrigin of san" sis hlDiskOrigin "$(disk_index san)" \
	"iscsi://hlorigin%***@127.0.0.1:$SAN_PORT/$SAN_IQN/0"
snmpwalk -v2c -c public -t 2 -r 1 -On -m "" -M /nonexistent "$SNMP_AGENT" \
	".${OIDS[hotlunMIB]}" >"$T/snmpwalk.out" 2>&1 || hl_fail "snmpwalk failed"
[ "$(grep -c . "$T/snmpwalk.out")" -gt 20 ] || { cat "$T/snmpwalk.out" >&2; hl_fail "snmpwalk returned too little"; }
hl_log "ok: snmpwalk of HOTLUN-MIB: $(grep -c . "$T/snmpwalk.out") values"

# ---- saveconfig writes the real secret (URL) and the file's path, nothing else leaks
"${CTL[@]}" saveconfig >>"$OUT" 2>&1 || hl_fail "saveconfig failed"
grep -q "hlorigin%$URL_SECRET@" "$CONF" || hl_fail "saveconfig lost the origin URL's secret"
grep -q "^origin_chap_secret_file = $T/origin.secret" "$CONF" || hl_fail "saveconfig lost origin_chap_secret_file"

# leaks FILE...: fail when any secret is in any FILE
leaks() {
	local s f
	for s in "${SECRETS[@]}"; do
		for f in "$@"; do
			if grep -rqaF -- "$s" "$f"; then
				grep -rnaF -- "$s" "$f" | head -5 >&2
				hl_fail "a secret leaked into $f"
			fi
		done
	done
}
leaks "$OUT" "$T/snmpwalk.out" "$T/hotlun-snmp.log"
grep -q "short6" "$OUT" && hl_fail "the target's CHAP secret is shown"
hl_log "ok: no secret in ls, get, stats, set replies, SNMP"

# ---- the old map format: the secret in the map still matches the same origin
hl_stop "$FRONT_PID"
MAP=$(ls "$ST"/cache-ssd.map 2>/dev/null) || hl_fail "no cache map under state_dir"
grep -q " iscsi://127.0.0.1:$SAN_PORT/$SAN_IQN/0\$" "$MAP" || { cat "$MAP" >&2; hl_fail "the map does not name the origin without credentials"; }
leaks "$ST" "$FRONT_LOG"
grep -q "disk san: iscsi://hlorigin%\*\*\*@127.0.0.1" "$FRONT_LOG" || hl_fail "the log does not show the origin masked"
grep -Eq "$FRONT_IQN chap_secret is 6 bytes: RFC 7143 asks for at least 12" "$FRONT_LOG" ||
	hl_fail "no warning about a CHAP secret under 12 bytes"
hl_log "ok: no secret in the log (debug level) or under state_dir; short secret warned about"

sed -i "s| iscsi://127.0.0.1:$SAN_PORT/| iscsi://hlorigin%$URL_SECRET@127.0.0.1:$SAN_PORT/|" "$MAP"
grep -q "$URL_SECRET" "$MAP" || hl_error "could not write an old-format map"
hl_start_hotlund "$CONF"
FRONT_PID=$HL_PID FRONT_LOG=$HL_LOG
grep -q "disk san attached (lun id [0-9]*, warm)" "$FRONT_LOG" ||
	{ grep cache "$FRONT_LOG" >&2; hl_fail "a map with the secret (old format) did not match the same origin"; }
grep -q "$URL_SECRET" "$MAP" && hl_fail "the old map was not rewritten without the secret"
hl_log "ok: an old-format map matched (warm) and was rewritten without the secret"
hl_stop "$FRONT_PID"

# ---- mutual CHAP toward the SAN (origin_mutual_*): the SAN must answer right
MUTUAL=Km6-MUTUALLEAK-8wQ
SECRETS+=("$MUTUAL")
printf 'mutual_user = hlsan\nmutual_secret = %s\n' "$MUTUAL" >>"$SAN_CONF"
hl_stop "$SAN_PID"
hl_start_hotlund "$SAN_CONF"
SAN_PID=$HL_PID
cp "$CONF" "$T/front-nomutual.conf"
sed -i "/^origin_chap_secret_file = /a origin_mutual_user = hlsan\norigin_mutual_secret = $MUTUAL" "$CONF"
hl_start_hotlund "$CONF"
FRONT_PID=$HL_PID FRONT_LOG=$HL_LOG
timeout 30 iscsi-inq "iscsi://front%short6@127.0.0.1:$FRONT_PORT/$FRONT_IQN/1" >"$T/inq.out" 2>&1 ||
	{ cat "$T/inq.out" >&2; hl_fail "INQUIRY through the front's mutual-CHAP disk"; }
"${CTL[@]}" /disks/keys get >"$T/get-keys.out" 2>&1 || hl_fail "get /disks/keys"
grep -q 'origin_mutual_secret.*\*\*\*\*\*\*\*\*' "$T/get-keys.out" || { cat "$T/get-keys.out" >&2; hl_fail "origin_mutual_secret not shown masked"; }
leaks "$T/get-keys.out"
hl_stop "$FRONT_PID"
leaks "$FRONT_LOG" "$ST"
sed -i "s/^origin_mutual_secret = .*/origin_mutual_secret = not-what-the-san-says/" "$CONF"
hl_spawn hotlund "$T/front-badmutual.log" "$HL_HOTLUND" --config "$CONF"
BAD_PID=$HL_LAST_PID
for i in $(seq 1 200); do hl_alive "$BAD_PID" || break; sleep 0.05; done
hl_alive "$BAD_PID" && hl_fail "the front started although the SAN's mutual CHAP answer is wrong"
wait "$BAD_PID"
hl_forget "$BAD_PID"
grep -q "disk keys: cannot open origin iscsi://127.0.0.1:$SAN_PORT/" "$T/front-badmutual.log" ||
	{ cat "$T/front-badmutual.log" >&2; hl_fail "no clear error for a SAN that fails mutual CHAP"; }
grep -q "Invalid CHAP_R response from the target" "$T/front-badmutual.log" ||
	{ cat "$T/front-badmutual.log" >&2; hl_fail "the front did not check the SAN's mutual CHAP answer"; }
leaks "$T/front-badmutual.log"
cp "$T/front-nomutual.conf" "$CONF"
hl_log "ok: mutual CHAP toward the SAN: right answer works, a wrong one is refused at start"

# ---- a secret file others can read is refused, with FILE:LINE
chmod 644 "$T/origin.secret"
line=$(grep -n '^origin_chap_secret_file' "$CONF" | cut -d: -f1)
if "$HL_HOTLUND" --check-config "$CONF" >"$T/check.out" 2>&1; then
	hl_fail "--check-config accepted a world-readable secret file"
fi
grep -q "$CONF:$line: origin_chap_secret_file: .*chmod 600" "$T/check.out" ||
	{ cat "$T/check.out" >&2; hl_fail "no FILE:LINE error for a world-readable secret file"; }
hl_log "ok: $(head -1 "$T/check.out")"
hl_stop "$SAN_PID"
hl_log "PASS"
