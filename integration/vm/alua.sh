#!/usr/bin/env bash
# alua.sh - host side of the ALUA check in the VM (guest/alua.sh): builds the
# daemon and the image (which has multipath-tools and the dm-multipath and
# scsi_dh_alua modules), boots the VM and prints the result table.
#
#   integration/vm/alua.sh [k=v ...]
#
# Needs what e2e.sh needs. Output as run-vm.sh's; the console log is in
# $SRPT_VM_DIR/logs/alua-<time>.log. Exit status as run-vm.sh's.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export SRPT_VM_DIR=${SRPT_VM_DIR:-/tmp/srptarget-vm}
VMDIR=$SRPT_VM_DIR
log() { echo "alua: $*"; }
die() { echo "alua.sh: error: $*" >&2; exit "${2:-2}"; }
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_root
host_build_deps
mkdir -p "$VMDIR/bin" "$VMDIR/logs" "$VMDIR/run"
BIN=$VMDIR/bin/srptarget-alua
log "go build -o $BIN ./cmd/srptarget"
host_build_cgo "$BIN" ./cmd/srptarget
"$HERE/build-image.sh"
SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-500} SRPT_VM_FILES="$BIN:/usr/local/bin/srptarget" \
	exec "$HERE/run-vm.sh" "$HERE/guest/alua.sh" "$@"
