#!/bin/bash
# bench.sh - srptarget against LIO ib_srpt in one VM boot, over the same rxe device
# with the same ib_srp settings. Host side: integration/vm/bench.sh (`make bench-vm`),
# which builds the daemon, passes it and bench-lib.sh in, and turns the raw lines this
# script prints into the table, the CSV files and the chart.
#
# Targets: srptarget with a memory LUN 0 and a null LUN 1 (both size_mib), and LIO
# ib_srpt with an rd_mcp RAM disk of the same size; both memory disks are written once
# over their whole size before the first round, so that neither reads unallocated
# memory. Both targets run the whole time; only one is logged in at a time.
#
# Per round, per ch_count (ch_counts, ib_srp's add_target option): log in to srptarget,
# run every job on the memory disk, then on the null disk, log out; log in to LIO, run
# every job, log out. So the targets alternate (srptarget, LIO, srptarget, LIO, ...),
# and drift of the host (other VMs, builds) touches both alike.
#
# Jobs (fio, libaio, O_DIRECT, time-based, ramp then runtime seconds): QD 32 is two
# threads of iodepth 16, pinned one per vCPU, so that with ch_count=2 each blk-mq queue
# (hence each RDMA channel) carries half of the commands.
#   randread-4k-qd32  randwrite-4k-qd32  read-128k-qd32  write-128k-qd32  randread-4k-qd1
#
# During the srptarget blocks of one round (profile_round, or the last round if there are
# fewer; one profile per ch_count in profile_ch) the daemon writes a CPU profile: it runs
# with `serve --cpuprofile FILE --cpuprofile-wait`, SIGUSR1 before the block's jobs starts
# the profile, SIGUSR2 after them writes FILE. The other rounds run unprofiled.
#
# Output on the console, after the measurements (printing during them would cost guest
# CPU): BENCHINFO lines (setup), the BENCH lines between "SRPTVM-BENCH: raw begin/end"
# (format in bench-lib.sh), each profile in base64 between "SRPTVM-BENCH: file begin NAME"
# and "SRPTVM-BENCH: file end NAME" (NAME srptarget.cpu.chN.pprof), the daemon's log between
# "SRPTVM-BENCH: daemon log begin/end".
#
# Arguments (k=v), all optional:
#   bin=/usr/local/bin/srptarget
#   rounds=3  runtime=5  ramp=1  ch_counts="1 2"  size_mib=256
#   jobs="randread-4k-qd32 randwrite-4k-qd32 read-128k-qd32 write-128k-qd32 randread-4k-qd1"
#   srpt_luns="mem null"   which srptarget LUNs to measure
#   srpt_port=5555  lio_port=5000
#   profile=1  profile_round=2  profile_ch="1 2"   (profile=0: none; profile_round
#              beyond rounds means the last round)
#   srp_params=    ib_srp module parameters (lib.sh), the same for both targets
# shellcheck disable=SC2317 # functions called through check and wait_for
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=bench-lib.sh
. /lab/bench-lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
ROUNDS=$(arg rounds 3)
BENCH_RUNTIME=$(arg runtime 5)
BENCH_RAMP=$(arg ramp 1)
CH_COUNTS=$(arg ch_counts "1 2")
SIZE_MIB=$(arg size_mib 256)
JOBS=$(arg jobs "randread-4k-qd32 randwrite-4k-qd32 read-128k-qd32 write-128k-qd32 randread-4k-qd1")
SRPT_LUNS=$(arg srpt_luns "mem null")
SRPT_PORT=$(arg srpt_port 5555)
LIO_PORT=$(arg lio_port 5000)
PROFILE=$(arg profile 1)
PROFILE_ROUND=$(arg profile_round 2)
PROFILE_CH=$(arg profile_ch "1 2")
[ "$PROFILE_ROUND" -gt "$ROUNDS" ] && PROFILE_ROUND=$ROUNDS

BENCH_RAW=/tmp/bench/raw.txt
BENCH_FAILED=0
BENCH_ERRS=0
CONFIG=/etc/srptarget-bench.yaml
DLOG=/tmp/bench/srptarget.log
PROF=/tmp/bench/srptarget.cpu.pprof
PID=
mkdir -p /tmp/bench
: >"$BENCH_RAW"
bench_write_snap_script

# job_params JOB: "rw bs iodepth numjobs"
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
for j in $JOBS; do
	job_params "$j" >/dev/null || fail "unknown job $j (known: randread-4k-qd32 randwrite-4k-qd32 read-128k-qd32 write-128k-qd32 randread-4k-qd1)"
done

daemon_alive() {
	[ -n "$PID" ] && [ -r "/proc/$PID/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$PID/stat" 2>/dev/null
}

# run_jobs ROUND CH TARGET DEV PID PROFILED: every job on DEV; returns the number that failed.
run_jobs() {
	local j p nfail=0
	for j in $JOBS; do
		read -r -a p <<<"$(job_params "$j")"
		bench_fio_job "$1" "$2" "$3" "$j" "$4" "$5" "$6" "${p[@]}" || nfail=$((nfail + 1))
	done
	return $nfail
}

# prefill DEV: write the whole disk once (1 MiB sequential writes), so that reads find
# allocated memory on both targets.
prefill() {
	fio --name=prefill --filename="$1" --direct=1 --ioengine=libaio --rw=write --bs=1M \
		--iodepth=8 --size="${SIZE_MIB}M" --eta=never --output-format=terse --terse-version=3 >/tmp/bench/prefill.txt 2>&1
}

# ------------------------------------------------------------------ preconditions
step "srptarget binary"
[ -e "$BIN" ] || fail "$BIN is absent: integration/vm/bench.sh passes it in"
libs=$(/lib64/ld-linux-x86-64.so.2 --list "$BIN" 2>&1)
grep -q 'not found' <<<"$libs" && fail "$BIN needs libraries the image lacks: $(grep 'not found' <<<"$libs" | awk '{print $1}' | tr '\n' ' ')"
grep -q 'librdmacm\.so' <<<"$libs" || fail "$BIN does not link librdmacm (built without cgo?)"
CAN_PROFILE=0
"$BIN" serve --help 2>&1 | grep -q -- '--cpuprofile-wait' && CAN_PROFILE=1
[ "$PROFILE" = 1 ] && [ $CAN_PROFILE = 0 ] && {
	echo "SRPTVM: $BIN serve has no --cpuprofile-wait flag (an older build): no profile"
	PROFILE=0
}
record "srptarget binary" pass "$(stat -c %s "$BIN") bytes, $("$BIN" version 2>&1 | head -1), --cpuprofile $CAN_PROFILE"

step "soft-RoCE"
setup_rxe || fail "soft-RoCE setup (rdma_rxe on dummy0)"
record rxe pass "rxe0 on $RXE_NETDEV, node GUID $RXE_GUID, $RXE_IP4"

# ------------------------------------------------------------------ srptarget
step "srptarget serve"
cat >"$CONFIG" <<EOF
# Generated by bench.sh: a memory LUN 0 and a null LUN 1 of ${SIZE_MIB} MiB, default limits
# (128 credits per channel, as LIO's ib_srpt), identity = node GUID of rxe0, as LIO's.
listeners:
  - address: 0.0.0.0
    port: $SRPT_PORT
luns:
  - lun: 0
    backstore: memory
    size: ${SIZE_MIB}MiB
  - lun: 1
    backstore: null
    size: ${SIZE_MIB}MiB
acls:
  - initiators: ["*"]
    luns: [0, 1]
EOF
cat "$CONFIG"
# The profile runs only between SIGUSR1 and SIGUSR2 (block below): --cpuprofile-wait.
profargs=()
[ "$PROFILE" = 1 ] && profargs=(--cpuprofile "$PROF" --cpuprofile-wait)
echo "SRPTVM\$ $BIN serve --config $CONFIG ${profargs[*]} >$DLOG 2>&1 &"
"$BIN" serve --config "$CONFIG" "${profargs[@]}" >"$DLOG" 2>&1 &
PID=$!
srpt_listening() { daemon_alive && cm_listening "$SRPT_PORT"; }
if wait_for 30 srpt_listening; then
	record "srptarget listening" pass "RDMA/CM port $SRPT_PORT (pid $PID)"
else
	cat "$DLOG"
	fail "srptarget not listening on $SRPT_PORT"
fi

# ------------------------------------------------------------------ LIO
step "LIO ib_srpt: rd_mcp ${SIZE_MIB} MiB on port $LIO_PORT"
CHECK_DETAIL="rd_mcp ${SIZE_MIB} MiB, RDMA/CM port $LIO_PORT" check "LIO configfs" lio_setup_ramdisk "$LIO_PORT" "$SIZE_MIB" ||
	fail "LIO configuration"
wait_for 10 cm_listening "$LIO_PORT" || fail "ib_srpt not listening on $LIO_PORT"
# Both identify themselves with the node GUID of rxe0: the add_target lines differ only
# in the port.
[ "$LIO_GUID" = "$RXE_GUID" ] || echo "SRPTVM: note: LIO service GUID $LIO_GUID, rxe0 node GUID $RXE_GUID"

# ------------------------------------------------------------------ prefill
step "prefill: both memory disks written once"
ch0=${CH_COUNTS%% *}
bench_login "$RXE_GUID" "$SRPT_PORT" "$ch0" 2 || fail "login to srptarget"
d=$(bench_disk_for_lun 0) || fail "srptarget: no disk with LUN 0"
t=$(uptime_s)
prefill "/dev/$d" || fail "prefill of srptarget's /dev/$d: $(tail -3 /tmp/bench/prefill.txt)"
record "prefill srptarget" pass "/dev/$d (LUN 0, memory), ${SIZE_MIB} MiB in $(since "$t") s"
srp_logout >/dev/null || fail "logout from srptarget"
bench_login "$LIO_GUID" "$LIO_PORT" "$ch0" 1 || fail "login to LIO"
d=$(srp_disks | head -1)
t=$(uptime_s)
prefill "/dev/$d" || fail "prefill of LIO's /dev/$d: $(tail -3 /tmp/bench/prefill.txt)"
record "prefill LIO" pass "/dev/$d (rd_mcp), ${SIZE_MIB} MiB in $(since "$t") s"
srp_logout >/dev/null || fail "logout from LIO"

# ------------------------------------------------------------------ rounds
# block NAME ROUND CH: log in to NAME (srpt or lio) with ch_count=CH, run the jobs on its
# disk(s), log out, record one result row.
block() {
	local name=$1 round=$2 ch=$3 profiled=0 mark t got_ch nfail=0 errs lun l d what
	if [ "$name" = srpt ]; then
		[ "$PROFILE" = 1 ] && [ "$round" = "$PROFILE_ROUND" ] && [[ " $PROFILE_CH " == *" $ch "* ]] && profiled=1
		what="srptarget r$round ch$ch"
		daemon_alive || fail "srptarget is not running any more: $(tail -3 "$DLOG")"
	else
		what="LIO r$round ch$ch"
	fi
	step "$what$([ $profiled = 1 ] && echo ", CPU profile")"
	mark=$(dmesg_mark)
	t=$(uptime_s)
	if [ "$name" = srpt ]; then
		bench_login "$RXE_GUID" "$SRPT_PORT" "$ch" 2
	else
		bench_login "$LIO_GUID" "$LIO_PORT" "$ch" 1
	fi || {
		record "$what" fail "login failed"
		srp_logout
		return 1
	}
	got_ch=$(cat "$BENCH_HOST/ch_count")
	if [ "$name" = srpt ]; then
		[ $profiled = 1 ] && kill -USR1 "$PID"
		for lun in $SRPT_LUNS; do
			case $lun in mem) l=0 ;; null) l=1 ;; *) fail "unknown srpt_luns entry $lun" ;; esac
			d=$(bench_disk_for_lun $l) || { nfail=$((nfail + 1)); continue; }
			run_jobs "$round" "$ch" "srpt-$lun" "/dev/$d" "$PID" "$profiled" || nfail=$((nfail + $?))
		done
		if [ $profiled = 1 ]; then
			# The daemon writes FILE.tmp and renames it: FILE appears complete.
			kill -USR2 "$PID"
			if wait_for 20 test -s "$PROF"; then
				mv "$PROF" "/tmp/bench/srptarget.cpu.ch$ch.pprof"
			else
				echo "SRPTVM: no profile written: $(grep -i 'CPU profile' "$DLOG")"
			fi
		fi
	else
		d=$(srp_disks | head -1)
		run_jobs "$round" "$ch" lio "/dev/$d" "" 0 || nfail=$?
	fi
	srp_logout >/dev/null
	errs=$(srp_transport_errors "$mark" | grep -c .)
	if [ $nfail = 0 ] && [ "$got_ch" = "$ch" ] && [ "$errs" = 0 ]; then
		record "$what" pass "ch_count $got_ch, $(wc -w <<<"$JOBS") jobs$([ "$name" = srpt ] && echo " x ${SRPT_LUNS// /+}"), $(since "$t") s"
	else
		record "$what" fail "ch_count $got_ch (want $ch), $nfail failed jobs, $errs transport error lines"
	fi
}

bench_t0=$(uptime_s)
for round in $(seq 1 "$ROUNDS"); do
	for ch in $CH_COUNTS; do
		block srpt "$round" "$ch"
		block lio "$round" "$ch"
	done
done
bench_s=$(since "$bench_t0")
nruns=$(grep -c '^BENCH ' "$BENCH_RAW")
if [ "$BENCH_FAILED" = 0 ] && [ "$BENCH_ERRS" = 0 ]; then
	record "bench" pass "$nruns fio runs in $bench_s s"
else
	record "bench" fail "$nruns fio runs in $bench_s s, $BENCH_FAILED failed, $BENCH_ERRS transport error lines"
fi

# ------------------------------------------------------------------ stop
step "srptarget SIGTERM"
kill -TERM "$PID"
if wait_for 45 eval '! daemon_alive'; then
	wait "$PID"
	drc=$?
	check_eq "srptarget SIGTERM" "exit 0" "exit $drc"
else
	record "srptarget SIGTERM" fail "still running 45 s after SIGTERM"
	kill -KILL "$PID"
fi

problems=$(kernel_log_problems)
if [ -z "$problems" ]; then
	record "kernel log" pass "no warnings, oopses or hung tasks"
else
	echo "$problems"
	record "kernel log" fail "$(echo "$problems" | head -1)"
fi

# ------------------------------------------------------------------ output
dmesg -n 1
{
	echo "BENCHINFO kernel=$(uname -r)"
	echo "BENCHINFO guest_cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo) x $(nproc)"
	echo "BENCHINFO guest_mem_kb=$(awk '/MemTotal/ { print $2 }' /proc/meminfo)"
	echo "BENCHINFO fio=$(fio --version)"
	echo "BENCHINFO srptarget=$("$BIN" version 2>&1 | head -1)"
	echo "BENCHINFO rxe=rxe0 on $RXE_NETDEV, active_mtu $(ibv_devinfo -d rxe0 | awk '/active_mtu/ { print $2 }')"
	echo "BENCHINFO ib_srp=$(for p in /sys/module/ib_srp/parameters/*; do printf '%s=%s ' "${p##*/}" "$(cat "$p")"; done)"
	echo "BENCHINFO srp_params=$(arg srp_params "")"
	echo "BENCHINFO lio=rd_mcp ${SIZE_MIB} MiB, srpt attrib $(cat "$BENCH_CFG"/srpt/*/*/attrib/srp_sq_size 2>/dev/null | head -1) sq, srp_max_req_size $(cat /sys/module/ib_srpt/parameters/srp_max_req_size)"
	echo "BENCHINFO jobs=$JOBS"
	echo "BENCHINFO runtime=$BENCH_RUNTIME ramp=$BENCH_RAMP rounds=$ROUNDS ch_counts=$CH_COUNTS size_mib=$SIZE_MIB"
	echo "BENCHINFO bench_seconds=$bench_s"
	echo "BENCHINFO profile=$PROFILE round=$PROFILE_ROUND ch=$PROFILE_CH"
} | tee /tmp/bench/info.txt
echo "SRPTVM-BENCH: raw begin"
cat "$BENCH_RAW"
echo "SRPTVM-BENCH: raw end"
for f in /tmp/bench/srptarget.cpu.ch*.pprof; do
	[ -s "$f" ] || continue
	echo "SRPTVM-BENCH: file begin ${f##*/}"
	base64 "$f"
	echo "SRPTVM-BENCH: file end ${f##*/}"
done
echo "SRPTVM-BENCH: daemon log begin"
tail -n 200 "$DLOG"
echo "SRPTVM-BENCH: daemon log end"
finish
