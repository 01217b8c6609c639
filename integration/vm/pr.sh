#!/usr/bin/env bash
# pr.sh - persistent reservations in the VM: builds the daemon as e2e.sh does (into
# $SRPT_VM_DIR/bin/srptarget-pr, leaving e2e's binary alone) and the guest checks, reuses or
# builds the image, and runs TestPR (sg_persist from two initiator ports, APTPL across a daemon
# restart, fence_scsi's sequence; integration/vm/guest/checks/pr_test.go). Run it under the VM
# lock when others share the host:
#
#   flock /tmp/srpt-vm.lock integration/vm/pr.sh [k=v ...]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init pr
host_checks_run pr PR 600 "$@"
