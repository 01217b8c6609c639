#!/usr/bin/env bash
# bench.sh - srptarget against LIO ib_srpt in one VM boot (`make bench-vm`): the same
# fio jobs, the same rxe device, the same ib_srp settings, the targets alternating round
# by round (guest/bench.sh has the details). Builds the daemon and the VM image, runs the
# VM under `flock /tmp/srpt-vm-run.lock` (every run-vm.sh holds it shared while its VM
# runs) so that two VMs on the machine do not measure each other, and writes into
# $SRPT_VM_DIR/bench/<date-time>/:
#
#   table.md      medians, minimum-maximum and the ratio srptarget/LIO per job (printed),
#                 a column per target: LIO, srptarget's memory and null LUN, each once
#                 per completion mode with srpt_modes="event adaptive poll" (below)
#   runs.csv      every fio run: IOPS, MiB/s, latency, CPU per I/O, idle
#   summary.csv   median/min/max/n and ratio per job, ch_count and target
#   chart.png     the same as bars (gnuplot; chart.gp and *.dat beside it)
#   srptarget.cpu.chN.pprof   CPU profiles of the daemon during one round (ch_count N;
#                             serve --cpuprofile, SIGUSR1/SIGUSR2 around the round; the
#                             daemon of the first srpt_modes entry, or profile_mode=),
#   pprof-top20.chN.txt       their top 20 (go tool pprof -top), pprof-cum.chN.txt by
#                             cumulative time; srptarget: the binary, for go tool pprof
#   setup.txt     host CPU, load, qemu, guest kernel, fio, ib_srp parameters, job parameters
#   hostload.txt  host load average and number of qemu processes every 5 s
#   console.log, console.results, raw.txt, info.txt, daemon.log
#   ($SRPT_VM_DIR/bench/latest points to the last run)
#
#   integration/vm/bench.sh [k=v ...]      # k=v go to guest/bench.sh, e.g. rounds=5 runtime=8
#   integration/vm/bench.sh srpt_modes="event adaptive poll"   # a daemon per completion mode
#
# srpt_modes (guest/bench.sh): srptarget's limits.completion modes to compare, one daemon
# each, in one boot, each against the same LIO blocks: adaptive (the default), event, poll,
# MODE:WINDOW to set limits.poll_window (adaptive:20us), or MODE:WINDOW:pN to run that
# daemon with GOMAXPROCS=N (adaptive:2ms:p1). With one mode the targets are srpt-mem and
# srpt-null, as before; with several srpt-mem-NAME and srpt-null-NAME, NAME being the
# entry without colons (adaptive:20us: srpt-mem-adaptive20us).
#
# Needs what e2e.sh needs (root, Debian 12, Go, libibverbs-dev, librdmacm-dev, missing
# packages are installed with apt-get), plus gnuplot-nox for the chart.
#
# Environment:
#   GO                   the go command (default: go in PATH, else /usr/local/go/bin/go)
#   SRPT_VM_DIR          work directory (default /tmp/srptarget-vm)
#   SRPT_VM_TIMEOUT      seconds for the VM run (default 2400, plus 900 per srpt_modes
#                        entry beyond the first: a daemon adds about 9 min to a run with
#                        the default rounds, jobs and ch_counts)
#   SRPT_BENCH_PROFILE   1 (default): profile one round (guest argument profile=1);
#                        0: no profile (profile=0, whatever the arguments say)
#   SRPT_BENCH_LOCK      lock file shared with other VM runs (default /tmp/srpt-vm-run.lock)
#   other SRPT_VM_* variables as in run-vm.sh
# Exit status: the guest test's (run-vm.sh), 3 when the daemon cannot be built, 4 when
# the VM printed no results.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init bench
PROFILE=${SRPT_BENCH_PROFILE:-1}
LOCK=${SRPT_BENCH_LOCK:-/tmp/srpt-vm-run.lock}
# The guest's arg() takes the first profile=, so this one wins.
[ "$PROFILE" = 1 ] || set -- profile=0 "$@"

# ------------------------------------------------------------------ packages, the daemon, the image
# The guest profiles the daemon with its own `serve --cpuprofile`.
stamp=$(date +%Y%m%d-%H%M%S)
host_bench_prepare "$stamp"

# ------------------------------------------------------------------ the run
# Each more completion mode adds a third of the fio runs of a default run (and its prefill).
nmodes=1
for a in "$@"; do
	case $a in srpt_modes=*)
		read -r -a m <<<"${a#srpt_modes=}"
		nmodes=${#m[@]}
		break
		;;
	esac
done
TIMEOUT=${SRPT_VM_TIMEOUT:-$((2400 + 900 * (nmodes > 1 ? nmodes - 1 : 0)))}
host_bench_setup "$OUT" "TCG (-accel tcg,thread=multi), -cpu ${SRPT_VM_CPU:-qemu64} -smp ${SRPT_VM_SMP:-2} -m ${SRPT_VM_MEM:-3G}" "$@"
echo "SRPT_BENCH_PROFILE=$PROFILE" >>"$OUT/setup.txt"
trap 'kill "$HOST_SAMPLER" 2>/dev/null || true' EXIT

log "waiting for $LOCK (other VM runs)"
rc=0
exec 8>"$LOCK"
flock 8
log "lock held; host load average $(cut -d' ' -f1-3 /proc/loadavg); VM run: guest/bench.sh $*"
echo "host load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/setup.txt"
SRPT_VM_RUN_LOCK_HELD=1 SRPT_VM_TIMEOUT=$TIMEOUT SRPT_VM_LOG="$OUT/console.log" \
	SRPT_VM_FILES="$BIN:/usr/local/bin/srptarget $HERE/guest/bench-lib.sh:/lab/bench-lib.sh" \
	"$HERE/run-vm.sh" "$HERE/guest/bench.sh" "$@" || rc=$?
echo "host load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/setup.txt"
flock -u 8
exec 8>&-
host_bench_load_summary "$OUT"

# ------------------------------------------------------------------ results
body() { sed 's/^\[ *[0-9.]*\] //' "$OUT/console.log" | tr -d '\r'; }
body | sed -n '/^SRPTVM-BENCH: raw begin/,/^SRPTVM-BENCH: raw end/p' | grep '^BENCH ' >"$OUT/raw.txt" || true
body | grep '^BENCHINFO ' >"$OUT/info.txt" || true
body | sed -n '/^SRPTVM-BENCH: daemon log begin/,/^SRPTVM-BENCH: daemon log end/p' | sed '1d;$d' >"$OUT/daemon.log" || true
# files the guest printed in base64 (the CPU profiles)
for name in $(body | sed -n 's/^SRPTVM-BENCH: file begin \([A-Za-z0-9._-]*\)$/\1/p'); do
	body | sed -n "/^SRPTVM-BENCH: file begin $name\$/,/^SRPTVM-BENCH: file end $name\$/p" | sed '1d;$d' |
		base64 -d >"$OUT/$name" || log "$name in the console log does not decode"
done
sed 's/^BENCHINFO /guest /' "$OUT/info.txt" >>"$OUT/setup.txt"
ln -sfn "$stamp" "$VMDIR/bench/latest"

if [ ! -s "$OUT/raw.txt" ] || [ ! -s "$OUT/info.txt" ]; then
	echo "bench: the VM printed no results (guest rc $rc); console log $OUT/console.log"
	[ "$rc" = 0 ] && rc=4
	exit "$rc"
fi

host_bench_report "$OUT" "srptarget vs LIO ib_srpt over soft-RoCE, qemu TCG, $(date -u +%Y-%m-%d)" "the daemon"
echo "bench: results in $OUT (guest rc $rc, $(elapsed) s)"
[ -e "$OUT/chart.png" ] && echo "bench: chart $OUT/chart.png"
exit "$rc"
