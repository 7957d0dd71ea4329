#!/bin/bash
# origin_iscsi.sh - the iscsi:// origin, two tiers on loopback: a "SAN" (a
# first hotlund with a file LUN, or tgtd with HL_TARGET=tgt) and a front
# hotlund whose disk is iscsi://127.0.0.1:SANPORT/IQN/LUN.
#  1. a random 64 MiB image goes in through the front (qemu-img convert) and
#     compares identical through the front, directly on the SAN, and in the
#     SAN's backing file;
#  2. the SAN is stopped (SIGTERM) and started again on the same port within
#     a few seconds while a read loop runs through the front: no read fails;
#  3. the SAN stays away longer than the retry limit (timeout=4 in the URL):
#     the front still answers INQUIRY, reads fail quickly with MEDIUM or
#     HARDWARE ERROR sense, and everything works again once the SAN is back;
#     then the SAN hangs (SIGSTOP): a read fails within the limit instead of
#     hanging, and the front recovers when the SAN resumes (SIGCONT);
#  4. CHAP on the origin URL (user%secret@): right secret works, a wrong one
#     makes the front refuse to start with a clear error.
# Steps 2-4 need a restartable hotlund SAN and are skipped with HL_TARGET=tgt.
. "$(dirname "$0")/lib.sh"
hl_need qemu-img iscsi-inq
qemu-img --help 2>/dev/null | grep -qw iscsi || hl_skip "qemu-img has no iscsi driver (install qemu-block-extra)"

T=$(hl_tmpdir)
SIZE=$((64 * 1024 * 1024))
RETRY_S=4
QTO=60 # no client may hang the test (qemu's libiscsi reconnects forever)
FRONT_IQN=$HL_IQN_PREFIX:origin-iscsi-front

# ---- the SAN
hl_target_start --size $SIZE
SAN_PID=$HL_PID SAN_PORT=$HL_PORT SAN_IQN=$HL_IQN SAN_LUN=$HL_LUN
SAN_URL=$HL_URL SAN_DISK=$HL_DISK

# front_config FILE ORIGIN-URL: the front hotlund's config (its own state folder).
front_config() {
	local st=$T/front-state
	mkdir -p "$st"
	cat >"$1" <<EOF
# written by $HL_TEST_NAME
[global]
portal = 127.0.0.1:$FRONT_PORT
state_dir = $st
control_socket = $st/ctl.sock
log_level = info
threads = 2

[disk san]
origin = $2

[target $FRONT_IQN]
lun.0 = san
allow = ALL
EOF
}

FRONT_PORT=$(hl_free_port)
front_config "$T/front.conf" "iscsi://127.0.0.1:$SAN_PORT/$SAN_IQN/$SAN_LUN?timeout=$RETRY_S"
hl_start_hotlund "$T/front.conf"
FRONT_PID=$HL_PID FRONT_LOG=$HL_LOG
FRONT_URL=iscsi://127.0.0.1:$FRONT_PORT/$FRONT_IQN/0
grep -q "origin: iscsi://.*: 131072 blocks of 512 bytes" "$FRONT_LOG" ||
	{ cat "$FRONT_LOG" >&2; hl_fail "the front did not log the SAN's capacity"; }

# ---- 1. data through both tiers
timeout $QTO qemu-img info "$FRONT_URL" >"$T/info.out" 2>&1 || { cat "$T/info.out" >&2; hl_fail "qemu-img info through the front"; }
grep -q "virtual size: 64 MiB ($SIZE bytes)" "$T/info.out" || { cat "$T/info.out" >&2; hl_fail "front LUN size is not 64 MiB"; }
head -c $SIZE /dev/urandom >"$T/src.img"
timeout $QTO qemu-img convert -n -f raw -O raw "$T/src.img" "$FRONT_URL" >"$T/q.out" 2>&1 ||
	{ cat "$T/q.out" >&2; hl_fail "qemu-img convert through the front failed"; }
for url in "$FRONT_URL" "$SAN_URL"; do
	timeout $QTO qemu-img compare -f raw -F raw "$T/src.img" "$url" >"$T/q.out" 2>&1 ||
		{ cat "$T/q.out" >&2; hl_fail "qemu-img compare against $url: differs"; }
	grep -q 'Images are identical' "$T/q.out" || { cat "$T/q.out" >&2; hl_fail "compare $url"; }
done
cmp -s "$T/src.img" "$SAN_DISK" || hl_fail "the SAN's backing file differs from what was written through the front"
hl_log "64 MiB written through the front, identical through the front, the SAN and its file"

if [ "$HL_TARGET" = tgt ]; then
	hl_stop "$FRONT_PID"
	hl_stop "$SAN_PID"
	hl_log "PASS (tgt SAN: restart steps skipped)"
	exit 0
fi

# san_restart: start the SAN again on its port with its config and disk.
san_restart() {
	hl_start_hotlund "$T/hotlund.conf"
	SAN_PID=$HL_PID
}

# ---- 2. short outage while reads run through the front: nothing fails
: >"$T/loop.out"
# read_loop: full-image reads through the front for 14 s, one line per read
# in loop.out. Started with hl_spawn, so the EXIT trap stops it; on SIGTERM
# it stops its current reader too.
read_loop() {
	local end=$((SECONDS + 14)) i=0 child=
	trap '[ -n "$child" ] && kill "$child" 2>/dev/null; exit 143' TERM
	while [ $SECONDS -lt $end ]; do
		i=$((i + 1))
		timeout $QTO qemu-img compare -q -f raw -F raw "$T/src.img" "$FRONT_URL" >"$T/loop.$i.err" 2>&1 &
		child=$!
		if wait "$child"; then
			echo "ok $i $(date +%s.%N)" >>"$T/loop.out"
		else
			echo "FAIL $i $(date +%s.%N) $(tr '\n' ' ' <"$T/loop.$i.err")" >>"$T/loop.out"
		fi
		child=
	done
}
hl_spawn readloop "$T/readloop.log" read_loop
LOOP_PID=$HL_LAST_PID
sleep 2
hl_log "stopping the SAN (pid $SAN_PID)"
t_down=$(date +%s.%N)
hl_stop "$SAN_PID"
sleep 2
san_restart
t_up=$(date +%s.%N)
hl_log "SAN back (pid $SAN_PID)"
wait "$LOOP_PID"
hl_forget "$LOOP_PID"
grep -q FAIL "$T/loop.out" && { cat "$T/loop.out" >&2; hl_fail "reads through the front failed during a short SAN outage"; }
n_ok=$(grep -c '^ok' "$T/loop.out")
n_after=$(awk -v t="$t_up" '$1 == "ok" && $3 > t' "$T/loop.out" | wc -l)
if [ "$n_ok" -lt 3 ] || [ "$n_after" -lt 1 ]; then
	cat "$T/loop.out" >&2
	hl_fail "the read loop did not run across the outage ($n_ok reads, $n_after after)"
fi
grep -q 'session [0-9]* restored after' "$FRONT_LOG" ||
	{ tail -n 30 "$FRONT_LOG" >&2; hl_fail "the front did not log the session restore"; }
hl_log "short outage ($(awk -v a="$t_down" -v b="$t_up" 'BEGIN{printf "%.1f", b-a}') s): $n_ok full-image reads, none failed"

# ---- 3. outage longer than the retry limit: errors, not hangs; then recovery
hl_stop "$SAN_PID"
sleep $((RETRY_S + 2))
timeout $QTO iscsi-inq "$FRONT_URL" >"$T/inq.out" 2>&1 || { cat "$T/inq.out" >&2; hl_fail "the front does not answer INQUIRY while the SAN is away"; }
grep -q DIRECT_ACCESS "$T/inq.out" || hl_fail "INQUIRY through the front"
t0=$SECONDS
if timeout $QTO qemu-img compare -q -f raw -F raw "$T/src.img" "$FRONT_URL" >"$T/down.out" 2>&1; then
	hl_fail "a read through the front succeeded while the SAN was away"
fi
[ $((SECONDS - t0)) -le 3 ] || hl_fail "a failing read took $((SECONDS - t0)) s (must fail fast after the limit)"
grep -Eq 'SENSE KEY:.*\((3|4)\) ASCQ' "$T/down.out" ||
	{ cat "$T/down.out" >&2; hl_fail "the failed read did not carry MEDIUM ERROR or HARDWARE ERROR sense"; }
hl_check_alive "$FRONT_PID"
grep -q "down for more than $RETRY_S s" "$FRONT_LOG" || { tail -n 30 "$FRONT_LOG" >&2; hl_fail "no error logged for the outage"; }
hl_log "long outage: INQUIRY answered, reads fail fast with $(grep -Eo 'SENSE KEY:[^ ]* ASCQ:[^ ]*' "$T/down.out" | head -1)"

san_restart
ok=0
for i in $(seq 1 60); do
	if timeout $QTO qemu-img compare -q -f raw -F raw "$T/src.img" "$FRONT_URL" >"$T/up.out" 2>&1; then
		ok=1
		break
	fi
	sleep 0.25
done
[ $ok = 1 ] || { cat "$T/up.out" >&2; hl_fail "the front did not recover after the SAN came back"; }
hl_log "recovered after the SAN came back (attempt $i)"

# ---- 3b. a SAN that hangs (SIGSTOP: TCP stays up, nothing answers): errors, not hangs
kill -STOP "$SAN_PID"
t0=$SECONDS
if timeout $QTO qemu-img compare -q -f raw -F raw "$T/src.img" "$FRONT_URL" >"$T/hung.out" 2>&1; then
	kill -CONT "$SAN_PID"
	hl_fail "a read through the front succeeded while the SAN was stopped"
fi
dt=$((SECONDS - t0))
kill -CONT "$SAN_PID"
[ $dt -le $((RETRY_S + 4)) ] || hl_fail "a read against a hung SAN took $dt s (limit ${RETRY_S} s)"
grep -Eq 'SENSE KEY:.*\((3|4)\) ASCQ' "$T/hung.out" || { cat "$T/hung.out" >&2; hl_fail "hung SAN: no medium/hardware error sense"; }
hl_check_alive "$FRONT_PID"
ok=0
for i in $(seq 1 60); do
	if timeout $QTO qemu-img compare -q -f raw -F raw "$T/src.img" "$FRONT_URL" >"$T/up.out" 2>&1; then
		ok=1
		break
	fi
	sleep 0.25
done
[ $ok = 1 ] || { cat "$T/up.out" >&2; hl_fail "the front did not recover after the SAN resumed"; }
hl_log "hung SAN: the read failed after $dt s, then the front recovered (attempt $i)"

head -c $((4 * 1024 * 1024)) /dev/urandom >"$T/small.img"
timeout $QTO qemu-img convert -n -f raw -O raw "$T/small.img" "$FRONT_URL" >"$T/q.out" 2>&1 || { cat "$T/q.out" >&2; hl_fail "write after recovery"; }
cmp -s "$T/small.img" <(head -c $((4 * 1024 * 1024)) "$SAN_DISK") || hl_fail "write after recovery did not reach the SAN"
hl_stop "$FRONT_PID"
hl_stop "$SAN_PID"

# ---- 4. CHAP on the origin URL
hl_target_start --disk "$SAN_DISK" --chap hlorigin origin-secret-42
SAN_PID=$HL_PID
FRONT_PORT=$(hl_free_port)
FRONT_URL=iscsi://127.0.0.1:$FRONT_PORT/$FRONT_IQN/0
front_config "$T/front-chap.conf" "iscsi://hlorigin%origin-secret-42@127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN"
hl_start_hotlund "$T/front-chap.conf"
FRONT_PID=$HL_PID
timeout $QTO qemu-img compare -f raw -F raw "$SAN_DISK" "$FRONT_URL" >"$T/q.out" 2>&1 ||
	{ cat "$T/q.out" >&2; hl_fail "front with a CHAP origin: image differs from the SAN's file"; }
hl_stop "$FRONT_PID"
front_config "$T/front-bad.conf" "iscsi://hlorigin%wrong-secret@127.0.0.1:$HL_PORT/$HL_IQN/$HL_LUN"
hl_spawn hotlund "$T/front-bad.log" "$HL_HOTLUND" --config "$T/front-bad.conf"
BAD_PID=$HL_LAST_PID
for i in $(seq 1 200); do hl_alive "$BAD_PID" || break; sleep 0.05; done
hl_alive "$BAD_PID" && hl_fail "the front started with a wrong CHAP secret on its origin"
wait "$BAD_PID"
rc=$?
hl_forget "$BAD_PID"
if [ $rc -eq 0 ] || [ $rc -ge 128 ]; then
	hl_fail "front with a wrong origin secret: exit status $rc (crash?)"
fi
if ! grep -q 'cannot log in.*Authentication failure' "$T/front-bad.log" ||
	! grep -q 'cannot open origin .*Permission denied' "$T/front-bad.log"; then
	cat "$T/front-bad.log" >&2
	hl_fail "no clear error for the refused origin login"
fi
hl_log "CHAP origin: right secret works, a wrong one is refused at start-up (status $rc)"
hl_stop "$SAN_PID"
hl_log "PASS"
