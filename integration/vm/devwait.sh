#!/usr/bin/env bash
# devwait.sh - the boot order in the VM (TestDevWait of integration/vm/guest/checks): serve
# started before any RDMA module waits, listens once soft-RoCE is up, waits for a listener's
# address, stops on SIGTERM while it waits, and starts on a reload after a start that failed
# when the device appeared. Builds the daemon (into $SRPT_VM_DIR/bin/srptarget-devwait) and the
# checks, reuses or builds the image. Run it under the VM lock when others share the host:
#
#   flock /tmp/srpt-vm.lock integration/vm/devwait.sh [k=v ...]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init devwait
host_checks_run devwait DevWait 400 "$@"
