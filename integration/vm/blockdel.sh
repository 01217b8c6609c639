#!/usr/bin/env bash
# blockdel.sh - the control for the stress test's device removal, without SRP or RDMA
# (TestBlockDel of integration/vm/guest/checks): fio verifying a scsi_debug disk deleted under
# I/O, through the block device and through its SCSI generic device. Run it under the VM lock
# when others share the host:
#
#   flock /tmp/srpt-vm.lock integration/vm/blockdel.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init blockdel
host_checks_run blockdel BlockDel 300 "$@"
