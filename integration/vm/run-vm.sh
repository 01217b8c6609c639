#!/usr/bin/env bash
# run-vm.sh - boot the srptarget test VM (qemu, TCG, no network card) and run
# one guest test script in it.
#
#   integration/vm/run-vm.sh GUEST_SCRIPT [k=v ...]
#
# GUEST_SCRIPT becomes /lab/test.sh in the guest, guest/lib.sh /lab/lib.sh,
# guest/multipath.conf /lab/multipath.conf and guest/init /init; the k=v arguments are written to /lab/args for the script
# (lib.sh: `arg NAME DEFAULT`). These go in a second cpio archive appended to
# the base image from build-image.sh, so the image needs no rebuild when a
# guest script changes.
#
# Exit status: the guest test's (from the console line "SRPTVM: test finished
# rc=N"); 124 if the run timed out, 125 if the kernel panicked or the VM
# stopped without that line; 2 for usage errors.
#
# Environment:
#   SRPT_VM_DIR        work directory (default /tmp/srptarget-vm); the image is
#                      read from $SRPT_VM_DIR/image, logs go to $SRPT_VM_DIR/logs
#   SRPT_VM_FILES      extra files, "host_path:guest_path ..." (space separated;
#                      guest_path absolute; without ":guest_path" the file goes
#                      to /lab/), e.g.
#                      "bin/srptarget:/usr/local/bin/srptarget e2e.yaml:/etc/srptarget.yaml"
#   SRPT_VM_TIMEOUT    seconds for the whole run (default 900); the guest stops
#                      its test 60 s earlier (below 150: after half of it) and
#                      dumps diagnostics
#   SRPT_VM_SMP        vCPUs (2)      SRPT_VM_MEM   memory (3G)
#   SRPT_VM_NIC        none (default: no network card), or one virtio NIC on a
#                      link between two VMs (bench-2host.sh): unix-server:PATH:MAC
#                      in the first VM, unix-client:PATH:MAC in the second, a qemu
#                      "stream" netdev over the Unix socket PATH (qemu-options(7),
#                      -netdev stream). Not the TCP "socket" netdev (Nagle and
#                      delayed ACKs put ~40 ms into small exchanges) nor UDP (frames
#                      dropped under load, which soft-RoCE recovers from slowly)
#   SRPT_VM_CPU        qemu CPU model (qemu64: faster than "max" under TCG
#                      for the rxe data path, see README.md)
#   SRPT_VM_APPEND     extra kernel command line
#   SRPT_VM_PLUGIN     a qemu TCG plugin and its arguments, "lib.so,k=v,..." (qemu's
#                      -plugin; insn/insn.c, the two-host bench's instruction counts)
#   SRPT_VM_LOG        log file (default $SRPT_VM_DIR/logs/<script>-<time>.log)
#   SRPT_VM_VERBOSE=1  copy the whole console to stdout (default: only the
#                      progress and check lines)
#   SRPT_VM_INTERACTIVE=1  console on this terminal, no log (Ctrl-A x quits
#                      qemu); with shell=1 a shell starts after the test
#   SRPT_VM_RUN_LOCK   the lock every VM run holds shared while qemu runs and
#                      bench.sh holds exclusively (default /tmp/srpt-vm-run.lock;
#                      empty: none), so that a benchmark never shares the host
#                      with another VM of this harness: it waits for the VMs
#                      running, and VMs started meanwhile wait for it
#   SRPT_VM_RUN_LOCK_HELD=1  the caller already holds that lock (bench.sh, or
#                      stress.sh with SRPT_VM_LOCK): do not take it again
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VMDIR=${SRPT_VM_DIR:-/tmp/srptarget-vm}
IMAGE=$VMDIR/image

usage() { sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 2; }
die() { echo "run-vm.sh: error: $*" >&2; exit 2; }

[ $# -ge 1 ] || usage
case $1 in -h | --help) usage ;; esac
SCRIPT=$1
shift
[ -f "$SCRIPT" ] || die "no such guest script: $SCRIPT"
for a in "$@"; do
	[[ $a =~ ^[A-Za-z_][A-Za-z0-9_.-]*=.*$ ]] || die "argument '$a' is not k=v"
	[[ $a != *$'\n'* ]] || die "argument '$a' has a newline"
done
if [ ! -s "$IMAGE/vmlinuz" ] || [ ! -s "$IMAGE/initramfs.cpio.gz" ]; then
	die "no image in $IMAGE: run integration/vm/build-image.sh first"
fi
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing: run integration/vm/build-image.sh"

TIMEOUT=${SRPT_VM_TIMEOUT:-900}
if ! [[ $TIMEOUT =~ ^[0-9]+$ ]] || [ "$TIMEOUT" -lt 30 ]; then
	die "SRPT_VM_TIMEOUT must be a number of seconds >= 30"
fi
# The guest stops its test first (counting from the test's start, after a boot
# of 10-20 s), so that the log gets the diagnostics and the result table.
GUEST_TIMEOUT=$((TIMEOUT - 60))
[ "$TIMEOUT" -ge 150 ] || GUEST_TIMEOUT=$((TIMEOUT / 2))

name=$(basename "$SCRIPT" .sh)
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p "$VMDIR/logs" "$VMDIR/run"
LOG=${SRPT_VM_LOG:-$VMDIR/logs/$name-$stamp.log}
mkdir -p "$(dirname "$LOG")"

# ------------------------------------------------------------------ overlay cpio
ov=$(mktemp -d "$VMDIR/run/overlay.XXXXXX")
initrd=$ov.initrd
kernel=$ov.vmlinuz
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() { rm -rf "$ov" "$ov.cpio.gz" "$initrd" "$kernel"; }
trap cleanup EXIT
mkdir -p "$ov/lab"
install -m 0755 "$SCRIPT" "$ov/lab/test.sh"
install -m 0644 "$HERE/guest/lib.sh" "$ov/lab/lib.sh"
install -m 0644 "$HERE/guest/multipath.conf" "$ov/lab/multipath.conf"
install -m 0755 "$HERE/guest/init" "$ov/init"
{
	printf '%s\n' "$@"
	# user arguments come first: arg() takes the first match
	echo "guest_timeout=$GUEST_TIMEOUT"
} >"$ov/lab/args"
for spec in ${SRPT_VM_FILES:-}; do
	src=${spec%%:*}
	dst=/lab/$(basename "$src")
	[[ $spec == *:* ]] && dst=${spec#*:}
	[ -e "$src" ] || die "SRPT_VM_FILES: no such file: $src"
	[[ $dst == /* ]] || die "SRPT_VM_FILES: guest path must be absolute: $spec"
	case $dst in
	/proc/* | /sys/* | /dev/* | /run/* | /tmp/*) die "SRPT_VM_FILES: $dst is hidden by a mount in the guest" ;;
	# the image is usr-merged: /bin, /sbin and /lib are symlinks that a
	# directory entry in the overlay archive would replace
	/bin/* | /sbin/* | /lib/*) dst=/usr$dst ;;
	esac
	mkdir -p "$ov$(dirname "$dst")"
	cp -L "$src" "$ov$dst"
done
find "$ov" -type d -exec chmod 0755 {} +
(cd "$ov" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1) >"$ov.cpio.gz"
# Copy kernel and base image under build-image.sh's lock (shared), so that a
# build running at the same time cannot hand this run a kernel and modules
# of different versions.
exec 9>"$VMDIR/.build.lock"
flock -s 9
cp "$IMAGE/vmlinuz" "$kernel"
cat "$IMAGE/initramfs.cpio.gz" "$ov.cpio.gz" >"$initrd"
flock -u 9
exec 9>&-

RUNLOCK=${SRPT_VM_RUN_LOCK-/tmp/srpt-vm-run.lock}
if [ -n "$RUNLOCK" ] && [ -z "${SRPT_VM_RUN_LOCK_HELD:-}" ]; then
	exec 7>>"$RUNLOCK"
	if ! flock -s -n 7; then
		echo "run-vm: waiting for $RUNLOCK (held by a benchmark)"
		flock -s 7
	fi
fi

# ------------------------------------------------------------------ qemu
case ${SRPT_VM_NIC:-none} in
none) NIC=(-nic none) ;;
unix-server:*:* | unix-client:*:*)
	nic_mode=${SRPT_VM_NIC%%:*}
	nic_rest=${SRPT_VM_NIC#*:}
	nic_path=${nic_rest%%:*}
	nic_mac=${nic_rest#*:}
	nic_srv=off
	[ "$nic_mode" = unix-server ] && nic_srv=on
	NIC=(-netdev "stream,id=n0,server=$nic_srv,addr.type=unix,addr.path=$nic_path" -device "virtio-net-pci,netdev=n0,mac=$nic_mac")
	;;
*) die "SRPT_VM_NIC must be none, unix-server:PATH:MAC or unix-client:PATH:MAC" ;;
esac
# oops=panic, softlockup_panic=1 + panic=-1 + -no-reboot: a kernel oops or a CPU stuck in
# the kernel for 20 s ends the run at once instead of leaving a hung guest until the
# timeout; panic_print=0x20 then replays the whole kernel log on the console, with the
# stack traces the checks' console log level hides. log_buf_len: room for debug output.
APPEND="console=ttyS0,115200 panic=-1 oops=panic softlockup_panic=1 panic_print=0x20 mitigations=off nokaslr log_buf_len=4M ${SRPT_VM_APPEND:-}"
# shellcheck disable=SC2054 # the commas belong to qemu options
QEMU=(qemu-system-x86_64
	-machine q35 -accel tcg,thread=multi -cpu "${SRPT_VM_CPU:-qemu64}"
	-smp "${SRPT_VM_SMP:-2}" -m "${SRPT_VM_MEM:-3G}"
	-nographic -no-reboot "${NIC[@]}"
	-kernel "$kernel" -initrd "$initrd"
	-append "$APPEND")
[ -z "${SRPT_VM_PLUGIN:-}" ] || QEMU+=(-plugin "$SRPT_VM_PLUGIN")

if [ -n "${SRPT_VM_INTERACTIVE:-}" ]; then
	"${QEMU[@]}"
	exit $?
fi

now_ms() { echo $(( (${EPOCHREALTIME/./} - T0US) / 1000 )); }
fmt_ms() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

echo "run-vm: $name, log $LOG"
{
	echo "run-vm: ${QEMU[*]}"
	echo "run-vm: args: $* | files: ${SRPT_VM_FILES:-none} | timeout ${TIMEOUT}s"
	echo "run-vm: image key $(cat "$IMAGE/key" 2>/dev/null), $(head -1 "$IMAGE/manifest.txt" 2>/dev/null)"
	echo "run-vm: host load average at start: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) host cpus"
} >"$LOG"
T0US=${EPOCHREALTIME/./}
echo "run-vm: t0 epoch us $T0US" >>"$LOG"
set +e
# Every console line goes to the log with the host time since qemu started;
# progress and check lines (or all, with SRPT_VM_VERBOSE=1) also to stdout.
timeout --foreground -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 |
	while IFS= read -r line; do
		line=${line%$'\r'}
		d=$(( (${EPOCHREALTIME/./} - T0US) / 1000 ))
		printf -v ts '%d.%03d' $((d / 1000)) $((d % 1000))
		printf '[%8s] %s\n' "$ts" "$line" >>"$LOG"
		if [ -n "${SRPT_VM_VERBOSE:-}" ]; then
			printf '[%8s] %s\n' "$ts" "$line"
		else
			case $line in
			"SRPTVM: ---- results"*) ;;
			"SRPTVM: ----"* | "SRPTVM: check"* | "SRPTVM: FAIL"* | "SRPTVM: init reached"* | \
				"SRPTVM: test finished"* | "SRPTVM: guest timeout"* | *"Kernel panic"*)
				printf '[%8s] %s\n' "$ts" "$line"
				;;
			esac
		fi
	done
qrc=${PIPESTATUS[0]}
set -e
wall=$(fmt_ms "$(now_ms)")
echo "run-vm: host load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$LOG"

# ------------------------------------------------------------------ verdict
body() { sed 's/^\[ *[0-9.]*\] //' "$LOG"; }
boot=$(sed -n 's/^\[ *\([0-9.]*\)\] SRPTVM: init reached.*/\1/p' "$LOG" | head -1)
guest_up=$(sed -n 's/.*SRPTVM: init reached, guest uptime \([0-9.]*\) s.*/\1/p' "$LOG" | head -1)
marker=$(body | grep -m1 '^SRPTVM: test finished rc=' || true)
grc=$(sed -n 's/^SRPTVM: test finished rc=\([0-9]*\),.*/\1/p' <<<"$marker")
panic=$(body | grep -m1 'Kernel panic' || true)

RESULTS=${LOG%.log}.results
body | sed -n '/^SRPTVM: ---- results begin/,/^SRPTVM: ---- results end/p' |
	grep -E '^[^|]+\|(pass|fail)\|' >"$RESULTS" || true
if [ -s "$RESULTS" ]; then
	echo "run-vm: results ($RESULTS)"
	awk -F'|' '{ n[NR] = $1; s[NR] = $2; d[NR] = substr($0, length($1) + length($2) + 3)
		if (length($1) > w) w = length($1) }
		END { for (i = 1; i <= NR; i++) printf "  %-*s  %-4s  %s\n", w, n[i], s[i], d[i] }' "$RESULTS"
fi
# kernel lines only (they carry the guest's printk time stamp)
warns=$(body | grep -cE '^\[ *[0-9]+\.[0-9]+\] .*(WARNING: CPU:|BUG: |Oops: |Call Trace:|blocked for more than)' || true)
[ "$warns" -gt 0 ] && echo "run-vm: note: $warns kernel WARNING/BUG/Oops/Call Trace line(s) in the log"

if [ -n "$panic" ]; then
	rc=125
	why="kernel panic: $panic"
elif [ -n "$grc" ]; then
	rc=$grc
	why="guest test rc=$grc"
elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	rc=124
	why="timeout after ${TIMEOUT}s"
else
	rc=125
	why="VM stopped without a test result (qemu exit $qrc)"
	body | tail -20 | sed 's/^/  | /'
fi
echo "run-vm: $name: $why; wall ${wall}s, /init reached after ${boot:-?}s (guest uptime ${guest_up:-?}s); log $LOG" |
	tee -a "$LOG"
exit "$rc"
