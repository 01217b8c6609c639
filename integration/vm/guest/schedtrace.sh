#!/bin/bash
# schedtrace.sh - where the guest's CPU goes with srptarget and with LIO ib_srpt, for one
# fio job (4 KiB random read at QD 32, two threads pinned one per vCPU, as in bench.sh):
# the kernel's sched_switch and sched_wakeup tracepoints for 2 s in the middle of a 12 s
# run, plus /proc counters. Host side: integration/vm/schedtrace.sh. For each target and
# ch_count it prints, on lines starting with "SCHEDTRACE <target>-r<round>-ch<N>":
#
#   iops=            fio's IOPS over the whole run
#   ctxt=            context switches of the guest during the 2 s
#   cpu=             /proc/stat user nice system idle iowait irq softirq ticks, 2 s
#   mm_switches=     switches on a CPU from one user process to another (an address-space
#                    switch: kernel threads borrow the page tables they find, so they are
#                    skipped; the daemon's threads count as one process, other threads by
#                    their thread id, which counts a switch between two threads of fio as
#                    one too: an upper bound), total and per I/O, then the pairs seen more
#                    than 50 times ("mm A => B n")
#   switch A -> B    the 25 most frequent sched_switch pairs (comm, CPU number stripped)
#   wake A wakes B   the 20 most frequent wakeups (waker's comm, wakee's comm)
#   task T ticks     CPU ticks (utime + stime) over the 2 s, per command name
#   softirq S n      softirqs raised during the 2 s
#
# and, when /lab/mmswitch is there (the host wrapper builds it), its MMSWITCH lines: the
# cost of a switch between two threads against one between two processes in this guest.
#
# Arguments (k=v): bin=/usr/local/bin/srptarget  ch_counts="1 2"  rounds=1  runtime=12
#   srpt_cpus=LIST   run the daemon under taskset -c LIST (default: any CPU)
#   srpt_procs=N     run the daemon with GOMAXPROCS=N (default: Go's, one per CPU)
# shellcheck disable=SC2317 # functions called through check and wait_for
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=bench-lib.sh
. /lab/bench-lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
CH_COUNTS=$(arg ch_counts "1 2")
ROUNDS=$(arg rounds 1)
RUNTIME=$(arg runtime 12)
SRPT_CPUS=$(arg srpt_cpus "")
SRPT_PROCS=$(arg srpt_procs "")
T=/sys/kernel/tracing
mkdir -p /tmp/st

if [ -x /lab/mmswitch ]; then
	step "mmswitch: thread switch against process switch"
	/lab/mmswitch | sed 's/^/SCHEDTRACE /'
fi

step "soft-RoCE, srptarget, LIO"
setup_rxe || fail "soft-RoCE setup"
cat >/etc/srptarget-trace.yaml <<EOF
listeners:
  - address: 0.0.0.0
    port: 5555
luns:
  - lun: 0
    backstore: memory
    size: 256MiB
acls:
  - initiators: ["*"]
    luns: [0]
EOF
launch=()
[ -z "$SRPT_CPUS" ] || launch=(taskset -c "$SRPT_CPUS")
[ -z "$SRPT_PROCS" ] || launch=(env "GOMAXPROCS=$SRPT_PROCS" "${launch[@]}")
echo "SCHEDTRACE daemon: ${launch[*]} $BIN serve"
"${launch[@]}" "$BIN" serve --config /etc/srptarget-trace.yaml >/tmp/st/srptarget.log 2>&1 &
DPID=$!
wait_for 30 cm_listening 5555 || fail "srptarget not listening: $(tail -3 /tmp/st/srptarget.log)"
lio_setup_ramdisk 5000 256 || fail "LIO configuration"
wait_for 10 cm_listening 5000 || fail "ib_srpt not listening"
mount -t tracefs nodev $T 2>/dev/null
[ -e $T/events/sched/sched_switch/enable ] || fail "no tracefs at $T"
echo 20000 >$T/buffer_size_kb

# ticks: "pid command ticks" per process (utime + stime).
ticks() {
	local p f
	for p in /proc/[0-9]*; do
		read -r -a f <"$p/stat" 2>/dev/null || continue
		echo "${f[0]} ${f[1]} $((f[13] + f[14]))"
	done
}

# measure NAME DEV: prefill DEV once, run the job, trace 2 s of it, print the lines.
measure() {
	local name=$1 dev=$2 fp c0 c1 iops p=SCHEDTRACE
	[ -e "/tmp/st/filled.$3" ] || fio --name=fill --filename="$dev" --direct=1 --ioengine=libaio --rw=write \
		--bs=1M --iodepth=8 --size=256M --eta=never >/dev/null 2>&1
	touch "/tmp/st/filled.$3"
	fio --name="$name" --filename="$dev" --direct=1 --ioengine=libaio --rw=randread --bs=4k \
		--iodepth=16 --numjobs=2 --cpus_allowed=0-1 --cpus_allowed_policy=split --group_reporting \
		--time_based --runtime="$RUNTIME" --norandommap --randrepeat=0 \
		--output-format=terse --terse-version=3 --eta=never >"/tmp/st/fio.$name" &
	fp=$!
	sleep 4
	ticks >/tmp/st/t0
	cp /proc/softirqs /tmp/st/s0
	head -1 /proc/stat >/tmp/st/cpu0
	c0=$(awk '/^ctxt/ { print $2 }' /proc/stat)
	echo >$T/trace
	echo 1 >$T/events/sched/sched_switch/enable
	echo 1 >$T/events/sched/sched_wakeup/enable
	sleep 2
	echo 0 >$T/events/sched/sched_switch/enable
	echo 0 >$T/events/sched/sched_wakeup/enable
	c1=$(awk '/^ctxt/ { print $2 }' /proc/stat)
	head -1 /proc/stat >/tmp/st/cpu1
	cp /proc/softirqs /tmp/st/s1
	ticks >/tmp/st/t1
	wait $fp
	iops=$(awk -F';' '{ printf "%d", $8 }' "/tmp/st/fio.$name")
	echo "$p $name iops=$iops ctxt=$((c1 - c0))"
	echo "$p $name cpu=$(paste /tmp/st/cpu0 /tmp/st/cpu1 | awk '{ n = NF / 2; for (i = 2; i <= 8; i++) printf "%d ", $(i + n) - $i }')"
	grep 'sched_switch:' $T/trace | sed -E 's/^.*\[0*([0-9]+)\].*next_comm=(.*) next_pid=([0-9]+) .*/\1 \2 \3/' |
		awk -v p="$p $name" -v iops="$iops" '
		{
			cpu = $1; comm = $2; pid = $3
			if (comm ~ /^(kworker|ksoftirqd|swapper|rcu_|migration|cpuhp|kthreadd|khugepaged|kcompactd|watchdog|idle_inject|irq\/|kswapd|oom_reaper|writeback|kblockd|jbd2|scsi_|ib_|rdma|kdevtmpfs|kauditd|khungtaskd|ksmd|mm_percpu|ext4)/) next
			key = (comm ~ /^srptarget/) ? comm : comm "-" pid   # one address space: all threads of the daemon
			if (key != last[cpu]) {
				if (last[cpu] != "") { n++; pair[last[cpu] " => " key]++ }
				last[cpu] = key
			}
		}
		END {
			printf "%s mm_switches=%d per_io=%.2f\n", p, n, (iops > 0 ? n / (iops * 2) : 0)
			for (k in pair) if (pair[k] > 50) printf "%s mm %s %d\n", p, k, pair[k]
		}'
	grep -o 'prev_comm=[^ ]* .*next_comm=[^ ]*' $T/trace | sed -E 's/prev_comm=([^ ]*) .*next_comm=([^ ]*)/\1 -> \2/; s/\/[0-9]+//g' |
		sort | uniq -c | sort -rn | head -25 | awk -v p="$p $name" '{ print p, "switch", $2, $3, $4, $1 }'
	grep 'sched_wakeup:' $T/trace | sed -E 's/^ *([^ ]+)-[0-9]+ .*comm=([^ ]+) .*/\1 wakes \2/; s/\/[0-9]+//g' |
		sort | uniq -c | sort -rn | head -20 | awk -v p="$p $name" '{ print p, "wake", $2, $3, $4, $1 }'
	# Per process, then summed by command name: a kworker's name changes with the work queue
	# it last ran, so the name at the end counts (processes started since count from 0).
	awk 'NR == FNR { a[$1] = $3; next } { d = $3 - a[$1]; gsub(/\/[0-9]+/, "", $2); if (d > 0) sum[$2] += d } END { for (c in sum) print sum[c], c }' /tmp/st/t0 /tmp/st/t1 |
		sort -rn | head -12 | awk -v p="$p $name" '{ print p, "task", $2, $1 }'
	paste /tmp/st/s0 /tmp/st/s1 | awk -v p="$p $name" 'NR > 1 { n = NF / 2; a = 0; b = 0
		for (i = 2; i <= n; i++) a += $i; for (i = n + 2; i <= NF; i++) b += $i
		if (b > a) print p, "softirq", $1, b - a }'
}

for r in $(seq 1 "$ROUNDS"); do
	for ch in $CH_COUNTS; do
		step "round $r, ch_count $ch: srptarget"
		bench_login "$RXE_GUID" 5555 "$ch" 1 || fail "login to srptarget"
		measure "srptarget-r$r-ch$ch" "/dev/$(srp_disks | head -1)" srpt
		srp_logout >/dev/null
		step "round $r, ch_count $ch: LIO"
		bench_login "$LIO_GUID" 5000 "$ch" 1 || fail "login to LIO"
		measure "lio-r$r-ch$ch" "/dev/$(srp_disks | head -1)" lio
		srp_logout >/dev/null
	done
done
kill -TERM $DPID
wait $DPID
record schedtrace pass "$ROUNDS round(s), ch_counts $CH_COUNTS"
finish
