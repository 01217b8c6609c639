#!/usr/bin/env bash
# pr.sh - persistent reservations in the VM: builds the daemon as e2e.sh does (into
# $SRPT_VM_DIR/bin/srptarget-pr, leaving e2e's binary alone), reuses or builds the image,
# and runs guest/pr.sh (sg_persist from two initiator ports, APTPL across a daemon
# restart, fence_scsi's sequence). Run it under the VM lock when others share the host:
#
#   flock /tmp/srpt-helper-vm.lock integration/vm/pr.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export SRPT_VM_DIR=${SRPT_VM_DIR:-/tmp/srptarget-vm}
log() { echo "pr: $*"; }
die() { echo "pr.sh: error: $*" >&2; exit "${2:-2}"; }
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_root
host_build_deps
BIN=$SRPT_VM_DIR/bin/srptarget-pr
mkdir -p "$SRPT_VM_DIR/bin" "$SRPT_VM_DIR/logs"
host_build_cgo "$BIN" ./cmd/srptarget
"$HERE/build-image.sh"
stamp=$(date +%Y%m%d-%H%M%S)
export SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-600}
SRPT_VM_FILES="$BIN:/usr/local/bin/srptarget" SRPT_VM_LOG="$SRPT_VM_DIR/logs/pr-$stamp.log" \
	exec "$HERE/run-vm.sh" "$HERE/guest/pr.sh" "$@"
