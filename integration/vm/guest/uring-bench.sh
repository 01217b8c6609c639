#!/bin/bash
# uring-bench.sh - the file backstore's random-read benchmarks against fio's io_uring engine in
# the test VM (integration/uring/vm-bench.sh passes in the test binaries of backstore and srp
# as /usr/local/bin/backstore.test and srp.test): a 128 MiB file on tmpfs and on ext4 (a
# loop device over a file in /tmp), buffered and with O_DIRECT; in each round every benchmark
# of benches= runs once per case, pinned (taskset) to vCPU cpu=, the same file for all. One
# line per run on the console: "URINGBENCH fs direct bench IOPS cpu-ns/op [job-cpu-ns/op]" (the
# last for fio: its job's own CPU, without the process's start and set-up), between the lines
# "URINGMARK fs direct bench start" and "... end" that bound the whole process's run for the
# host's instruction counts (and "URINGMARK idle - - start/end" around idle= seconds, 4).
#
# Arguments (k=v): rounds=3 ios=100000 cpu=1 benches="Queue Fio Engine" (also ReadAt,
# EngineSync, and EngineBase: Engine with /usr/local/bin/srp-base.test, another commit's) fss="tmpfs ext4" directs="0 1" profile=1 (the last round's Engine runs write a
# Go CPU profile, sent to the console base64-encoded: "URINGPROF fs direct LINE"). A case the
# guest's kernel refuses (O_DIRECT on tmpfs before Linux 6.6) is left out and said so.
# shellcheck source=lib.sh
. /lab/lib.sh

ROUNDS=$(arg rounds 3)
IOS=$(arg ios 100000)
CPU=$(arg cpu 1)
BENCHES=$(arg benches "Queue Fio Engine")
FSS=$(arg fss "tmpfs ext4")
DIRECTS=$(arg directs "0 1")
PROFILE=$(arg profile 1)

for b in backstore srp; do
	[ -x /usr/local/bin/$b.test ] || fail "no /usr/local/bin/$b.test: build it on the host (vm-bench.sh)"
done
W=/srv/uring
mkdir -p $W/tmpfs $W/ext4
run mount -t tmpfs -o size=160M tmpfs $W/tmpfs || fail "mount tmpfs"
run dd if=/dev/urandom of=$W/tmpfs/f bs=1M count=128 status=none || fail "dd"
modprobe loop 2>/dev/null; modprobe ext4 2>/dev/null
run truncate -s 200M /tmp/ext4.img && run mkfs.ext4 -q -F /tmp/ext4.img || fail "mkfs.ext4"
run mount -t ext4 -o loop /tmp/ext4.img $W/ext4 || fail "mount ext4"
run cp $W/tmpfs/f $W/ext4/f && sync || fail "cp"
echo "URINGINFO guest: $(nproc) vCPUs, kernel $(uname -r), $(fio --version); CPU $CPU; $ROUNDS rounds of $IOS reads"

cases=()
for fs in $FSS; do
	for direct in $DIRECTS; do
		if [ "$direct" = 1 ] && ! dd if=$W/$fs/f of=/dev/null bs=4k count=1 iflag=direct status=none 2>/dev/null; then
			echo "URINGINFO $fs: O_DIRECT refused by the kernel, left out"
			continue
		fi
		cases+=("$fs $direct")
	done
done

# an idle window, for the instructions the guest executes doing nothing (vm-bench.sh's
# SRPT_URING_INSN=1 subtracts them)
echo "URINGMARK idle - - start"
sleep "$(arg idle 4)"
echo "URINGMARK idle - - end"

runs=0
for round in $(seq "$ROUNDS"); do
	step "round $round"
	for c in "${cases[@]}"; do
		read -r fs direct <<<"$c"
		for bench in $BENCHES; do
			case $bench in
			Engine) test=srp pattern='^BenchmarkFileLUNRandRead4K$/^io_uring$' ;;
			EngineSync) test=srp pattern='^BenchmarkFileLUNRandRead4K$/^sync$' ;;
			EngineBase) test=srp-base pattern='^BenchmarkFileLUNRandRead4K$/^io_uring$' ;;
			*) test=backstore pattern="^Benchmark${bench}RandRead4K\$" ;;
			esac
			prof=()
			[ "$PROFILE" = 1 ] && [ "$round" = "$ROUNDS" ] && [ "$bench" = Engine ] && prof=(-test.cpuprofile /tmp/engine.pprof)
			echo "URINGMARK $fs $direct $bench start"
			line=$(cd /tmp && SRPT_URING_FILE=$W/$fs/f SRPT_URING_DIRECT=$direct taskset -c "$CPU" \
				/usr/local/bin/$test.test -test.run '^$' -test.bench "$pattern" -test.benchtime "${IOS}x" "${prof[@]}" 2>&1 |
				awk -v fs="$fs" -v d="$direct" -v b="$bench" '/^Benchmark/ {
					for (i = 1; i <= NF; i++) { if ($i == "IOPS") iops = $(i - 1); if ($i == "cpu-ns/op") cpu = $(i - 1); if ($i == "job-cpu-ns/op") job = " " $(i - 1) }
					if (iops != "") print fs, d, b, iops, cpu job }')
			echo "URINGMARK $fs $direct $bench end"
			if [ -n "$line" ]; then
				echo "URINGBENCH $line"
				if [ ${#prof[@]} -gt 0 ] && [ -s /tmp/engine.pprof ]; then
					base64 -w 120 /tmp/engine.pprof | sed "s/^/URINGPROF $fs $direct /"
					rm -f /tmp/engine.pprof
				fi
				runs=$((runs + 1))
			else
				record "$fs direct=$direct $bench round $round" fail "no result"
			fi
		done
	done
done
record "uring bench runs" pass "$runs"
umount $W/ext4 $W/tmpfs
finish
