#!/bin/bash
# bench.sh - srptarget against LIO ib_srpt in one VM boot, over the same rxe device
# with the same ib_srp settings. Host side: integration/vm/bench.sh (`make bench-vm`),
# which builds the daemon, passes it and bench-lib.sh in, and turns the raw lines this
# script prints into the table, the CSV files and the chart.
#
# Targets: srptarget, one daemon per completion mode of srpt_modes (the configuration's
# limits.completion and limits.poll_window, configs/README.md), each with its own memory
# LUN 0 and null LUN 1 (both size_mib), its own port (srpt_port, srpt_port+1, ...) and its
# own log; and LIO ib_srpt with an rd_mcp RAM disk of the same size. Every memory disk
# (each daemon's and LIO's) is written once over its whole size before the first round, so
# that none reads unallocated memory. All targets run the whole time; only one is logged
# in at a time, and the daemons not under test must stay idle (checked: "idle daemons").
#
# Per round, per ch_count (ch_counts, ib_srp's add_target option): for each srptarget
# daemon in turn, log in, run every job on the memory disk, then on the null disk, log
# out; then log in to LIO, run every job, log out. So srptarget and LIO alternate, and
# drift of the host (other VMs, builds) touches all alike. The order of the daemons
# rotates by one per round (round 1: event adaptive poll, round 2: adaptive poll event,
# ...), so that no mode always runs right after LIO or first after the prefill.
#
# Target names in the BENCH lines: srpt-mem and srpt-null with one mode (as before modes
# existed); srpt-mem-NAME and srpt-null-NAME with several, where NAME is the mode, followed
# by the poll window if one was given (adaptive:20us -> srpt-mem-adaptive20us).
#
# Jobs (fio, libaio, O_DIRECT, time-based, ramp then runtime seconds): QD 32 is two
# threads of iodepth 16, pinned one per vCPU, so that with ch_count=2 each blk-mq queue
# (hence each RDMA channel) carries half of the commands.
#   randread-4k-qd32  randwrite-4k-qd32  read-128k-qd32  write-128k-qd32  randread-4k-qd1
#
# During the blocks of one daemon (the first of srpt_modes, or profile_mode) in one round
# (profile_round, or the last round if there are fewer; one profile per ch_count in
# profile_ch) that daemon writes a CPU profile: it runs with `serve --cpuprofile FILE
# --cpuprofile-wait`, SIGUSR1 before the block's jobs starts the profile, SIGUSR2 after
# them writes FILE. The other daemons, and the other rounds, run unprofiled.
#
# Output on the console, after the measurements (printing during them would cost guest
# CPU): BENCHINFO lines (setup), the BENCH lines between "SRPTVM-BENCH: raw begin/end"
# (format in bench-lib.sh), each profile in base64 between "SRPTVM-BENCH: file begin NAME"
# and "SRPTVM-BENCH: file end NAME" (NAME srptarget.cpu.chN.pprof), the daemons' logs
# between "SRPTVM-BENCH: daemon log begin/end" (with several daemons each log follows a
# "==> FILE <==" line, as tail prints them).
#
# Arguments (k=v), all optional:
#   bin=/usr/local/bin/srptarget
#   rounds=3  runtime=5  ramp=1  ch_counts="1 2"  size_mib=256
#   jobs="randread-4k-qd32 randwrite-4k-qd32 read-128k-qd32 write-128k-qd32 randread-4k-qd1"
#   srpt_luns="mem null"   which srptarget LUNs to measure
#   srpt_modes=adaptive    completion modes, one daemon each: event, adaptive, poll,
#                          MODE:WINDOW for a poll_window (adaptive:20us), and
#                          MODE:WINDOW:pN to run that daemon with GOMAXPROCS=N
#                          (adaptive:2ms:p1); e.g. srpt_modes="event adaptive poll"
#   srpt_port=5555  lio_port=5000   (daemon N of srpt_modes listens on srpt_port+N)
#   profile=1  profile_round=2  profile_ch="1 2"   (profile=0: none; profile_round
#              beyond rounds means the last round)
#   profile_mode=          the daemon to profile, by srpt_modes entry or NAME (default:
#                          the first)
#   srp_params=    ib_srp module parameters (lib.sh), the same for all targets
# shellcheck disable=SC2317 # functions called through check and wait_for
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=bench-lib.sh
. /lab/bench-lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
bench_args
SRPT_LUNS=$(arg srpt_luns "mem null")
SRPT_MODES=$(arg srpt_modes adaptive)
PROFILE_CH=$(arg profile_ch "1 2")
PROFILE_MODE=$(arg profile_mode "")

BENCH_RAW=/tmp/bench/raw.txt
BENCH_FAILED=0
BENCH_ERRS=0
PROF=/tmp/bench/srptarget.cpu.pprof
mkdir -p /tmp/bench
: >"$BENCH_RAW"
bench_write_snap_script

for lun in $SRPT_LUNS; do
	case $lun in mem | null) ;; *) fail "unknown srpt_luns entry $lun (known: mem null)" ;; esac
done

# The srptarget daemons, one per srpt_modes entry, described by parallel arrays:
#   D_ENTRY  the entry as given (adaptive:20us)   D_MODE  limits.completion (adaptive)
#   D_WIN    limits.poll_window, empty for the daemon's default (20us)
#   D_PROCS  the daemon's GOMAXPROCS, empty for Go's default (one per CPU)
#   D_NAME   the mode and the window (adaptive20us), for check names and BENCH targets
#   D_SUFFIX what follows srpt-mem / srpt-null in the BENCH lines: empty with one daemon
#   D_PORT, D_CONF, D_LOG, D_PID
D_ENTRY=() D_MODE=() D_WIN=() D_PROCS=() D_NAME=() D_SUFFIX=() D_PORT=() D_CONF=() D_LOG=() D_PID=()
read -r -a entries <<<"$SRPT_MODES"
[ ${#entries[@]} -gt 0 ] || fail "srpt_modes is empty"
for i in "${!entries[@]}"; do
	e=${entries[$i]}
	IFS=: read -r mode win procs extra <<<"$e"
	case $mode in
	event | adaptive | poll) ;;
	*) fail "srpt_modes: '$e': the mode is event, adaptive or poll (MODE:WINDOW sets poll_window, e.g. adaptive:20us)" ;;
	esac
	[ -z "$win" ] || [[ $win =~ ^[0-9]+(ns|us|ms|s)$ ]] || fail "srpt_modes: '$e': the poll window is a duration such as 20us"
	[ -z "$procs" ] || [[ $procs =~ ^p[1-9][0-9]*$ ]] || fail "srpt_modes: '$e': the third field is pN, the daemon's GOMAXPROCS (e.g. adaptive:2ms:p1)"
	[ -z "$extra" ] || fail "srpt_modes: '$e': at most MODE:WINDOW:pN"
	name=$mode$win$procs
	for n in "${D_NAME[@]}"; do
		[ "$n" = "$name" ] && fail "srpt_modes: $name twice"
	done
	port=$((SRPT_PORT + i))
	[ "$port" = "$LIO_PORT" ] && fail "srpt_modes: daemon $i ($name) would listen on lio_port $LIO_PORT"
	D_ENTRY+=("$e")
	D_MODE+=("$mode")
	D_WIN+=("$win")
	D_PROCS+=("${procs#p}")
	D_NAME+=("$name")
	D_PORT+=("$port")
	if [ ${#entries[@]} = 1 ]; then
		D_SUFFIX+=("")
		D_CONF+=(/etc/srptarget-bench.yaml)
		D_LOG+=(/tmp/bench/srptarget.log)
	else
		D_SUFFIX+=("-$name")
		D_CONF+=("/etc/srptarget-bench-$name.yaml")
		D_LOG+=("/tmp/bench/srptarget-$name.log")
	fi
done
ND=${#D_NAME[@]}
# PROF_D: the daemon that writes the CPU profiles.
PROF_D=0
if [ -n "$PROFILE_MODE" ]; then
	PROF_D=
	for i in "${!D_NAME[@]}"; do
		if [ "$PROFILE_MODE" = "${D_NAME[$i]}" ] || [ "$PROFILE_MODE" = "${D_ENTRY[$i]}" ]; then PROF_D=$i; fi
	done
	[ -n "$PROF_D" ] || fail "profile_mode=$PROFILE_MODE is not in srpt_modes ($SRPT_MODES)"
fi

# dlabel I: how checks name daemon I: "srptarget", or "srptarget NAME" with several.
dlabel() {
	if [ "$ND" = 1 ]; then echo srptarget; else echo "srptarget ${D_NAME[$1]}"; fi
}

# running I: daemon I runs (lib.sh pid_alive); daemon_gone I: the opposite.
running() { pid_alive "${D_PID[$1]:-}"; }
daemon_gone() { ! running "$1"; }

# daemons_ticks PID...: their CPU time (utime + stime, clock ticks) so far, summed.
daemons_ticks() {
	local p n=0 f
	for p in "$@"; do
		[ -r "/proc/$p/stat" ] || continue
		read -r -a f <"/proc/$p/stat" || continue
		n=$((n + f[13] + f[14]))
	done
	echo "$n"
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
step "srptarget serve: $ND daemon(s), completion ${D_NAME[*]}"
for i in "${!D_NAME[@]}"; do
	limits="  completion: ${D_MODE[$i]}"
	if [ -n "${D_WIN[$i]}" ]; then
		limits+=$'\n'"  poll_window: ${D_WIN[$i]}"
	fi
	cat >"${D_CONF[$i]}" <<EOF
# Generated by bench.sh: a memory LUN 0 and a null LUN 1 of ${SIZE_MIB} MiB, default limits
# (128 credits per channel, as LIO's ib_srpt) but the completion mode ${D_ENTRY[$i]},
# identity = node GUID of rxe0, as LIO's.
listeners:
  - address: 0.0.0.0
    port: ${D_PORT[$i]}
limits:
$limits
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
	cat "${D_CONF[$i]}"
	# The profile runs only between SIGUSR1 and SIGUSR2 (block below): --cpuprofile-wait.
	profargs=()
	[ "$PROFILE" = 1 ] && [ "$i" = "$PROF_D" ] && profargs=(--cpuprofile "$PROF" --cpuprofile-wait)
	genv=()
	[ -z "${D_PROCS[$i]}" ] || genv=("GOMAXPROCS=${D_PROCS[$i]}")
	echo "SRPTVM\$ ${genv[*]}${genv:+ }$BIN serve --config ${D_CONF[$i]} ${profargs[*]} >${D_LOG[$i]} 2>&1 &"
	env "${genv[@]}" "$BIN" serve --config "${D_CONF[$i]}" "${profargs[@]}" >"${D_LOG[$i]}" 2>&1 &
	D_PID[i]=$!
done
srpt_listening() { running "$1" && cm_listening "${D_PORT[$1]}"; }
for i in "${!D_NAME[@]}"; do
	if wait_for 30 srpt_listening "$i"; then
		record "$(dlabel "$i") listening" pass "completion ${D_ENTRY[$i]}, RDMA/CM port ${D_PORT[$i]} (pid ${D_PID[$i]})"
	else
		cat "${D_LOG[$i]}"
		fail "$(dlabel "$i") not listening on ${D_PORT[$i]}"
	fi
done

# ------------------------------------------------------------------ LIO
step "LIO ib_srpt: rd_mcp ${SIZE_MIB} MiB on port $LIO_PORT"
CHECK_DETAIL="rd_mcp ${SIZE_MIB} MiB, RDMA/CM port $LIO_PORT" check "LIO configfs" lio_setup_ramdisk "$LIO_PORT" "$SIZE_MIB" ||
	fail "LIO configuration"
wait_for 10 cm_listening "$LIO_PORT" || fail "ib_srpt not listening on $LIO_PORT"
# All identify themselves with the node GUID of rxe0: the add_target lines differ only
# in the port.
[ "$LIO_GUID" = "$RXE_GUID" ] || echo "SRPTVM: note: LIO service GUID $LIO_GUID, rxe0 node GUID $RXE_GUID"

# ------------------------------------------------------------------ prefill
step "prefill: every memory disk written once"
ch0=${CH_COUNTS%% *}
for i in "${!D_NAME[@]}"; do
	bench_login "$RXE_GUID" "${D_PORT[$i]}" "$ch0" 2 || fail "login to $(dlabel "$i")"
	d=$(srp_disk_for_lun 0) || fail "$(dlabel "$i"): no disk with LUN 0"
	t=$(uptime_s)
	bench_prefill "/dev/$d" || fail "prefill of $(dlabel "$i")'s /dev/$d: $(tail -3 /tmp/bench/prefill.txt)"
	record "prefill $(dlabel "$i")" pass "/dev/$d (LUN 0, memory), ${SIZE_MIB} MiB in $(since "$t") s"
	srp_logout >/dev/null || fail "logout from $(dlabel "$i")"
done
bench_login "$LIO_GUID" "$LIO_PORT" "$ch0" 1 || fail "login to LIO"
d=$(srp_disks | head -1)
t=$(uptime_s)
bench_prefill "/dev/$d" || fail "prefill of LIO's /dev/$d: $(tail -3 /tmp/bench/prefill.txt)"
record "prefill LIO" pass "/dev/$d (rd_mcp), ${SIZE_MIB} MiB in $(since "$t") s"
srp_logout >/dev/null || fail "logout from LIO"

# ------------------------------------------------------------------ rounds
# IDLE_WORST: the most CPU (% of one CPU) the daemons not under test used during a block,
# and which block that was. An idle daemon (no session) must not spin, whatever its mode:
# otherwise it would take CPU from the target being measured.
IDLE_WORST=0
IDLE_WORST_AT=
# block srpt ROUND CH I | block lio ROUND CH: log in to daemon I or to LIO with
# ch_count=CH, run the jobs on its disk(s), log out, record one result row.
# profile_stop I CH: daemon I stops its CPU profile (SIGUSR2), kept as the profile of ch_count CH.
profile_stop() {
	# The daemon writes FILE.tmp and renames it: FILE appears complete.
	kill -USR2 "${D_PID[$1]}"
	if wait_for 20 test -s "$PROF"; then
		mv "$PROF" "/tmp/bench/srptarget.cpu.ch$2.pprof"
	else
		echo "SRPTVM: no profile written: $(grep -i 'CPU profile' "${D_LOG[$1]}")"
	fi
}

block() {
	local kind=$1 round=$2 ch=$3 i=${4:-} profiled=0 mark t got_ch nfail=0 errs lun l d what pid='' o others=() ot0 idle
	if [ "$kind" = srpt ]; then
		[ "$PROFILE" = 1 ] && [ "$i" = "$PROF_D" ] && [ "$round" = "$PROFILE_ROUND" ] && [[ " $PROFILE_CH " == *" $ch "* ]] && profiled=1
		what="$(dlabel "$i") r$round ch$ch"
		running "$i" || fail "$(dlabel "$i") is not running any more: $(tail -3 "${D_LOG[$i]}")"
		pid=${D_PID[$i]}
	else
		what="LIO r$round ch$ch"
	fi
	for o in "${!D_PID[@]}"; do
		[ "$o" = "$i" ] || others+=("${D_PID[$o]}")
	done
	step "$what$([ $profiled = 1 ] && echo ", CPU profile")"
	mark=$(dmesg_mark)
	t=$(uptime_s)
	ot0=$(daemons_ticks "${others[@]}")
	if [ "$kind" = srpt ]; then
		bench_login "$RXE_GUID" "${D_PORT[$i]}" "$ch" 2
	else
		bench_login "$LIO_GUID" "$LIO_PORT" "$ch" 1
	fi || {
		record "$what" fail "login failed"
		srp_logout
		return 1
	}
	got_ch=$(cat "$BENCH_HOST/ch_count")
	if [ "$kind" = srpt ]; then
		[ $profiled = 1 ] && kill -USR1 "$pid"
		for lun in $SRPT_LUNS; do
			case $lun in mem) l=0 ;; null) l=1 ;; esac
			d=$(srp_disk_for_lun $l) || { nfail=$((nfail + 1)); continue; }
			run_jobs "$round" "$ch" "srpt-$lun${D_SUFFIX[$i]}" "/dev/$d" "$pid" "$profiled" || nfail=$((nfail + $?))
		done
		[ $profiled = 1 ] && profile_stop "$i" "$ch"
	else
		d=$(srp_disks | head -1)
		run_jobs "$round" "$ch" lio "/dev/$d" "" 0 || nfail=$?
	fi
	srp_logout >/dev/null
	errs=$(srp_transport_errors "$mark" | grep -c .)
	idle=
	if [ ${#others[@]} -gt 0 ]; then
		# ticks per second = % of one CPU (USER_HZ 100)
		idle=$(awk -v n=$(($(daemons_ticks "${others[@]}") - ot0)) -v s="$(since "$t")" 'BEGIN { printf "%.1f", (s > 0 ? n / s : 0) }')
		if awk -v a="$idle" -v b="$IDLE_WORST" 'BEGIN { exit !(a > b) }'; then
			IDLE_WORST=$idle
			IDLE_WORST_AT=$what
		fi
		idle=", idle daemons $idle % CPU"
	fi
	if [ $nfail = 0 ] && [ "$got_ch" = "$ch" ] && [ "$errs" = 0 ]; then
		record "$what" pass "ch_count $got_ch, $(wc -w <<<"$JOBS") jobs$([ "$kind" = srpt ] && echo " x ${SRPT_LUNS// /+}"), $(since "$t") s$idle"
	else
		record "$what" fail "ch_count $got_ch (want $ch), $nfail failed jobs, $errs transport error lines$idle"
	fi
}

bench_t0=$(uptime_s)
for round in $(seq 1 "$ROUNDS"); do
	rot=$(((round - 1) % ND))
	for ch in $CH_COUNTS; do
		for k in $(seq 0 $((ND - 1))); do
			block srpt "$round" "$ch" $(((k + rot) % ND))
		done
		block lio "$round" "$ch"
	done
done
bench_s=$(since "$bench_t0")
bench_record_runs "$bench_s"
# 100 clock ticks per second: a daemon without a session that wakes now and then stays far
# below 5 % of one CPU; a spinning one is near 100 %.
if awk -v a="$IDLE_WORST" 'BEGIN { exit !(a < 5) }'; then
	record "idle daemons" pass "at most $IDLE_WORST % of one CPU during another target's block${IDLE_WORST_AT:+ ($IDLE_WORST_AT)}"
else
	record "idle daemons" fail "$IDLE_WORST % of one CPU during $IDLE_WORST_AT: a daemon without a session spins"
fi

# ------------------------------------------------------------------ stop
step "srptarget SIGTERM"
for i in "${!D_PID[@]}"; do
	kill -TERM "${D_PID[$i]}"
done
for i in "${!D_PID[@]}"; do
	if wait_for 45 daemon_gone "$i"; then
		wait "${D_PID[$i]}"
		drc=$?
		check_eq "$(dlabel "$i") SIGTERM" "exit 0" "exit $drc"
	else
		record "$(dlabel "$i") SIGTERM" fail "still running 45 s after SIGTERM"
		kill -KILL "${D_PID[$i]}"
	fi
done

record_kernel_log

# ------------------------------------------------------------------ output
dmesg -n 1
{
	bench_info_guest
	echo "BENCHINFO srptarget=$("$BIN" version 2>&1 | head -1)"
	echo "BENCHINFO lio=rd_mcp ${SIZE_MIB} MiB, srpt attrib $(cat "$BENCH_CFG"/srpt/*/*/attrib/srp_sq_size 2>/dev/null | head -1) sq, srp_max_req_size $(cat /sys/module/ib_srpt/parameters/srp_max_req_size)"
	echo "BENCHINFO srpt_modes=$SRPT_MODES"
	for i in "${!D_NAME[@]}"; do
		dtargets=
		for l in $SRPT_LUNS; do dtargets+="${dtargets:+,}srpt-$l${D_SUFFIX[$i]}"; done
		echo "BENCHINFO srpt_daemon=${D_NAME[$i]} completion=${D_MODE[$i]} poll_window=${D_WIN[$i]:-default} port=${D_PORT[$i]} targets=$dtargets"
	done
	bench_info_run "$bench_s"
	echo "BENCHINFO profile=$PROFILE round=$PROFILE_ROUND ch=$PROFILE_CH mode=${D_NAME[$PROF_D]}"
} | tee /tmp/bench/info.txt
bench_print_results
echo "SRPTVM-BENCH: daemon log begin"
tail -n 200 "${D_LOG[@]}"
echo "SRPTVM-BENCH: daemon log end"
finish
