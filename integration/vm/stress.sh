#!/usr/bin/env bash
# stress.sh - the faults a SAN sees, against srptarget in the test VM, with the
# data checked: logout/login cycles under I/O, LUN and host resets under I/O,
# 4 and 8 MiB commands, SIGKILL and restart of the daemon, removal of the RDMA
# device under live sessions, storms of refused logins, two initiator ports
# with four channels each and their own LUN maps, an initiator that never
# posts a receive and so holds the target's data buffers (tools/srpflood).
# The scenarios and their bounds are described at TestStress
# (integration/vm/guest/checks/stress_test.go), each scenario at its function.
# `make stress` runs all of them, `make stress-quick` (quick=1) the subset CI
# runs on every push.
#
#   integration/vm/stress.sh [quick=1] [k=v ...]     # k=v go to TestStress
#   integration/vm/stress.sh only=hog                # some scenarios (only=a,b)
#   integration/vm/stress.sh run='TestStress/hog'    # the same, go test's -run
#
# Builds the daemon the way `make build` does (into $SRPT_VM_DIR/bin, not
# bin/), tools/srpflood and the guest checks next to it, builds (or reuses) the VM image, takes
# dm-mod, dm-multipath and dm-round-robin from the image's own kernel package
# and dmsetup from Debian (`apt-get download`, the version of the image's
# libdevmapper; cached), boots the VM with TestStress and prints the
# check table.
#
# Needs what e2e.sh needs: a Debian 12 x86-64 host, root, the Debian archive,
# Go, a C toolchain with libibverbs-dev and librdmacm-dev.
#
# Environment:
#   GO                 the go command (default: go in PATH, else /usr/local/go/bin/go)
#   SRPT_VM_DIR        work directory (default /tmp/srptarget-vm)
#   SRPT_VM_TIMEOUT    seconds for the VM run (default 2400; 500 with quick=1)
#   SRPT_VM_LOCK       a lock file: the VM run waits for it (flock), for hosts
#                      where several people boot VMs on few cores
#   other SRPT_VM_* variables as in run-vm.sh
#
# Output, in $SRPT_VM_DIR/logs:
#   stress[-quick]-<time>.log          the serial console, host time on each line
#   stress[-quick]-<time>.results      the check table (name|pass or fail|detail)
#   stress[-quick]-<time>.daemon.log   srptarget's output as shown on the console
#                                      (repetitive per-login lines thinned out)
#   stress[-quick]-latest.*            links to the last run's files
# Exit status: the guest test's (0: every check passed), see run-vm.sh; 3 when
# the binary cannot be built.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
QUICK=0
for a in "$@"; do
	case $a in quick=1) QUICK=1 ;; esac
done
NAME=stress
[ $QUICK = 1 ] && NAME=stress-quick

# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init "$NAME"
mkdir -p "$VMDIR/bin" "$VMDIR/logs" "$VMDIR/stress"

# ------------------------------------------------------------------ build dependencies
host_build_deps

# ------------------------------------------------------------------ the daemon
BIN=$VMDIR/bin/srptarget-stress
log "go build -o $BIN ./cmd/srptarget"
# srpflood, the misbehaving initiator of the hog scenario (cgo, like the daemon: it uses
# ib/verbs over the guest's rdma-core)
FLOOD=$VMDIR/bin/srpflood
builds() {
	host_build_cgo "$BIN" ./cmd/srptarget && host_build_cgo "$FLOOD" ./integration/vm/tools/srpflood && host_checks_build
}
host_timed build_s builds
log "built $BIN ($(stat -c %s "$BIN") bytes), $FLOOD and $CHECKS_BIN in ${build_s}s"

# ------------------------------------------------------------------ the image
host_timed image_s "$HERE/build-image.sh"

# ------------------------------------------------------------------ dm-multipath for the cycles scenario
# The image has no device mapper (not needed by the other tests): the modules
# come from the image's kernel package (already in debs/), dmsetup from the
# Debian package of the same version as the image's libdevmapper, so that it
# runs with the guest's libraries.
t=$(elapsed)
DMFILES=
dm_prepare() {
	local kver deb='' dmdir ver debname dsdir m
	kver=$(sed -n 's/^kernel: linux-image-[^ ]* (\(.*\))$/\1/p' "$VMDIR/image/manifest.txt" | head -1)
	[ -n "$kver" ] || { echo "no kernel version in $VMDIR/image/manifest.txt"; return 1; }
	dmdir=$VMDIR/stress/dm-$kver
	if [ ! -s "$dmdir/dm-round-robin.ko" ]; then
		# under build-image.sh's lock: it prunes debs/ of old versions
		exec 8>"$VMDIR/.build.lock"
		flock -s 8
		deb=$(find "$VMDIR/debs" -maxdepth 1 -name "linux-image-${kver}_*.deb" | head -1)
		if [ -z "$deb" ]; then
			flock -u 8
			echo "no linux-image-$kver .deb in $VMDIR/debs"
			return 1
		fi
		rm -rf "$dmdir.tmp"
		mkdir -p "$dmdir.tmp"
		dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dmdir.tmp" --wildcards \
			"./lib/modules/$kver/kernel/drivers/md/dm-mod.ko*" \
			"./lib/modules/$kver/kernel/drivers/md/dm-multipath.ko*" \
			"./lib/modules/$kver/kernel/drivers/md/dm-round-robin.ko*"
		flock -u 8
		exec 8>&-
		for m in dm-mod dm-multipath dm-round-robin; do
			[ -f "$dmdir.tmp/lib/modules/$kver/kernel/drivers/md/$m.ko" ] ||
				{ echo "$m.ko not in $deb (compressed modules are not handled)"; return 1; }
			mv "$dmdir.tmp/lib/modules/$kver/kernel/drivers/md/$m.ko" "$dmdir.tmp/"
		done
		rm -rf "$dmdir" "$dmdir.tmp/lib"
		mv "$dmdir.tmp" "$dmdir"
	fi
	ver=$(sed -n 's/^ *libdevmapper1\.02\.1_\([^_]*\)_amd64\.deb$/\1/p' "$VMDIR/image/manifest.txt" | head -1)
	ver=${ver//%3a/:}
	[ -n "$ver" ] || { echo "no libdevmapper in $VMDIR/image/manifest.txt"; return 1; }
	debname=dmsetup_${ver//:/%3a}_amd64.deb
	# no ':' in the path: SRPT_VM_FILES separates host and guest path with it
	dsdir=$VMDIR/stress/dmsetup-${ver//:/_}
	if [ ! -x "$dsdir/sbin/dmsetup" ]; then
		(cd "$VMDIR/stress" && apt-get download -q -o APT::Sandbox::User=root "dmsetup=$ver" >/dev/null 2>&1) ||
			{ apt-get update -qq >/dev/null 2>&1 && (cd "$VMDIR/stress" && apt-get download -q -o APT::Sandbox::User=root "dmsetup=$ver" >/dev/null); } ||
			{ echo "apt-get download dmsetup=$ver failed"; return 1; }
		rm -rf "$dsdir"
		dpkg-deb -x "$VMDIR/stress/$debname" "$dsdir"
	fi
	DMFILES="$dmdir/dm-mod.ko:/lab/dm/dm-mod.ko $dmdir/dm-multipath.ko:/lab/dm/dm-multipath.ko"
	DMFILES="$DMFILES $dmdir/dm-round-robin.ko:/lab/dm/dm-round-robin.ko"
	DMFILES="$DMFILES $dsdir/sbin/dmsetup:/usr/local/sbin/dmsetup"
	echo "modules of kernel $kver (${deb:+from $(basename "$deb"), }in $dmdir), dmsetup $ver"
}
# not in $(...): dm_prepare sets DMFILES
if dm_prepare >"$VMDIR/stress/dm.txt" 2>&1; then
	log "dm-multipath: $(tail -1 "$VMDIR/stress/dm.txt")"
else
	# the guest's cycles scenario then fails, saying that dm-multipath is missing
	log "warning: dm-multipath unavailable: $(tail -1 "$VMDIR/stress/dm.txt")"
fi
dm_s=$(secs_since "$t")

# ------------------------------------------------------------------ the run
stamp=$(date +%Y%m%d-%H%M%S)
LOG=$VMDIR/logs/$NAME-$stamp.log
RESULTS=${LOG%.log}.results
DAEMON_LOG=${LOG%.log}.daemon.log
if [ $QUICK = 1 ]; then
	export SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-500}
else
	export SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-2400}
fi
FILES="$BIN:/usr/local/bin/srptarget $FLOOD:/usr/local/bin/srpflood $CHECKS_FILES $DMFILES"
runvm=("$HERE/run-vm.sh" "$HERE/guest/checks.sh" test=Stress "$@")
if [ -n "${SRPT_VM_LOCK:-}" ]; then
	log "waiting for $SRPT_VM_LOCK"
	runvm=(flock "$SRPT_VM_LOCK" "${runvm[@]}")
	# run-vm.sh's own shared lock on the same file would wait for ours for ever.
	if [ "$SRPT_VM_LOCK" = "${SRPT_VM_RUN_LOCK-/tmp/srpt-vm-run.lock}" ]; then
		export SRPT_VM_RUN_LOCK_HELD=1
	fi
fi
log "VM run: TestStress $*"
t=$(elapsed)
rc=0
SRPT_VM_FILES="$FILES" SRPT_VM_LOG="$LOG" "${runvm[@]}" || rc=$?
vm_s=$(secs_since "$t")

host_keep_logs "$NAME" "$LOG"
echo
host_summary "$NAME" "$RESULTS" "$rc"
boot=$(sed -n 's/^\[ *\([0-9.]*\)\] SRPTVM: init reached.*/\1/p' "$LOG" | head -1)
echo "$NAME: times: go build ${build_s}s, image ${image_s}s, dm files ${dm_s}s, VM ${vm_s}s (boot ${boot:-?}s), total $(elapsed)s"
echo "$NAME: serial log $LOG"
echo "$NAME: results    $RESULTS"
echo "$NAME: daemon log $DAEMON_LOG"
exit "$rc"
