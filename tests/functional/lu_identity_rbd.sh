#!/bin/bash
# lu_identity_rbd.sh - gateways of one rbd image agree on its LU identity
# without any config (issue 17 item 1): two hotlund with their own state
# folders (own install ids) serve the same image (read-only: one writer per
# image) and another one; the same image has the same VPD 80h serial and
# VPD 83h NAA designator on both, derived from the cluster's fsid, the pool
# and the image id; the other image differs, and an image made again under
# the same name (new image id) is another LU. On a throw-away single-node
# Ceph (mini_ceph.sh).
. "$(dirname "$0")/lib.sh"
hl_need iscsi-inq python3 rbd ceph ceph-mon ceph-osd
"$HL_BUILDDIR/hotlund" --version | grep -q "^origin backends:.* rbd" || hl_skip "hotlund built without librbd"

T=$(hl_tmpdir)
hl_ceph_up "$T/ceph" shared:16M other:16M
IQN=$HL_IQN_PREFIX:lu-identity-rbd

conf() {
	mkdir -p "$3"
	cat >"$1" <<EOF
[global]
portal = 127.0.0.1:$2
state_dir = $3

[disk shared]
origin = rbd:rbd/shared
rbd_conf = $cluster/ceph.conf
read_only = yes

[disk other]
origin = rbd:rbd/other
rbd_conf = $cluster/ceph.conf
read_only = yes

[target $IQN]
lun.0 = shared
lun.1 = other
allow = ALL
EOF
}
ident() { echo "$(hl_serial_of "iscsi://127.0.0.1:$1/$IQN/$2")/$(hl_naa_of "iscsi://127.0.0.1:$1/$IQN/$2")"; }

PA=$(hl_free_port)
PB=$(hl_free_port)
conf "$T/a.conf" "$PA" "$T/a"
conf "$T/b.conf" "$PB" "$T/b"
hl_start_hotlund "$T/a.conf"
A=$HL_PID
hl_start_hotlund "$T/b.conf"
B=$HL_PID
a0=$(ident "$PA" 0)
b0=$(ident "$PB" 0)
a1=$(ident "$PA" 1)
hl_log "image shared: gateway A $a0, gateway B $b0; image other: $a1"
case $a0 in */6*) ;; *) hl_fail "no serial or NAA 6 designator: $a0" ;; esac
[ "$a0" = "$b0" ] || hl_fail "two gateways of one rbd image report different identities: $a0 and $b0"
[ "$a0" != "$a1" ] || hl_fail "two images share an identity: $a0"
hl_stop "$A"
hl_stop "$B"

# the image made again under the same name: a new image id, another LU
rbd rm rbd/shared >/dev/null 2>&1 || hl_fail "rbd rm"
rbd create --size 16M rbd/shared >/dev/null 2>&1 || hl_fail "rbd create"
hl_start_hotlund "$T/a.conf"
a2=$(ident "$PA" 0)
hl_log "image shared made again: $a2"
[ "$a2" != "$a0" ] || hl_fail "a new image under the old name kept the old identity"
hl_stop "$HL_PID"
hl_log "PASS"
