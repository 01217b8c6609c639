#!/usr/bin/env bash
# schedtrace.sh - a diagnostic, not a test: where the guest's CPU goes with srptarget and
# with LIO ib_srpt for 4 KiB random reads at QD 32 (guest/schedtrace.sh: the scheduler's
# tracepoints, address-space switches per I/O, CPU per task, softirqs), and what a
# switch between two processes costs in this guest against one between two threads
# (tools/mmswitch). bench/results/notebook-2026-12.md ("Where srptarget is slower") quotes its output.
#
#   integration/vm/schedtrace.sh [k=v ...]     # k=v go to guest/schedtrace.sh
#                                              # (ch_counts="1 2" rounds=1 runtime=12)
#
# Builds the daemon as e2e.sh does and mmswitch (static, no cgo), runs the VM (image from
# build-image.sh), prints the SCHEDTRACE lines and keeps them in
# $SRPT_VM_DIR/schedtrace/<date-time>.txt. Needs what e2e.sh needs. Exit status: the
# guest script's (run-vm.sh), 3 when a build fails.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init schedtrace
host_daemon_image "$SRPT_VM_DIR/bin/srptarget"
mkdir -p "$SRPT_VM_DIR/schedtrace"
(cd "$REPO" && CGO_ENABLED=0 "$GO" build -o "$SRPT_VM_DIR/bin/mmswitch" ./integration/vm/tools/mmswitch) || exit 3
out=$SRPT_VM_DIR/schedtrace/$(date -u +%Y%m%d-%H%M%S).txt
log=$SRPT_VM_DIR/logs/schedtrace-$(date -u +%Y%m%d-%H%M%S).log
rc=0
SRPT_VM_LOG=$log \
	SRPT_VM_FILES="$SRPT_VM_DIR/bin/srptarget:/usr/local/bin/srptarget $SRPT_VM_DIR/bin/mmswitch:/lab/mmswitch $HERE/guest/bench-lib.sh:/lab/bench-lib.sh" \
	"$HERE/run-vm.sh" "$HERE/guest/schedtrace.sh" "$@" || rc=$?
grep -a 'SCHEDTRACE ' "$log" | sed -E 's/^\[[ 0-9.]+\] //' >"$out" || true
cat "$out"
echo "schedtrace: $out (console: $log)"
exit $rc
