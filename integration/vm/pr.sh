#!/usr/bin/env bash
# pr.sh - persistent reservations in the VM: builds the daemon as e2e.sh does (into
# $SRPT_VM_DIR/bin/srptarget-pr, leaving e2e's binary alone), reuses or builds the image,
# and runs guest/pr.sh (sg_persist from two initiator ports, APTPL across a daemon
# restart, fence_scsi's sequence). Run it under the VM lock when others share the host:
#
#   flock /tmp/srpt-helper-vm.lock integration/vm/pr.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init pr
host_daemon_run pr 600 "$@"
