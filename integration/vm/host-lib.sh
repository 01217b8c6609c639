# shellcheck shell=bash
# host-lib.sh - what the host scripts of the VM harness (e2e.sh, stress.sh, bench.sh,
# bench-2host.sh, demo.sh, schedtrace.sh, pr.sh, alua.sh, e2e-rbd.sh, gateways.sh) share.
# Sourced after the script has set HERE (integration/vm); then host_init.
#
#   host_init NAME [DIR]          the preamble of a host script: SRPT_VM_DIR exported (default
#                                 DIR, else /tmp/srptarget-vm) and in VMDIR, REPO, log and die
#                                 prefixed with NAME, elapsed (seconds since host_init, one
#                                 decimal) and secs_since T (seconds from an elapsed T), host_root
#   host_timed VAR CMD...         run CMD; its seconds (one decimal) in VAR
#   host_root                     stop unless root (the image build and apt-get need it)
#   host_build_deps [PKG ...]     install with apt-get what the cgo build needs (C compiler,
#                                 pkg-config, libibverbs-dev, librdmacm-dev) and PKG ...,
#                                 those missing only; set GO to a go command
#   host_build_cgo OUT PKG [FLAG ...]  go build [FLAG ...] -o OUT PKG (a main package, cgo
#                                 over rdma-core) and check that OUT links librdmacm
#   host_daemon_image BIN [FLAG ...]  host_build_deps, the work directories (bin, logs, run),
#                                 srptarget built as BIN (go build FLAG ...), the image
#   host_daemon_run NAME SECONDS [K=V ...]  host_daemon_image $VMDIR/bin/srptarget-NAME, then
#                                 guest/NAME.sh in the VM with that binary as srptarget, for
#                                 SECONDS (SRPT_VM_TIMEOUT wins); exec, so its status is
#                                 run-vm.sh's
#   host_checks_build             the guest checks (integration/vm/guest/checks: go test -c
#                                 -tags vmguest, static) as $VMDIR/bin/checks.test; sets
#                                 CHECKS_FILES for SRPT_VM_FILES
#   host_checks_run NAME TEST SECONDS [K=V ...]  host_daemon_image $VMDIR/bin/srptarget-NAME and
#                                 host_checks_build, then TestTEST of the checks in the VM with
#                                 that binary as srptarget, for SECONDS (SRPT_VM_TIMEOUT wins),
#                                 its console in $VMDIR/logs/NAME-<time>.log; exec, so its status
#                                 is run-vm.sh's
#   host_keep_logs NAME LOG       the daemon's lines of a console log (srptarget[N]| ...) into
#                                 LOG's .daemon.log, and $VMDIR/logs/NAME-latest.* linked to
#                                 LOG's files
#   host_summary NAME RESULTS RC  "NAME: N checks passed, M failed; guest rc RC" and the failed
#                                 rows of a result table; sets PASSED and FAILED
#   host_vm_checks NAME GUEST [K=V ...]  GUEST (a guest script) in the VM, the files of
#                                 SRPT_VM_FILES with it, its console in $VMDIR/logs/NAME-<time>.log;
#                                 then the count of passed and failed checks, the result rows
#                                 matching HOST_VM_SUMMARY (grep -E; none by default) and the
#                                 failed ones; exits with the guest's status
#   host_bench_prepare NAME       for a bench: gnuplot, OUT=$VMDIR/bench/NAME, the daemon built
#                                 into OUT as BIN (go tool pprof symbolizes the profiles with
#                                 it), the image
#   host_bench_setup OUT QEMU [ARG ...]  OUT/setup.txt begun (date, host CPU and kernel,
#                                 QEMU: how the VMs run, the commit, the guest arguments) and
#                                 OUT/hostload.txt written every 5 s in the background
#                                 (HOST_SAMPLER, its PID) until host_bench_load_summary
#   host_bench_load_summary OUT   stop the sampler; the load during the run into setup.txt
#   host_bench_report OUT TITLE WHOSE [FLAG ...]  the report of a bench run in OUT (raw.txt,
#                                 info.txt, setup.txt, the profiles; the binary in $BIN):
#                                 ./integration/vm/bench with FLAG ..., the chart, the top of
#                                 each profile (of WHOSE daemon) and setup.txt printed
#   host_ceph_vm BIN              for the runs with a Ceph cluster in the guest (e2e-rbd.sh,
#                                 gateways.sh; SRPT_VM_CEPH=1 and their own SRPT_VM_DIR): librbd's
#                                 development files, srptarget with -tags rbd as BIN and rbdctl,
#                                 the image; sets CEPH_VM_FILES for SRPT_VM_FILES
#
# Exit status 3 (through die) when the build cannot be done, as the scripts document.

host_init() {
	HOST_NAME=$1
	export SRPT_VM_DIR=${SRPT_VM_DIR:-${2:-/tmp/srptarget-vm}}
	VMDIR=$SRPT_VM_DIR
	REPO=$(cd "$HERE/../.." && pwd)
	HOST_T0US=${EPOCHREALTIME/./}
	host_root
}

# shellcheck disable=SC2317 # called by the scripts and by the functions below
elapsed() {
	local d=$(((${EPOCHREALTIME/./} - HOST_T0US) / 1000))
	printf '%d.%01d' $((d / 1000)) $((d % 1000 / 100))
}
secs_since() { awk -v a="$1" -v b="$(elapsed)" 'BEGIN { printf "%.1f", b - a }'; }
log() { printf '[%s %6ss] %s\n' "$HOST_NAME" "$(elapsed)" "$*"; }
host_timed() {
	local _var=$1 _t
	shift
	_t=$(elapsed)
	"$@"
	printf -v "$_var" '%s' "$(secs_since "$_t")"
}
die() {
	echo "$HOST_NAME.sh: error: $1" >&2
	exit "${2:-2}"
}

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

host_daemon_image() {
	local bin=$1
	shift
	host_build_deps
	mkdir -p "$VMDIR/bin" "$VMDIR/logs" "$VMDIR/run"
	log "go build${*:+ $*} -o $bin ./cmd/srptarget"
	host_build_cgo "$bin" ./cmd/srptarget "$@"
	"$HERE/build-image.sh"
}

host_daemon_run() {
	local name=$1 seconds=$2 bin=$VMDIR/bin/srptarget-$1
	shift 2
	host_daemon_image "$bin"
	SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-$seconds} SRPT_VM_FILES="$bin:/usr/local/bin/srptarget" \
		exec "$HERE/run-vm.sh" "$HERE/guest/$name.sh" "$@"
}

host_checks_build() {
	CHECKS_BIN=$VMDIR/bin/checks.test
	mkdir -p "$VMDIR/bin"
	log "go test -c -tags vmguest -o $CHECKS_BIN ./integration/vm/guest/checks"
	(cd "$REPO" && CGO_ENABLED=0 "$GO" test -c -tags vmguest -o "$CHECKS_BIN" ./integration/vm/guest/checks) ||
		die "building the guest checks failed" 3
	CHECKS_FILES="$CHECKS_BIN:/usr/local/bin/checks.test"
}

host_checks_run() {
	local name=$1 test=$2 seconds=$3 bin=$VMDIR/bin/srptarget-$1
	shift 3
	host_daemon_image "$bin"
	host_checks_build
	SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-$seconds} SRPT_VM_FILES="$bin:/usr/local/bin/srptarget $CHECKS_FILES" \
		SRPT_VM_LOG=${SRPT_VM_LOG:-$VMDIR/logs/$name-$(date +%Y%m%d-%H%M%S).log} \
		exec "$HERE/run-vm.sh" "$HERE/guest/checks.sh" "test=$test" "$@"
}

host_keep_logs() {
	local name=$1 log=$2 f
	sed -n 's/^\[ *[0-9.]*\] \(srptarget\[[0-9]*\]\)| /\1 /p' "$log" >"${log%.log}.daemon.log" 2>/dev/null || true
	for f in "$log" "${log%.log}.results" "${log%.log}.daemon.log"; do
		[ -e "$f" ] && ln -sfn "$(basename "$f")" "$VMDIR/logs/$name-latest${f#"${log%.log}"}"
	done
	return 0
}

host_summary() {
	local name=$1 results=$2 rc=$3
	PASSED=$(grep -c '^[^|]*|pass|' "$results" 2>/dev/null || true)
	FAILED=$(grep -c '^[^|]*|fail|' "$results" 2>/dev/null || true)
	PASSED=${PASSED:-0} FAILED=${FAILED:-0}
	echo "$name: $PASSED checks passed, $FAILED failed; guest rc $rc"
	[ "$FAILED" = 0 ] && return 0
	echo "$name: failed checks:"
	grep '^[^|]*|fail|' "$results" | awk -F'|' '{ printf "  %s: %s\n", $1, substr($0, length($1) + length($2) + 3) }'
}

host_vm_checks() {
	local name=$1 guest=$2 log results rc=0
	shift 2
	log=$VMDIR/logs/$name-$(date +%Y%m%d-%H%M%S).log
	results=${log%.log}.results
	SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-900} SRPT_VM_LOG="$log" "$HERE/run-vm.sh" "$guest" "$@" || rc=$?
	host_summary "$name" "$results" "$rc"
	[ -z "${HOST_VM_SUMMARY:-}" ] || grep -E "$HOST_VM_SUMMARY" "$results" 2>/dev/null | sed 's/^/  /' || true
	echo "$name: serial log $log"
	exit "$rc"
}

host_bench_prepare() {
	host_build_deps gnuplot-nox:gnuplot
	OUT=$VMDIR/bench/$1
	mkdir -p "$OUT" "$VMDIR/run"
	BIN=$OUT/srptarget
	log "go build -o $BIN ./cmd/srptarget"
	host_build_cgo "$BIN" ./cmd/srptarget
	"$HERE/build-image.sh"
}

host_bench_setup() {
	local out=$1 qemu=$2
	shift 2
	{
		echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
		echo "host cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cpus"
		echo "host kernel: $(uname -r)"
		echo "qemu: $(qemu-system-x86_64 --version | head -1), $qemu"
		echo "srptarget: $(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo unknown)"
		echo "guest arguments: ${*:-(defaults)}"
	} >"$out/setup.txt"
	# The host's load, the number of qemu processes (other engineers' VMs included) and the
	# share of the host's CPU time busy over the last 5 s (busy=, all CPUs together) while the
	# VMs run, to tell a quiet run from a disturbed one, and a run the host's CPUs bound.
	(
		prev=()
		while :; do
			read -r _ u n s i w q sq st _ </proc/stat
			cur=($((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st)))
			busy=
			if [ ${#prev[@]} = 2 ] && [ "${cur[1]}" -gt "${prev[1]}" ]; then
				busy=" busy=$(((cur[0] - prev[0]) * 100 / (cur[1] - prev[1])))%"
			fi
			prev=("${cur[@]}")
			echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg) qemu=$(pgrep -c -f '^qemu-system-x86_64' || true)$busy"
			sleep 5
		done
	) >"$out/hostload.txt" 2>/dev/null &
	HOST_SAMPLER=$!
}

host_bench_load_summary() {
	kill "$HOST_SAMPLER" 2>/dev/null || true
	awk '{ l = $2 + 0; if (n == 0 || l < lo) lo = l; if (l > hi) hi = l; s += l; n++
		q = $5; sub(/qemu=/, "", q); if (q + 0 > mq) mq = q + 0
		if ($6 ~ /^busy=/) { b = $6; gsub(/[^0-9]/, "", b); bs += b; bn++ } }
		END { if (n) printf "host load average (1 min) during the run: %.2f-%.2f, mean %.2f over %d samples; at most %d qemu processes at once (ours included)", lo, hi, s / n, n, mq
			if (bn) printf "; host CPUs busy %.0f %% of the time (mean of %d 5 s samples)", bs / bn, bn
			if (n) printf "\n" }' \
		"$1/hostload.txt" >>"$1/setup.txt"
}

host_bench_report() {
	local out=$1 title=$2 whose=$3 terminal prof ch
	shift 3
	terminal="set terminal pngcairo size 1950,1150 font 'DejaVu Sans,11'"
	gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo || terminal="set terminal png size 1950,1150"
	echo
	(cd "$REPO" && "$GO" run ./integration/vm/bench -raw "$out/raw.txt" -info "$out/info.txt" -out "$out" \
		"$@" -title "$title" -terminal "$terminal") || die "the report failed" 4
	if command -v gnuplot >/dev/null; then
		(cd "$out" && gnuplot chart.gp) || log "gnuplot failed: no chart.png"
	fi
	for prof in "$out"/srptarget.cpu.ch*.pprof; do
		[ -s "$prof" ] || continue
		ch=${prof%.pprof}
		ch=${ch##*.}
		(cd "$REPO" && "$GO" tool pprof -top -nodecount=20 "$BIN" "$prof" >"$out/pprof-top20.$ch.txt" 2>&1) ||
			log "go tool pprof $prof failed"
		(cd "$REPO" && "$GO" tool pprof -top -cum -nodecount=30 "$BIN" "$prof" >"$out/pprof-cum.$ch.txt" 2>&1) || true
		echo
		echo "CPU profile of $whose, $ch ($prof), top 20:"
		cat "$out/pprof-top20.$ch.txt"
	done
	echo
	cat "$out/setup.txt"
	echo
}

host_ceph_vm() {
	local bin=$1
	host_build_deps librbd-dev librados-dev
	mkdir -p "$VMDIR/bin"
	# Seed the package cache from the shared work directory's: hard links, no download.
	[ -d "$VMDIR/debs" ] || { [ -d /tmp/srptarget-vm/debs ] && cp -al /tmp/srptarget-vm/debs "$VMDIR/"; } || true
	(cd "$REPO" && "$GO" build -tags rbd -o "$VMDIR/bin/rbdctl" ./integration/ceph/rbdctl) || die "building rbdctl failed" 3
	host_daemon_image "$bin" -tags rbd
	# shellcheck disable=SC2034 # read by the caller
	CEPH_VM_FILES="$bin:/usr/local/bin/srptarget $VMDIR/bin/rbdctl:/usr/local/bin/rbdctl $HERE/guest/ceph-lib.sh:/lab/ceph-lib.sh $REPO/integration/ceph/conf.sh:/lab/ceph-conf.sh"
}
