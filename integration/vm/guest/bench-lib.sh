# shellcheck shell=bash
# bench-lib.sh - helpers for guest/bench.sh and the two-host bench's guests
# (bench-2host-init.sh, bench-2host-target.sh), on top of lib.sh. The host scripts put it
# at /lab/bench-lib.sh through SRPT_VM_FILES.
#
#   bench_args                     the arguments both benches take (rounds, runtime, ramp,
#                                  ch_counts, size_mib, jobs, srpt_port, lio_port, profile,
#                                  profile_round) into ROUNDS, BENCH_RUNTIME, ...
#   bench_rxe_eth0                 virtio_net's eth0 and soft-RoCE on it (two-host bench)
#   lio_setup_ramdisk PORT MIB     LIO ib_srpt: one rd_mcp RAM disk of MIB MiB at
#                                  LUN 0 on RDMA/CM port PORT, ACL for $RXE_IP4
#                                  (configfs steps of selftest.sh); sets LIO_GUID
#   bench_count_disks              number of ib_srp disks
#   bench_login GUID PORT CH N     add_target ... ch_count=CH, wait for N disks;
#                                  sets BENCH_HOST (sysfs scsi_host dir)
#   bench_proc_counters PID        /proc/stat's cpu line and ctxt, PID's CPU time and
#                                  system calls, into B_CPU B_CTXT B_DPROC B_DIO
#   bench_prefill DEV              write DEV's first SIZE_MIB MiB once (fio's output in
#                                  /tmp/bench/prefill.txt)
#   bench_write_snap_script        /tmp/bench/snap.sh, which fio runs around each job
#   bench_fio_job ...              one fio run, one BENCH line appended to $BENCH_RAW
#   bench_record_runs SECONDS      the "bench" check: every fio run done, no transport errors
#   bench_info_guest, bench_info_run SECONDS   the BENCHINFO lines both benches print
#   bench_print_results            $BENCH_RAW and the CPU profiles, for the host to take
#
# Output format of $BENCH_RAW (one line per fio run; the host's benchreport parses it):
#   BENCH round=R ch=C target=T job=J profiled=0|1 errs=N cpu0=... ctxt0=... irq0=... dproc0=...
#         dio0=... up0=... cpu1=... (the same keys with 1) | TERSE
# where the counters (see bench_write_snap_script) are taken by fio's exec_prerun (0) and
# exec_postrun (1), i.e. around ramp + runtime (dproc and dio are 0,0 for LIO: it runs in the
# kernel); TERSE is fio's --terse-version=3 line with --lat_percentiles=1 (percentiles of total
# latency).

BENCH_CFG=/sys/kernel/config/target
BENCH_JOBS="randread-4k-qd32 randwrite-4k-qd32 read-128k-qd32 write-128k-qd32 randread-4k-qd1"

# bench_args: the k=v arguments of both benches, with their defaults (each guest script's
# header lists them); profile_round beyond rounds means the last round.
# shellcheck disable=SC2034 # read by the caller
bench_args() {
	ROUNDS=$(arg rounds 3)
	BENCH_RUNTIME=$(arg runtime 5)
	BENCH_RAMP=$(arg ramp 1)
	CH_COUNTS=$(arg ch_counts "1 2")
	SIZE_MIB=$(arg size_mib 256)
	JOBS=$(arg jobs "$BENCH_JOBS")
	SRPT_PORT=$(arg srpt_port 5555)
	LIO_PORT=$(arg lio_port 5000)
	PROFILE=$(arg profile 1)
	PROFILE_ROUND=$(arg profile_round 2)
	[ "$PROFILE_ROUND" -le "$ROUNDS" ] || PROFILE_ROUND=$ROUNDS
	local j
	for j in $JOBS; do
		job_params "$j" >/dev/null || fail "unknown job $j (known: $BENCH_JOBS)"
	done
}

# bench_rxe_eth0: the two-host bench's link: virtio_net's eth0 (the image loads no driver by
# itself; init loads what the tests need) and soft-RoCE on it, with a 4096-byte RoCE MTU as
# on dummy0 in the one-VM bench (rxe's path MTU follows the netdev's MTU).
bench_rxe_eth0() {
	step "virtio NIC"
	modprobe virtio_pci && modprobe virtio_net || fail "modprobe virtio_net"
	wait_for 10 test -e /sys/class/net/eth0 || fail "no eth0"
	step "soft-RoCE on eth0"
	setup_rxe || fail "soft-RoCE setup on $(arg netdev eth0)"
	run ip link set eth0 mtu 4200 || true
	record rxe pass "rxe0 on $RXE_NETDEV, node GUID $RXE_GUID, $RXE_IP4"
}

# lio_setup_ramdisk PORT MIB: the reference target, as selftest.sh configures it (IPv4 ACL only).
lio_setup_ramdisk() {
	local port=$1 mib=$2 gid0 tport tpg rd
	modprobe target_core_mod && modprobe ib_srpt || return 1
	LIO_GUID=$(cat /sys/module/ib_srpt/parameters/srpt_service_guid)
	LIO_GUID=${LIO_GUID#0x}
	gid0=$(cat "/sys/class/infiniband/$RXE/ports/1/gids/0")
	tport=${gid0#fe80:0000:0000:0000:}
	tpg=$BENCH_CFG/srpt/$tport/$tport
	rd=$BENCH_CFG/core/rd_mcp_0/ramdisk0
	mkdir -p /etc/target &&
		mkdir -p "$rd" &&
		echo "rd_pages=$((mib * 256))" >"$rd/control" &&
		echo 1 >"$rd/enable" &&
		echo srptbench-lio0 >"$rd/wwn/vpd_unit_serial" &&
		mkdir "$BENCH_CFG/srpt" &&
		echo "$port" >"$BENCH_CFG/srpt/discovery_auth/rdma_cm_port" &&
		mkdir "$BENCH_CFG/srpt/$tport" &&
		mkdir "$tpg" &&
		mkdir "$tpg/lun/lun_0" &&
		ln -s "$rd" "$tpg/lun/lun_0/ramdisk0" &&
		mkdir "$tpg/acls/$RXE_IP4" &&
		mkdir "$tpg/acls/$RXE_IP4/lun_0" &&
		ln -s "$tpg/lun/lun_0" "$tpg/acls/$RXE_IP4/lun_0/lun_0" &&
		echo 1 >"$tpg/enable"
}

# bench_prefill DEV: write the disk once (SIZE_MIB MiB, 1 MiB sequential writes), so that
# reads find allocated memory on every target; fio's output goes to /tmp/bench/prefill.txt.
bench_prefill() {
	fio --name=prefill --filename="$1" --direct=1 --ioengine=libaio --rw=write --bs=1M \
		--iodepth=8 --size="${SIZE_MIB}M" --eta=never --output-format=terse --terse-version=3 >/tmp/bench/prefill.txt 2>&1
}

bench_count_disks() { srp_disks | grep -c .; }

bench_has_disks() { [ "$(bench_count_disks)" -ge "$1" ]; }

# bench_login GUID PORT CH N: log in (to $BENCH_DEST, default $RXE_IP4) with ch_count=CH and wait (60 s) for N disks whose
# block devices exist.
bench_login() {
	local guid=$1 port=$2 ch=$3 n=$4 d
	srp_login "id_ext=$guid,ioc_guid=$guid,dest=${BENCH_DEST:-$RXE_IP4}:$port,ch_count=$ch" || return 1
	wait_for 60 bench_has_disks "$n" || { echo "fewer than $n disks 60 s after add_target"; return 1; }
	for d in $(srp_disks); do
		wait_for 10 test -b "/dev/$d" || return 1
	done
	d=$(srp_disks | head -1)
	# shellcheck disable=SC2034 # for bench.sh
	BENCH_HOST=/sys/class/scsi_host/$(disk_host "$d")
}

# bench_write_snap_script: /tmp/bench/snap.sh FILE SUFFIX [PID [DISK]] writes the counters the
# per-run figures are computed from, each key ending in SUFFIX (0 before the job, 1 after):
#   cpuS    the "cpu" line of /proc/stat (clock ticks)
#   ctxtS   context switches of the guest (/proc/stat ctxt)
#   irqS    rescheduling, function-call and TLB-shootdown IPIs (RES, CAL, TLB of
#           /proc/interrupts, summed over the CPUs)
#   dprocS  PID's utime,stime (fields 14 and 15 of /proc/PID/stat; the command name has no
#           spaces here); 0,0 without PID
#   dioS    PID's read() and write() system calls (syscr, syscw of /proc/PID/io, all its
#           threads): completion-channel reads, and soft-RoCE's post-send doorbells (a
#           write() per ibv_post_send; the CQ re-arm is another system call, not counted)
#   diskS   DISK's requests and sectors, reads and writes together (/sys/block/DISK/stat
#           fields 1 + 5 and 3 + 7): the I/Os of the whole job, ramp included, which the
#           two-host bench divides the target's instructions by; absent without DISK
#   upS     /proc/uptime
# fio runs it with system(3), hence a script and not a function.
# bench_proc_counters [PID]: the counters of the CPU-per-I/O figures, without a fork (fio runs
# snap.sh, which carries a copy, around every job):
#   B_CPU    the "cpu" line of /proc/stat, comma-separated clock ticks
#   B_CTXT   context switches of the guest (/proc/stat ctxt)
#   B_DPROC  PID's utime,stime (fields 14 and 15 of /proc/PID/stat; the command name has
#            no spaces here); 0,0 without PID
#   B_DIO    PID's read() and write() system calls (syscr, syscw of /proc/PID/io, all its
#            threads); 0,0 without PID
# shellcheck disable=SC2034 # read by the caller
bench_proc_counters() {
	local l lines f r w
	B_CPU='' B_CTXT=0 B_DPROC=0,0 B_DIO=0,0
	# Each file is read whole (mapfile): a `while read` loop makes two system calls per line.
	mapfile -t lines </proc/stat
	for l in "${lines[@]}"; do
		case $l in
		'cpu '*)
			l=${l#cpu}
			l=${l#"${l%%[! ]*}"}
			B_CPU=${l// /,}
			;;
		'ctxt '*) B_CTXT=${l#ctxt } ;;
		esac
	done
	if [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ]; then
		read -r -a f <"/proc/$1/stat"
		B_DPROC=${f[13]},${f[14]}
		r=0 w=0
		mapfile -t lines <"/proc/$1/io"
		for l in "${lines[@]}"; do
			case $l in
			'syscr: '*) r=${l#syscr: } ;;
			'syscw: '*) w=${l#syscw: } ;;
			esac
		done
		B_DIO=$r,$w
	fi
}

bench_write_snap_script() {
	mkdir -p /tmp/bench
	{
		echo '#!/bin/bash'
		declare -f bench_proc_counters
		cat <<'SNAP'
s=$2
bench_proc_counters "$3"
irq=$(awk '$1 == "RES:" || $1 == "CAL:" || $1 == "TLB:" {
		n = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i
		v[$1] = n }
	END { printf "%d,%d,%d", v["RES:"], v["CAL:"], v["TLB:"] }' /proc/interrupts)
disk=
if [ -n "${4:-}" ] && read -r -a d 2>/dev/null </sys/block/"$4"/stat; then
	disk=" disk$s=$((d[0] + d[4])),$((d[2] + d[6]))"
fi
read -r up _ </proc/uptime
echo "cpu$s=$B_CPU ctxt$s=$B_CTXT irq$s=$irq dproc$s=$B_DPROC dio$s=$B_DIO$disk up$s=$up" >"$1"
SNAP
	} >/tmp/bench/snap.sh
	chmod 0755 /tmp/bench/snap.sh
}

# bench_fio_job ROUND CH TARGET JOB DEV PID PROFILED RW BS QD NUMJOBS
# One time-based fio run on DEV (O_DIRECT, libaio, RAMP s of ramp, RUNTIME s measured).
# NUMJOBS > 1 splits QD over that many threads, pinned one per CPU (so that with
# ch_count=2 both blk-mq queues, hence both channels, carry commands).
bench_fio_job() {
	local round=$1 ch=$2 target=$3 job=$4 dev=$5 pid=$6 profiled=$7 rw=$8 bs=$9 qd=${10} nj=${11}
	local snap=/tmp/bench/snap mark out rc errs pin=() s0 s1
	mark=$(dmesg_mark)
	rm -f "$snap.0" "$snap.1"
	if [ "$nj" -gt 1 ]; then
		pin=(--cpus_allowed="0-$((nj - 1))" --cpus_allowed_policy=split)
	fi
	out=$(fio --name="$job" --filename="$dev" --direct=1 --ioengine=libaio \
		--rw="$rw" --bs="$bs" --iodepth="$qd" --numjobs="$nj" "${pin[@]}" --group_reporting \
		--time_based --runtime="$BENCH_RUNTIME" --ramp_time="$BENCH_RAMP" \
		--norandommap --randrepeat=0 --invalidate=1 \
		--exec_prerun="/tmp/bench/snap.sh $snap.0 0 ${pid:-0} ${dev##*/}" --exec_postrun="/tmp/bench/snap.sh $snap.1 1 ${pid:-0} ${dev##*/}" \
		--output-format=terse --terse-version=3 --lat_percentiles=1 --percentile_list=50:99:99.9 \
		--eta=never 2>/tmp/bench/fio.err)
	rc=$?
	errs=$(srp_transport_errors "$mark" | grep -c .)
	s0=$(cat "$snap.0" 2>/dev/null) s1=$(cat "$snap.1" 2>/dev/null)
	out=$(grep -m1 '^3;' <<<"$out")
	if [ $rc != 0 ] || [ -z "$out" ] || [ -z "$s0" ] || [ -z "$s1" ]; then
		echo "SRPTVM: fio $target $job on $dev failed: rc $rc, terse '${out:0:80}', snapshots '$s0' '$s1'"
		cat /tmp/bench/fio.err
		BENCH_FAILED=$((BENCH_FAILED + 1))
		return 1
	fi
	echo "BENCH round=$round ch=$ch target=$target job=$job profiled=$profiled errs=$errs $s0 $s1 | $out" >>"$BENCH_RAW"
	[ "$errs" = 0 ] || {
		echo "SRPTVM: ib_srp transport errors during $target $job:"
		srp_transport_errors "$mark"
		BENCH_ERRS=$((BENCH_ERRS + errs))
	}
	return 0
}

# job_params JOB: "rw bs iodepth numjobs" of a bench job (the one-VM and the two-host bench
# run the same jobs).
job_params() {
	case $1 in
	randread-4k-qd32) echo "randread 4k 16 2" ;;
	randwrite-4k-qd32) echo "randwrite 4k 16 2" ;;
	read-128k-qd32) echo "read 128k 16 2" ;;
	write-128k-qd32) echo "write 128k 16 2" ;;
	randread-4k-qd1) echo "randread 4k 1 1" ;;
	*) return 1 ;;
	esac
}

# bench_record_runs SECONDS: the "bench" check over the whole measurement: every fio run
# done (BENCH_FAILED) without ib_srp transport errors (BENCH_ERRS).
bench_record_runs() {
	local nruns
	nruns=$(grep -c '^BENCH ' "$BENCH_RAW")
	if [ "$BENCH_FAILED" = 0 ] && [ "$BENCH_ERRS" = 0 ]; then
		record "bench" pass "$nruns fio runs in $1 s"
	else
		record "bench" fail "$nruns fio runs in $1 s, $BENCH_FAILED failed, $BENCH_ERRS transport error lines"
	fi
}

# bench_info_guest: the BENCHINFO lines of the initiator's guest (the report reads
# guest_cpu; the rest goes to setup.txt).
bench_info_guest() {
	echo "BENCHINFO kernel=$(uname -r)"
	echo "BENCHINFO guest_cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo) x $(nproc)"
	echo "BENCHINFO guest_mem_kb=$(awk '/MemTotal/ { print $2 }' /proc/meminfo)"
	echo "BENCHINFO fio=$(fio --version)"
	echo "BENCHINFO rxe=rxe0 on $RXE_NETDEV, active_mtu $(ibv_devinfo -d rxe0 | awk '/active_mtu/ { print $2 }')"
	echo "BENCHINFO ib_srp=$(for p in /sys/module/ib_srp/parameters/*; do printf '%s=%s ' "${p##*/}" "$(cat "$p")"; done)"
	echo "BENCHINFO srp_params=$(arg srp_params "")"
}

# bench_info_run SECONDS: the BENCHINFO lines of the run's parameters (the report reads
# runtime and ramp).
bench_info_run() {
	echo "BENCHINFO jobs=$JOBS"
	echo "BENCHINFO runtime=$BENCH_RUNTIME ramp=$BENCH_RAMP rounds=$ROUNDS ch_counts=$CH_COUNTS size_mib=$SIZE_MIB"
	echo "BENCHINFO bench_seconds=$1"
}

# bench_print_results: the BENCH lines between "SRPTVM-BENCH: raw begin/end" and each CPU
# profile in base64 between "SRPTVM-BENCH: file begin NAME" and "... file end NAME", which
# the host scripts cut out of the console log.
bench_print_results() {
	local f
	echo "SRPTVM-BENCH: raw begin"
	cat "$BENCH_RAW"
	echo "SRPTVM-BENCH: raw end"
	for f in /tmp/bench/srptarget.cpu.ch*.pprof; do
		[ -s "$f" ] || continue
		echo "SRPTVM-BENCH: file begin ${f##*/}"
		base64 "$f"
		echo "SRPTVM-BENCH: file end ${f##*/}"
	done
}
