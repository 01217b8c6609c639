#!/usr/bin/env bash
# bench-2host.sh - srptarget against LIO ib_srpt on a target host of their own (`make bench`):
# two qemu VMs joined by one virtual Ethernet link, soft-RoCE on each. The target VM
# (guest/bench-2host-target.sh, 1 vCPU) runs LIO ib_srpt and srptarget side by side; the
# initiator VM (guest/bench-2host-init.sh, 2 vCPUs) runs the kernel's ib_srp and the fio
# jobs of the one-VM bench (bench.sh, `make bench-loopback`), alternating between the two
# targets round by round. The target's CPU per I/O comes from the target VM's /proc/stat.
#
# On a 2-core host, 1 vCPU for the target and 2 for the initiator is the shape in which the
# target, not the initiator, runs out of CPU first. The link is qemu's "stream" netdev over
# a Unix socket (run-vm.sh, SRPT_VM_NIC). Both VMs run under `flock /tmp/srpt-vm-run.lock`
# (exclusive, as bench.sh): no other VM of this harness shares the host meanwhile.
#
# Output in $SRPT_VM_DIR/bench/2host-<date-time>/ (bench/latest points to it), as bench.sh's:
#   table.md, summary.csv, runs.csv, chart.png  the report of ./integration/vm/bench; its
#                 CPU columns are the target VM's (busy CPU per I/O over the job's window,
#                 and the daemon's own CPU per I/O for srpt-mem)
#   raw.txt, info.txt           the initiator's BENCH lines and BENCHINFO lines
#   srptarget.cpu.chN.pprof     the daemon's CPU profile over the srptarget block of one
#                               round (guest argument profile_round, default 2), ch_count N;
#   pprof-top20.chN.txt         its top 20 (go tool pprof -top), pprof-cum.chN.txt by
#                               cumulative time; srptarget: the binary, for go tool pprof
#   target-samples.txt          the target's counters, one line per 0.5 s, host clock
#   host-samples.txt            the host's own /proc/stat "cpu" line every 0.5 s (how busy
#                               the machine that runs both VMs was: table.md's bench host busy)
#   init.log, target.log        the two consoles; setup.txt, hostload.txt
#   insn.txt, insn-tb.txt.gz    the target VM's guest instructions (kernel, user) and system
#                               calls, counted by the qemu plugin insn/insn.c (built here
#                               into insn.so) every 0.25 s; per translation block every 1 s
#   kallsyms.gz, srptarget.maps, root/  the target's symbols, the daemon's mappings and the
#                               shared libraries they name (from the image), for
#   insn-functions.txt          the per-function difference against LIO of one job
#                               (SRPT_2HOST_INSN_JOB, default randread-4k-qd32, one channel)
#
#   integration/vm/bench-2host.sh [k=v ...]   # k=v go to both guests, e.g. rounds=5 runtime=8
#
# Environment: GO, SRPT_VM_DIR, SRPT_BENCH_LOCK as in bench.sh;
#   SRPT_2HOST_TARGET_SMP (1), SRPT_2HOST_INIT_SMP (2), SRPT_2HOST_MEM (2G each),
#   SRPT_2HOST_TARGET_CPUS, SRPT_2HOST_INIT_CPUS (host CPUs of each VM, a taskset list; unset:
#   the VMs share the host's CPUs),
#   SRPT_VM_TIMEOUT (seconds for the initiator's run, default 3000),
#   SRPT_2HOST_VARIANT_BIN (with variant=NAME: the variant daemon is this srptarget binary,
#   e.g. a build of another commit, instead of the one built here),
#   SRPT_2HOST_INSN (tb: instruction counts and per-block counts, the default; counts: the
#   counts only, cheaper for the guest; 0: no plugin), SRPT_2HOST_INSN_JOB (the job whose
#   instructions the report attributes to functions)
# Exit status: the initiator's guest test's, 3 when the daemon cannot be built, 4 when the
# VM printed no results.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=host-lib.sh
. "$HERE/host-lib.sh"
host_init bench-2host
LOCK=${SRPT_BENCH_LOCK:-/tmp/srpt-vm-run.lock}
TIMEOUT=${SRPT_VM_TIMEOUT:-3000}

stamp=2host-$(date +%Y%m%d-%H%M%S)
host_bench_prepare "$stamp"

host_bench_setup "$OUT" "TCG; target VM -smp ${SRPT_2HOST_TARGET_SMP:-1}, initiator VM -smp ${SRPT_2HOST_INIT_SMP:-2}, -m ${SRPT_2HOST_MEM:-2G} each, -netdev stream over a Unix socket" "$@"
TPID=
stop_target() {
	[ -n "$TPID" ] || return 0
	# End the target VM: its run-vm.sh runs qemu under timeout(1), which passes SIGTERM on.
	local p
	for p in $(pgrep -P "$TPID" 2>/dev/null); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = timeout ] && kill -TERM "$p" 2>/dev/null
	done
	wait "$TPID" 2>/dev/null || true
	TPID=
}
HOST_CPU_SAMPLER=
trap 'stop_target; kill "$HOST_SAMPLER" $HOST_CPU_SAMPLER 2>/dev/null || true' EXIT

log "waiting for $LOCK (other VM runs)"
exec 8>"$LOCK"
flock 8
log "lock held; host load average $(cut -d' ' -f1-3 /proc/loadavg)"
SOCK=$VMDIR/run/2host-link.sock
rm -f "$SOCK"
common=(SRPT_VM_RUN_LOCK_HELD=1 SRPT_VM_MEM="${SRPT_2HOST_MEM:-2G}")
# The host's own CPU counters every 0.5 s (host-samples.txt, on the initiator's uptime scale
# below): how busy the machine that runs both VMs was during each job.
while :; do
	read -r _ cpu </proc/stat
	echo "HOSTCPU t=$EPOCHREALTIME cpu=${cpu// /,}"
	sleep 0.5
done >"$OUT/host-samples.raw" 2>/dev/null &
HOST_CPU_SAMPLER=$!
# the target's sampler (static, no cgo: the guest has no Go runtime of its own to match)
(cd "$REPO" && CGO_ENABLED=0 "$GO" build -o "$OUT/tgtsample" ./integration/vm/tools/tgtsample) || die "cannot build tgtsample" 3
target_files="$BIN:/usr/local/bin/srptarget $OUT/tgtsample:/lab/tgtsample $HERE/guest/bench-lib.sh:/lab/bench-lib.sh"
target_args=()
# The target VM's instructions, counted by a qemu TCG plugin (insn/insn.c): kernel and user
# apart, system calls, and per translation block for the attribution to functions. Its cost
# to the guest (a counter add per block executed) slows TCG by a few per cent; the time-based
# figures of a run with it compare only with runs with it.
INSN=${SRPT_2HOST_INSN:-tb}
insn_args=() plugin=
case $INSN in
0) ;;
tb | counts)
	case $OUT in *,*) die "the plugin's paths cannot hold a comma: $OUT" ;; esac
	${CC:-cc} -O2 -Wall -Wextra -shared -fPIC -fvisibility=hidden -o "$OUT/insn.so" "$HERE/insn/insn.c" -lpthread ||
		die "cannot build the qemu plugin insn/insn.c" 3
	plugin=$OUT/insn.so,out=$OUT/insn.txt
	insn_args=(insn=1)
	if [ "$INSN" = tb ]; then
		plugin+=,tb=$OUT/insn-tb.txt
		target_args+=(insn_syms=1)
	fi
	echo "instruction counts: qemu plugin insn/insn.c ($INSN), $plugin" >>"$OUT/setup.txt"
	;;
*) die "SRPT_2HOST_INSN must be tb, counts or 0" ;;
esac
if [ -n "${SRPT_2HOST_VARIANT_BIN:-}" ]; then
	[ -x "$SRPT_2HOST_VARIANT_BIN" ] || die "SRPT_2HOST_VARIANT_BIN=$SRPT_2HOST_VARIANT_BIN is not an executable"
	cp "$SRPT_2HOST_VARIANT_BIN" "$OUT/srptarget-variant"
	target_files+=" $OUT/srptarget-variant:/usr/local/bin/srptarget-variant"
	target_args+=(variant_bin=/usr/local/bin/srptarget-variant)
	echo "variant binary: $SRPT_2HOST_VARIANT_BIN ($(sha256sum "$SRPT_2HOST_VARIANT_BIN" | cut -c1-16))" >>"$OUT/setup.txt"
fi
# Host CPUs per VM (SRPT_2HOST_TARGET_CPUS, SRPT_2HOST_INIT_CPUS: taskset lists): unset, the
# two VMs share the host's CPUs, and whatever the target VM leaves idle the initiator VM gets.
pin_target=() pin_init=()
if [ -n "${SRPT_2HOST_TARGET_CPUS:-}" ]; then
	pin_target=(taskset -c "$SRPT_2HOST_TARGET_CPUS")
	echo "target VM on host CPUs $SRPT_2HOST_TARGET_CPUS" >>"$OUT/setup.txt"
fi
if [ -n "${SRPT_2HOST_INIT_CPUS:-}" ]; then
	pin_init=(taskset -c "$SRPT_2HOST_INIT_CPUS")
	echo "initiator VM on host CPUs $SRPT_2HOST_INIT_CPUS" >>"$OUT/setup.txt"
fi
# The target VM runs until stop_target; its own timeout is a backstop.
env "${common[@]}" SRPT_VM_SMP="${SRPT_2HOST_TARGET_SMP:-1}" SRPT_VM_TIMEOUT=$((TIMEOUT + 300)) \
	SRPT_VM_LOG="$OUT/target.log" SRPT_VM_NIC="unix-server:$SOCK:02:00:00:00:00:01" \
	SRPT_VM_FILES="$target_files" SRPT_VM_PLUGIN="$plugin" \
	"${pin_target[@]}" "$HERE/run-vm.sh" "$HERE/guest/bench-2host-target.sh" "$@" "${target_args[@]}" netdev=eth0 mac=02:00:00:00:00:01 \
	ip4=169.254.50.1/16 ip6=fd53:5250::1/64 >"$OUT/target.out" 2>&1 &
TPID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.2; done
[ -S "$SOCK" ] || die "the target VM did not create $SOCK: $(tail -5 "$OUT/target.out")"
rc=0
env "${common[@]}" SRPT_VM_SMP="${SRPT_2HOST_INIT_SMP:-2}" SRPT_VM_TIMEOUT="$TIMEOUT" \
	SRPT_VM_LOG="$OUT/init.log" SRPT_VM_NIC="unix-client:$SOCK:02:00:00:00:00:02" \
	SRPT_VM_FILES="$HERE/guest/bench-lib.sh:/lab/bench-lib.sh" \
	"${pin_init[@]}" "$HERE/run-vm.sh" "$HERE/guest/bench-2host-init.sh" "$@" "${insn_args[@]}" netdev=eth0 mac=02:00:00:00:00:02 \
	ip4=169.254.50.2/16 ip6=fd53:5250::2/64 || rc=$?
stop_target
kill "$HOST_CPU_SAMPLER" 2>/dev/null || true
HOST_CPU_SAMPLER=
flock -u 8
exec 8>&-
host_bench_load_summary "$OUT"
rm -f "$SOCK"

# ------------------------------------------------------------------ results
body() { sed 's/^\[ *[0-9.]*\] //' "$1" | tr -d '\r'; }
body "$OUT/init.log" | sed -n '/^SRPTVM-BENCH: raw begin/,/^SRPTVM-BENCH: raw end/p' | grep '^BENCH ' >"$OUT/raw.txt" || true
{ body "$OUT/init.log"; body "$OUT/target.log"; } | grep '^BENCHINFO ' >"$OUT/info.txt" || true
# clock offset LOG: host epoch seconds minus guest uptime, the smallest over the lines that
# print the uptime (a console line reaches the host after it was written, never before)
offset() {
	local t0
	t0=$(sed -n 's/^run-vm: t0 epoch us \([0-9]*\)$/\1/p' "$1" | head -1)
	tr -d '\r' <"$1" | sed -n 's/^\[ *\([0-9.]*\)\] .*[( ]uptime \([0-9.]*\)[)]*$/\1 \2/p' |
		awk -v t0="$t0" '{ d = t0 / 1e6 + $1 - $2; if (n++ == 0 || d < m) m = d } END { if (n) printf "%.3f", m }'
}
ioff=$(offset "$OUT/init.log")
toff=$(offset "$OUT/target.log")
# files the VMs printed in base64 (the initiator: the CPU profiles; the target: its samples
# and its symbols)
for vm in init target; do
	for name in $(body "$OUT/$vm.log" | sed -n 's/^SRPTVM-BENCH: file begin \([A-Za-z0-9._-]*\)$/\1/p'); do
		body "$OUT/$vm.log" | sed -n "/^SRPTVM-BENCH: file begin $name\$/,/^SRPTVM-BENCH: file end $name\$/p" | sed '1d;$d' |
			base64 -d >"$OUT/$name" || log "$name in the $vm console log does not decode"
	done
done
# target samples on the initiator's uptime scale: up + toff - ioff
{ zcat "$OUT/target-samples.gz" 2>/dev/null || body "$OUT/target.log"; } |
	awk -v d="$(awk -v a="$toff" -v b="$ioff" 'BEGIN { printf "%.3f", a - b }')" '
	$1 == "TGTCPU" { sub(/^up=/, "", $2); $2 = sprintf("up=%.3f", $2 + d); print }' >"$OUT/target-samples.txt"
# host samples on the same scale: host epoch - ioff
awk -v d="$ioff" '$1 == "HOSTCPU" && d != "" { sub(/^t=/, "", $2); $2 = sprintf("up=%.3f", $2 - d); print }' \
	"$OUT/host-samples.raw" >"$OUT/host-samples.txt" 2>/dev/null || true
echo "clock offsets (host epoch - guest uptime): initiator $ioff s, target $toff s" >>"$OUT/setup.txt"
sed 's/^BENCHINFO /guest /' "$OUT/info.txt" >>"$OUT/setup.txt"
# A clocksource the guest kernel changed after start-up (its watchdog found the TSC unstable,
# say, and switched to the HPET) changes what every clock read costs from then on, for one
# target's blocks and not another's: said in setup.txt with when (the kernel's uptime; the
# first job starts after 20 s or more, the start-up's own switches come in its first 4 s).
for vm in target init; do
	body "$OUT/$vm.log" | awk -v vm="$vm" '
		/clocksource: Switched to clocksource|Marking TSC unstable/ {
			t = $0; sub(/^\[ */, "", t); sub(/\].*/, "", t)
			if (t + 0 > 10) { m = $0; sub(/^\[[^]]*\] */, "", m); printf "clocksource changed on the %s VM at its uptime %d s: %s\n", vm, t, m }
		}'
done | tee -a "$OUT/setup.txt"
# the shared libraries the daemon maps, from the image, for their symbols
insn_flags=()
if [ -s "$OUT/insn.txt" ]; then
	insn_flags=(-insn "$OUT/insn.txt" -insn-offset "$ioff")
	if [ -s "$OUT/insn-tb.txt" ] && [ -s "$OUT/kallsyms.gz" ] && [ -s "$OUT/srptarget.maps" ]; then
		mkdir -p "$OUT/root"
		awk '$6 ~ /^\// && $6 != "/usr/local/bin/srptarget" { print substr($6, 2) }' "$OUT/srptarget.maps" | sort -u >"$OUT/root.list"
		(cd "$OUT/root" && zcat "$VMDIR/image/initramfs.cpio.gz" | cpio -idm --quiet -E "$OUT/root.list" 2>/dev/null) || true
		insn_flags+=(-insn-tb "$OUT/insn-tb.txt" -ksyms "$OUT/kallsyms.gz" -maps "$OUT/srptarget.maps"
			-bin "$BIN" -root "$OUT/root" -insn-job "${SRPT_2HOST_INSN_JOB:-randread-4k-qd32}")
	fi
fi
ln -sfn "$stamp" "$VMDIR/bench/latest"
if [ ! -s "$OUT/raw.txt" ] || [ -z "$ioff" ] || [ -z "$toff" ]; then
	echo "bench-2host: the VMs printed no results (initiator rc $rc); consoles $OUT/init.log $OUT/target.log"
	[ "$rc" = 0 ] && rc=4
	exit "$rc"
fi
host_bench_report "$OUT" "srptarget vs LIO ib_srpt, target on its own VM (1 vCPU), soft-RoCE, qemu TCG, $(date -u +%Y-%m-%d)" \
	"the daemon on the target host" -target-samples "$OUT/target-samples.txt" -host-samples "$OUT/host-samples.txt" "${insn_flags[@]}"
[ ! -s "$OUT/insn-tb.txt" ] || gzip -1f "$OUT/insn-tb.txt"
echo "bench-2host: results in $OUT (initiator rc $rc)"
exit "$rc"
