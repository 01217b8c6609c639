#!/usr/bin/env bash
# sbc.sh - the SBC-4 and SPC-4 commands of issue 35 in the VM: builds the daemon as e2e.sh does
# (into $SRPT_VM_DIR/bin/srptarget-sbc) and the guest checks, reuses or builds the image, and runs
# TestSBC (sg_raw, sg_write_same, sg_readcap, sg_unmap, sg_xcopy, sg_sanitize and iscsi-test-cu
# against memory LUNs; integration/vm/guest/checks/sbc_test.go). One group again:
# integration/vm/sbc.sh run='TestSBC/sanitize'.
# Run it under the VM lock when others share the host:
#
#   flock /tmp/srpt-vm.lock integration/vm/sbc.sh [k=v ...]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init sbc
host_checks_run sbc SBC 600 "$@"
