#!/usr/bin/env bash
# e2e.sh - the end-to-end test of srptarget against the Linux SRP initiator, from
# the host: build the daemon the way `make build` does and the guest checks
# (integration/vm/guest/checks, TestE2E), build (or reuse) the VM image, boot the
# VM with them, keep the serial log, the result table and the daemon's log as
# files, print the table. `make e2e` runs it.
#
#   integration/vm/e2e.sh [k=v ...]      # k=v go to the checks (TestE2E's doc)
#   integration/vm/e2e.sh run='TestE2E/LUN_0'   # one check (or group) again
#
# Needs: a Debian 12 x86-64 host, root, access to the Debian archive (the image
# is built from Debian packages; build-image.sh installs qemu and the other host
# tools it needs), Go, and a C toolchain with libibverbs-dev and librdmacm-dev
# for the cgo RDMA layer: missing Debian packages are installed with apt-get.
#
# Environment:
#   GO                 the go command (default: go in PATH, else /usr/local/go/bin/go)
#   SRPT_VM_DIR        work directory (default /tmp/srptarget-vm): the binary goes
#                      to bin/, logs to logs/
#   SRPT_VM_TIMEOUT    seconds for the VM run (default 600)
#   SRPT_E2E_SELFTEST  auto (default): if the e2e run fails, run the harness
#                      self-test (TestSelfTest: LIO ib_srpt, no srptarget) to tell a broken
#                      harness from a daemon failure; 1: always run it first;
#                      0: never
#   SRPT_E2E_VERBS     1 (default): then run the tests of package ib/verbs (the cgo
#                      RDMA layer) on soft-RoCE in a second VM (TestVerbs,
#                      about 80 s); 0: skip them
#   other SRPT_VM_* variables as in run-vm.sh and build-image.sh
#
# Output, in $SRPT_VM_DIR/logs:
#   e2e-<time>.log       the whole serial console, host time in front of each line
#   e2e-<time>.results   the result table (name|pass or fail|detail)
#   e2e-<time>.daemon.log  srptarget's own output (every instance), from the console
#   e2e-latest.*         symbolic links to the last run's files
#   e2e-verbs-<time>.log/.results  the ib/verbs tests' run
# Exit status: that of the guest test (0: every check passed), see run-vm.sh;
# 3 when the binary cannot be built.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init e2e
SELFTEST=${SRPT_E2E_SELFTEST:-auto}
VERBS=${SRPT_E2E_VERBS:-1}
mkdir -p "$VMDIR/bin" "$VMDIR/logs"

# ------------------------------------------------------------------ build dependencies
# The cgo RDMA layer (ib/verbs) needs rdma-core's headers and a C compiler;
# .ci/run installs these too.
host_build_deps

# ------------------------------------------------------------------ the daemon, the checks
# Built exactly as the Makefile's build target builds bin/srptarget (cgo on, no
# tags), into the work directory so that a developer's bin/ is left alone.
BIN=$VMDIR/bin/srptarget
log "go build -o $BIN ./cmd/srptarget"
builds() { host_build_cgo "$BIN" ./cmd/srptarget && host_checks_build; }
host_timed build_s builds
log "built $BIN ($(stat -c %s "$BIN") bytes) and $CHECKS_BIN in ${build_s}s"

# ------------------------------------------------------------------ the image
host_timed image_s "$HERE/build-image.sh"

export SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-600}

selftest() {
	log "harness self-test (LIO ib_srpt, no srptarget)"
	local rc=0
	SRPT_VM_FILES="$CHECKS_FILES" SRPT_VM_LOG="$VMDIR/logs/e2e-selftest-$stamp.log" SRPT_VM_TIMEOUT=300 \
		"$HERE/run-vm.sh" "$HERE/guest/checks.sh" test=SelfTest fio_runtime=3 ipv6_login=0 || rc=$?
	return $rc
}

stamp=$(date +%Y%m%d-%H%M%S)
if [ "$SELFTEST" = 1 ]; then
	selftest || die "the harness self-test failed (rc $?): the VM, soft-RoCE or ib_srp does not work here; see $VMDIR/logs/e2e-selftest-$stamp.log" 4
fi

# ------------------------------------------------------------------ the run
LOG=$VMDIR/logs/e2e-$stamp.log
RESULTS=${LOG%.log}.results
DAEMON_LOG=${LOG%.log}.daemon.log
log "VM run: TestE2E $*"
rc=0
vmrun() {
	SRPT_VM_FILES="$BIN:/usr/local/bin/srptarget $CHECKS_FILES" SRPT_VM_LOG="$LOG" \
		"$HERE/run-vm.sh" "$HERE/guest/checks.sh" test=E2E "$@" || rc=$?
}
host_timed vm_s vmrun "$@"

host_keep_logs e2e "$LOG"
echo
host_summary e2e "$RESULTS" "$rc"
echo "e2e: times: go build ${build_s}s, image ${image_s}s, VM ${vm_s}s, total $(elapsed)s"
echo "e2e: serial log $LOG"
echo "e2e: results    $RESULTS"
echo "e2e: daemon log $DAEMON_LOG"

# ------------------------------------------------------------------ the ib/verbs tests
# The cgo package's own tests (ib/verbs: post-time checks, round trips over IPv4, IPv6 and
# link-local addresses, device removal under live resources) need a real RDMA device, so they
# run here, in a VM of their own (TestVerbs of the guest checks; about 80 s), and count as e2e
# checks.
verbs_rc=0
if [ "$VERBS" = 1 ]; then
	VBIN=$VMDIR/bin/verbs.test
	VLOG=$VMDIR/logs/e2e-verbs-$stamp.log
	log "go test -c -o $VBIN ./ib/verbs"
	(cd "$REPO" && "$GO" test -c -o "$VBIN" ./ib/verbs) || die "building the ib/verbs tests failed" 3
	log "VM run: TestVerbs"
	SRPT_VM_FILES="$VBIN:/usr/local/bin/verbs.test $CHECKS_FILES" SRPT_VM_LOG="$VLOG" \
		"$HERE/run-vm.sh" "$HERE/guest/checks.sh" test=Verbs || verbs_rc=$?
	host_summary "e2e: ib/verbs tests on soft-RoCE" "${VLOG%.log}.results" "$verbs_rc"
	echo "e2e: verbs log  $VLOG"
	if [ "$verbs_rc" = 0 ] && { [ "$FAILED" -gt 0 ] || [ "$PASSED" = 0 ]; }; then verbs_rc=1; fi
fi

if [ "$rc" != 0 ] && [ "$SELFTEST" = auto ]; then
	if selftest; then
		echo "e2e: the harness self-test passed: the failure above is srptarget's (or the test's), not the VM's"
	else
		echo "e2e: the harness self-test failed as well: look at the VM, soft-RoCE and ib_srp first ($VMDIR/logs/e2e-selftest-$stamp.log)"
	fi
fi
[ "$rc" != 0 ] || rc=$verbs_rc
exit "$rc"
