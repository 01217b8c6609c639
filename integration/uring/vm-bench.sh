#!/usr/bin/env bash
# vm-bench.sh - bench.sh's comparison in the test VM, where the shared host's load does not
# reach the guest's own CPU accounting the way it reaches the host's (`make bench-uring-vm`):
# the backstore.Queue (BenchmarkQueueRandRead4K), fio's io_uring engine
# (BenchmarkFioRandRead4K) and the whole engine with a file LUN (BenchmarkFileLUNRandRead4K,
# io_uring) read random 4 KiB blocks at QD 32 from one 128 MiB file on tmpfs and on ext4,
# buffered and with O_DIRECT, each pinned to the same vCPU, rounds alternating
# (integration/vm/guest/uring-bench.sh). Prints summary.awk's medians and keeps the raw lines
# in $SRPT_VM_DIR/uring-bench/<date-time>.txt. The times are TCG's: compare ratios, not
# absolute figures.
#
#   SRPT_VM_DIR=/tmp/srpt-vm-me flock /tmp/srpt-vm.lock integration/uring/vm-bench.sh \
#       [rounds=3 ios=100000 cpu=1 benches="Queue Fio Engine" fss="tmpfs ext4" directs="0 1"]
#
# SRPT_URING_BASE_SRC=DIR also builds package srp's benchmarks from the checkout DIR (another
# commit) for the guest's EngineBase runs: benches="Queue Fio Engine EngineBase" compares the
# two in one boot. SRPT_URING_INSN=1 runs the VM with the qemu plugin integration/vm/insn/insn.c
# and adds the guest's instructions per I/O of each run (insn.awk), which host load does not
# move as it moves TCG's times. Needs the VM image (integration/vm/build-image.sh; built when missing). Exit status: the
# guest script's (run-vm.sh), 3 when a build fails.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM=$HERE/../vm
# shellcheck source=../vm/host-lib.sh
HERE=$VM . "$VM/host-lib.sh"
host_init uring-bench
GO=${GO:-go}
mkdir -p "$VMDIR/bin" "$VMDIR/uring-bench"
for p in backstore srp; do
	log "go test -c -o $VMDIR/bin/$p.test ./$p"
	(cd "$REPO" && CGO_ENABLED=0 "$GO" test -c -o "$VMDIR/bin/$p.test" "./$p") || die "building $p.test failed" 3
done
files="$VMDIR/bin/backstore.test:/usr/local/bin/backstore.test $VMDIR/bin/srp.test:/usr/local/bin/srp.test"
if [ -n "${SRPT_URING_BASE_SRC:-}" ]; then
	log "go test -c -o $VMDIR/bin/srp-base.test ./srp in $SRPT_URING_BASE_SRC"
	(cd "$SRPT_URING_BASE_SRC" && CGO_ENABLED=0 "$GO" test -c -o "$VMDIR/bin/srp-base.test" ./srp) || die "building the base srp.test failed" 3
	files+=" $VMDIR/bin/srp-base.test:/usr/local/bin/srp-base.test"
fi
"$VM/build-image.sh"
stamp=$(date -u +%Y%m%d-%H%M%S)
out=$VMDIR/uring-bench/$stamp.txt
log=$VMDIR/logs/uring-bench-$stamp.log
plugin=
if [ "${SRPT_URING_INSN:-0}" = 1 ]; then
	case $VMDIR in *,*) die "the plugin's paths cannot hold a comma: $VMDIR" ;; esac
	${CC:-cc} -O2 -Wall -Wextra -shared -fPIC -fvisibility=hidden -o "$VMDIR/bin/insn.so" "$VM/insn/insn.c" -lpthread ||
		die "cannot build the qemu plugin insn/insn.c" 3
	plugin=$VMDIR/bin/insn.so,out=${out%.txt}.insn.txt,interval=100
fi
rc=0
SRPT_VM_PLUGIN=$plugin SRPT_VM_TIMEOUT=${SRPT_VM_TIMEOUT:-3000} SRPT_VM_LOG=$log \
	SRPT_VM_FILES="$files" \
	"$VM/run-vm.sh" "$VM/guest/uring-bench.sh" "$@" || rc=$?
{
	echo "host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, load at the end $(cut -d' ' -f1-3 /proc/loadavg); srptarget $(cd "$REPO" && git describe --always --dirty)"
	grep -a 'URINGINFO ' "$log" | sed -E 's/^.*URINGINFO //' || true
	grep -a 'URINGBENCH ' "$log" | sed -E 's/^.*URINGBENCH //' | sort -k1,1 -k2,2 -k3,3 | awk -f "$HERE/summary.awk"
	if [ -n "$plugin" ]; then
		echo
		echo "Guest instructions per I/O (both vCPUs, kernel + user, net of idle; the whole process of each run, its start and set-up included; qemu plugin insn.c):"
		awk -f "$HERE/insn.awk" "${out%.txt}.insn.txt" "$log"
	fi
	echo "(medians; raw: one line per run below, in the order run)"
	grep -a 'URINGBENCH ' "$log" | sed -E 's/^.*URINGBENCH //'
} >"$out"
cat "$out"
# the Go CPU profiles of the last round's Engine runs, with the top of each
for c in $(grep -a 'URINGPROF ' "$log" | sed -E 's/^.*URINGPROF ([a-z0-9]+) ([01]) .*$/\1.\2/' | sort -u); do
	prof=${out%.txt}.engine.$c.pprof
	grep -a "URINGPROF ${c%.*} ${c#*.} " "$log" | sed -E 's/^.*URINGPROF [a-z0-9]+ [01] //' | tr -d '\r' | base64 -d >"$prof" || continue
	echo
	echo "Engine's CPU profile, ${c%.*} O_DIRECT=${c#*.} ($prof), top 25:"
	(cd "$REPO" && "$GO" tool pprof -top -nodecount=25 "$VMDIR/bin/srp.test" "$prof" 2>&1 | tee "${prof%.pprof}.top.txt") || true
done
echo "uring-bench: $out (console: $log)"
exit $rc
