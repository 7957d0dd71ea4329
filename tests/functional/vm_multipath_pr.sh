#!/bin/bash
# vm_multipath_pr.sh - Linux's own reservation clients against a gateway pair
# that shares an rbd image (issue 27; docs/gateways.md, "Persistent
# reservations"): vm_multipath.sh's pr case. In the VM, mpathpersist
# registers a key on both paths and reserves, sg_persist reads it through
# each path; the owner gateway is killed; the guest still reads its
# registrations and reservation through the new owner and writes; the host,
# as a second node, preempts the guest's key (fence_mpath's fence), and the
# guest's writes get RESERVATION CONFLICT. See vm_multipath.sh for the VM.
HL_VM_MP_ORIGIN=rbd HL_VM_MP_CASES=pr exec "$(dirname "$0")/vm_multipath.sh" "$@"
