#!/usr/bin/env bash
# alua.sh - host side of the ALUA checks in the VM (TestALUA of
# integration/vm/guest/checks): builds the daemon, the checks and the image (which
# has multipath-tools and the dm-multipath and scsi_dh_alua modules), boots the VM
# and prints the result table.
#
#   integration/vm/alua.sh [k=v ...]
#
# Needs what e2e.sh needs. Output as run-vm.sh's; the console log is in
# $SRPT_VM_DIR/logs/alua-<time>.log. Exit status as run-vm.sh's.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init alua
host_checks_run alua ALUA 500 "$@"
