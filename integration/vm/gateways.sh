#!/usr/bin/env bash
# gateways.sh - make stress-gateways: two srptarget daemons in front of one Ceph RBD image, in
# the test VM (guest/gateways.sh): the same LUN identity through two target ports in two ALUA
# groups, dm-multipath over both, fio with crc32c verify while one daemon is killed with
# SIGKILL and restarted; the failover time and the verify errors in the result table; the
# ALUA states changed by SET TARGET PORT GROUPS through one gateway and seen through the other;
# the persistent reservations shared through a RADOS object. The
# Ceph cluster runs inside the guest, as for make e2e-rbd: the same image and work directory
# (SRPT_VM_CEPH=1, /tmp/srptarget-vm-rbd), the daemon built with -tags rbd, rbdctl for the
# cluster chores. k=v arguments go to guest/gateways.sh (fio_size, kill_after, down,
# watch_timeout).
#
# Environment: SRPT_VM_DIR (default /tmp/srptarget-vm-rbd), GO, SRPT_VM_TIMEOUT (900).
# Needs root; installs librbd-dev and librados-dev when missing.
# Logs: $SRPT_VM_DIR/logs/gateways-<time>.{log,results}.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init gateways /tmp/srptarget-vm-rbd
export SRPT_VM_CEPH=1
host_ceph_vm "$VMDIR/bin/srptarget-gw"
HOST_VM_SUMMARY='^(failover time|fio across|ALUA: |node 1 fenced|no write of node 1|gateway A fails closed|the PREEMPT waits)'
SRPT_VM_FILES="$CEPH_VM_FILES" host_vm_checks gateways "$HERE/guest/gateways.sh" "$@"
