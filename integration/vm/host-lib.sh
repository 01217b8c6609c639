# shellcheck shell=bash
# host-lib.sh - what the host scripts of the VM harness (e2e.sh, stress.sh, bench.sh,
# bench-2host.sh, demo.sh, schedtrace.sh) share. Sourced after the script has set REPO (the
# project's root) and defined its own log and die (die MESSAGE [STATUS]).
#
#   host_root                     stop unless root (the image build and apt-get need it)
#   host_build_deps [PKG ...]     install with apt-get what the cgo build needs (C compiler,
#                                 pkg-config, libibverbs-dev, librdmacm-dev) and PKG ...,
#                                 those missing only; set GO to a go command
#   host_build_cgo OUT PKG [FLAG ...]  go build [FLAG ...] -o OUT PKG (a main package, cgo
#                                 over rdma-core) and check that OUT links librdmacm
#   host_ceph_vm BIN              for the runs with a Ceph cluster in the guest (e2e-rbd.sh,
#                                 gateways.sh; SRPT_VM_CEPH=1 and their own SRPT_VM_DIR): librbd's
#                                 development files, srptarget with -tags rbd as BIN and rbdctl,
#                                 the image; sets CEPH_VM_FILES for SRPT_VM_FILES
#
# Exit status 3 (through die) when the build cannot be done, as the scripts document.

host_root() {
	[ "$(id -u)" = 0 ] || die "must run as root (image build, apt-get)"
}

# host_build_deps [PKG ...]: PKG are Debian package names, each given as "pkg" or
# "pkg:command" (installed when the command is missing).
# shellcheck disable=SC2120 # its arguments are optional
host_build_deps() {
	local need=() spec
	[ -e /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
	[ -e /usr/include/rdma/rdma_cma.h ] || need+=(librdmacm-dev)
	command -v gcc >/dev/null || need+=(gcc libc6-dev)
	command -v pkg-config >/dev/null || need+=(pkg-config)
	for spec in "$@"; do
		case $spec in
		*:*) command -v "${spec#*:}" >/dev/null || need+=("${spec%%:*}") ;;
		*) dpkg -s "$spec" >/dev/null 2>&1 || need+=("$spec") ;;
		esac
	done
	if [ ${#need[@]} -gt 0 ]; then
		log "apt-get install ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
			apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
		} || die "apt-get install ${need[*]} failed" 3
	fi
	# GO from the Makefile is "go" by default, which need not be in PATH (the Go tarball
	# installs to /usr/local/go).
	GO=${GO:-go}
	if ! command -v "$GO" >/dev/null && [ -x /usr/local/go/bin/go ]; then GO=/usr/local/go/bin/go; fi
	command -v "$GO" >/dev/null || die "no go command: install Go or set GO=" 3
}

host_build_cgo() {
	local out=$1 pkg=$2 libs
	shift 2
	(cd "$REPO" && "$GO" build "$@" -o "$out" "$pkg") || die "building $pkg failed" 3
	# (not ldd | grep -q: with pipefail, grep's early exit can fail the pipeline)
	libs=$(ldd "$out" 2>/dev/null || true)
	grep -q 'librdmacm\.so' <<<"$libs" ||
		die "$out does not link librdmacm: built without cgo (CGO_ENABLED=0, or no C compiler)? It could not use RDMA/CM" 3
}

host_ceph_vm() {
	local bin=$1
	host_build_deps librbd-dev librados-dev
	mkdir -p "$VMDIR/bin" "$VMDIR/logs"
	# Seed the package cache from the shared work directory's: hard links, no download.
	[ -d "$VMDIR/debs" ] || { [ -d /tmp/srptarget-vm/debs ] && cp -al /tmp/srptarget-vm/debs "$VMDIR/"; } || true
	log "go build -tags rbd: srptarget, rbdctl"
	host_build_cgo "$bin" ./cmd/srptarget -tags rbd
	(cd "$REPO" && "$GO" build -tags rbd -o "$VMDIR/bin/rbdctl" ./integration/ceph/rbdctl) || die "building rbdctl failed" 3
	"$HERE/build-image.sh"
	# shellcheck disable=SC2034 # read by the caller
	CEPH_VM_FILES="$bin:/usr/local/bin/srptarget $VMDIR/bin/rbdctl:/usr/local/bin/rbdctl $HERE/guest/ceph-lib.sh:/lab/ceph-lib.sh"
}
