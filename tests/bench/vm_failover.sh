#!/bin/bash
# vm_failover.sh - issue 26 benchmark: Linux dm-multipath (a qemu VM with
# Debian's kernel, scsi_dh_alua, multipathd and open-iscsi using the
# settings in contrib/multipath/) against a pair of hotlund gateways,
# through tests/functional/vm_multipath.sh. RUNS runs of each case: the
# owner gets SIGTERM (term: a planned handover), SIGKILL (kill) or SIGSTOP
# (stop; SIGCONT after the I/O). The guest writes, reads back and compares
# 256 KiB O_DIRECT chunks meanwhile; the stall is its longest chunk. Prints
# one line per run and one per case:
#
#   vm_failover origin=rbd case=kill run=1 stall_s=3.71
#   vm_failover origin=rbd case=kill runs=3 min_s=3.52 max_s=3.90 goal_s=5 met=3/3
#
# Any I/O error or mismatch fails the test run (no line is printed then).
#
#   tests/bench/vm_failover.sh   (BUILD=dir, default ./build; ORIGIN=rbd|san,
#                                 default rbd; RUNS=3; CASES="term kill stop";
#                                 LEASE_MS / DEAD_MS: the gateways' timers,
#                                 default 1000 / 2000, empty: hotlund's)
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$SRC/build}
ORIGIN=${ORIGIN:-rbd}
RUNS=${RUNS:-3}
CASES=${CASES:-term kill stop}
LOG=$BUILD/tests/functional/vm_multipath.sh.log

list=
for c in $CASES; do
	for _ in $(seq 1 "$RUNS"); do list="$list $c"; done
done
rc=0
HL_VM_MP_ORIGIN=$ORIGIN HL_VM_MP_CASES="${list# }" \
	HL_VM_MP_LEASE_MS=${LEASE_MS-1000} HL_VM_MP_DEAD_MS=${DEAD_MS-2000} \
	HL_VM_TIMEOUT=${HL_VM_TIMEOUT:-300} \
	make -s -C "$BUILD" check TESTS=tests/functional/vm_multipath.sh >/dev/null 2>&1 || rc=$?
[ -s "$LOG" ] || { echo "vm_failover: no log ($LOG)" >&2; exit 1; }
if [ $rc != 0 ]; then
	grep -E 'FAIL|SKIP|ERROR' "$LOG" | tail -5 >&2
	echo "vm_failover: vm_multipath.sh failed (exit $rc); see $LOG" >&2
	exit 1
fi
goal() { case $1 in term) echo 1 ;; kill) echo 5 ;; *) echo 6 ;; esac; }
for c in $CASES; do
	n=0 met=0 min= max=
	while read -r s; do
		n=$((n + 1))
		echo "vm_failover origin=$ORIGIN case=$c run=$n stall_s=$s"
		awk -v s="$s" -v g="$(goal "$c")" 'BEGIN { exit !(s <= g) }' && met=$((met + 1))
		min=$(awk -v a="${min:-$s}" -v b="$s" 'BEGIN { print (b < a ? b : a) }')
		max=$(awk -v a="${max:-$s}" -v b="$s" 'BEGIN { print (b > a ? b : a) }')
	done < <(sed -n "s/.*vm_multipath: $c: PASS in [0-9]* s; stall \([0-9.]*\) s.*/\1/p" "$LOG")
	echo "vm_failover origin=$ORIGIN case=$c runs=$n min_s=$min max_s=$max goal_s=$(goal "$c") met=$met/$n"
done
