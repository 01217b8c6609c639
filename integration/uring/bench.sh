#!/usr/bin/env bash
# bench.sh - the file backstore's asynchronous queue (backstore.Queue, io_uring) against fio's
# io_uring engine (`make bench-uring`): 4 KiB random reads at queue depth 32 from one 256 MiB
# file, on tmpfs and on ext4 in a loop-mounted image file, buffered and with O_DIRECT. The Go
# benchmark (BenchmarkQueueRandRead4K, the queue driven by one loop), fio
# (BenchmarkFioRandRead4K runs it) and today's worker path (BenchmarkReadAtRandRead4K: 32
# goroutines, each a blocking pread at a time) take turns, pinned to the same CPU, on the
# same file, and so does the whole engine with a file LUN on that file
# (BenchmarkFileLUNRandRead4K in package srp: initiator, memfabric, target, the poll group's
# io_uring or the sync engine's workers); each reports IOPS and the CPU time (user + system,
# the whole process with the kernel's io_uring workers) per I/O. Prints the medians, Queue /
# fio and engine / fio per case. Needs root (mounts) and fio (installed with apt-get when
# missing).
#
#   integration/uring/bench.sh            # SRPT_URING_CPU=1 SRPT_URING_ROUNDS=5 SRPT_URING_IOS=1000000
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
GO=${GO:-go}
CPU=${SRPT_URING_CPU:-1}
ROUNDS=${SRPT_URING_ROUNDS:-5}
IOS=${SRPT_URING_IOS:-1000000}

[ "$(id -u)" = 0 ] || { echo "bench.sh: needs root (tmpfs and loop mounts)" >&2; exit 2; }
command -v fio >/dev/null || apt-get install -y -qq fio >/dev/null
command -v mkfs.ext4 >/dev/null || apt-get install -y -qq e2fsprogs >/dev/null

work=$(mktemp -d /tmp/srpt-uring.XXXXXX)
cleanup() {
	umount "$work/ext4" 2>/dev/null || true
	umount "$work/tmpfs" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/tmpfs" "$work/ext4"
mount -t tmpfs -o size=300M tmpfs "$work/tmpfs"
dd if=/dev/urandom of="$work/tmpfs/f" bs=1M count=256 status=none
truncate -s 400M "$work/ext4.img"
mkfs.ext4 -q -F "$work/ext4.img"
mount -o loop "$work/ext4.img" "$work/ext4"
cp "$work/tmpfs/f" "$work/ext4/f"
sync
(cd "$REPO" && "$GO" test -c -o "$work/backstore.test" ./backstore && "$GO" test -c -o "$work/srp.test" ./srp)

# No VM of the harness runs meanwhile (they take this lock shared, benches exclusively).
exec 8>"${SRPT_BENCH_LOCK:-/tmp/srpt-vm-run.lock}"
echo "waiting for ${SRPT_BENCH_LOCK:-/tmp/srpt-vm-run.lock} (VM runs)"
flock 8
echo "host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs, kernel $(uname -r), $(fio --version); CPU $CPU; load $(cut -d' ' -f1-3 /proc/loadavg)"
out=$work/results.txt
for round in $(seq "$ROUNDS"); do
	for fs in tmpfs ext4; do
		for direct in 0 1; do
			for bench in Queue Fio ReadAt Engine EngineSync; do
				case $bench in
				Engine) test=srp.test pattern='^BenchmarkFileLUNRandRead4K$/^io_uring$' ;;
				EngineSync) test=srp.test pattern='^BenchmarkFileLUNRandRead4K$/^sync$' ;;
				*) test=backstore.test pattern="^Benchmark${bench}RandRead4K\$" ;;
				esac
				SRPT_URING_FILE=$work/$fs/f SRPT_URING_DIRECT=$direct taskset -c "$CPU" \
					"$work/$test" -test.run '^$' -test.bench "$pattern" -test.benchtime "${IOS}x" |
					awk -v fs="$fs" -v d="$direct" -v b="$bench" '/^Benchmark/ {
						for (i = 1; i <= NF; i++) { if ($i == "IOPS") iops = $(i - 1); if ($i == "cpu-ns/op") cpu = $(i - 1) }
						print fs, d, b, iops, cpu }' >>"$out"
			done
		done
	done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
# medians per case, and Queue / fio
sort -k1,1 -k2,2 -k3,3 "$out" | awk -f "$HERE/summary.awk"
echo "($ROUNDS rounds of $IOS reads each, medians; raw: one line per run below)"
cat "$out"
