#!/usr/bin/env bash
# e2e-rbd.sh - make e2e-rbd: the kernel's ib_srp against srptarget serving a Ceph RBD image, in
# the test VM. The cluster (one monitor, one OSD on memstore, no manager, no cephx, 127.0.0.1)
# runs inside the guest: the VM has no network card, and a cluster inside it needs none. The
# image is the e2e image plus ceph-mon, ceph-osd and monmaptool (build-image.sh with
# SRPT_VM_CEPH=1), kept in its own work directory so that it never replaces the shared one.
# The daemon is built with -tags rbd; rbdctl (integration/ceph/rbdctl) stands in for the ceph
# and rbd tools, which are Python or not in the image. k=v arguments go to guest/rbd-e2e.sh.
#
# Environment: SRPT_VM_DIR (default /tmp/srptarget-vm-rbd), GO, SRPT_VM_TIMEOUT (900).
# Needs root; installs librbd-dev and librados-dev when missing. Logs: $SRPT_VM_DIR/logs/e2e-rbd-<time>.{log,results}.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init e2e-rbd /tmp/srptarget-vm-rbd
export SRPT_VM_CEPH=1
host_ceph_vm "$VMDIR/bin/srptarget"
SRPT_VM_FILES="$CEPH_VM_FILES" host_vm_checks e2e-rbd "$HERE/guest/rbd-e2e.sh" "$@"
