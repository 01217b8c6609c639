#!/bin/bash
# bench-2host-init.sh - the initiator host of the two-host bench (integration/vm/bench-2host.sh):
# soft-RoCE on the virtio NIC eth0, the kernel's ib_srp, and the fio jobs of the one-VM bench
# (guest/bench.sh, same parameters, same BENCH lines through bench_fio_job) against the two
# targets of the target VM (guest/bench-2host-target.sh): srptarget's memory LUN (target
# srpt-mem) and LIO's rd_mcp RAM disk (target lio).
#
# Each target's disk is written once over its whole size before the first round. Per round,
# per ch_count: log in to srptarget, run every job, log out; then the same with LIO. So the
# targets alternate, and drift of the host touches both alike.
#
# In round profile_round the srptarget blocks are profiled: after login the initiator asks
# the target's control server (guest/bench-2host-target.sh, TCP port ctl_port) to start the
# daemon's CPU profile, after the jobs to stop it, and receives the file; at the end the
# profiles are printed in base64 between "SRPTVM-BENCH: file begin NAME" and
# "SRPTVM-BENCH: file end NAME" (NAME srptarget.cpu.chN.pprof), as guest/bench.sh prints its
# own. The BENCH lines of those runs say profiled=1.
#
# Before each block the initiator asks the target to stop (SIGSTOP) the daemons it is not
# about to measure ("only TARGET"): an idle Go daemon still has timers and threads that wake,
# and those of one daemon must not count in another's CPU per I/O. With a variant, the two
# daemons take turns at going first, round by round.
#
# In round trace_round (default none) the target traces every job of every block with the
# kernel's tracepoints ("trace-start", "trace-stop NAME"): system calls per process, thread
# and kind, context switches and wake-ups per thread, softirqs and interrupts, printed on the
# target's console (target.log) as lines "TRACE TARGET-chN-JOB ..." (the hist triggers of
# tracefs, which slow that round down: its rows compare with each other only). With
# trace_kind=timeline it traces instead the path of each I/O through the target host, from
# the packet rxe receives to the post that answers it (kprobes on rxe_rcv, rxe_post_send and
# rxe_xmit_packet, the scheduler's switches and wake-ups, system calls, interrupts and
# softirqs): per stage the count, mean and percentiles, and the trace of the I/Os at the 50th,
# 75th, 90th and 95th percentile and of the slowest ("TRACE NAME timeline ..." lines; read
# them at queue depth 1, where the packet before a post is the command it answers).
#
# With insn=1 (bench-2host.sh, when its qemu plugin counts the target VM's instructions) the
# target is measured idle first: once it says it is ready (its control server's "ready"), every
# daemon stopped ("only lio"), idle_s seconds (default 10) in which nothing is asked of it. The
# report subtracts the instructions the target executes per second there (timer ticks, the
# sampler, LIO's and the kernel's own work) from each job's, which are paid per second, not
# per I/O. The window is printed as "BENCHINFO idle=UP0,UP1" (this VM's uptime, as the BENCH
# lines' up0 and up1).
#
# The cpu/ctxt/irq counters of the BENCH lines are this VM's; the host replaces them with
# the target VM's (bench-2host.sh, bench -target-samples), since the target host's CPU is
# what the bench compares. The step lines carry the guest uptime, which the host maps to its
# own clock.
#
# Arguments (k=v), all optional:
#   rounds=4  runtime=5  ramp=1  ch_counts="1 2"  size_mib=256
#   jobs="randread-4k-qd32 randwrite-4k-qd32 read-128k-qd32 write-128k-qd32 randread-4k-qd1"
#   target_ip=169.254.50.1  target_guid=000000fffe000001 (node GUID of the target's rxe0,
#   from its MAC 02:00:00:00:00:01)  srpt_port=5555  lio_port=5000  srp_params=
#   profile=1  profile_round=2 (the last round if there are fewer)  ctl_port=5600
#   trace_round=0 (none)  trace_kind= (histograms; or timeline)  insn=0  idle_s=10
#   netdev=eth0 mac= ip4= ip6= (setup_rxe, lib.sh)
# shellcheck disable=SC2317 # functions called through wait_for
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=bench-lib.sh
. /lab/bench-lib.sh

bench_args
# Four rounds, not the one-VM bench's three: the profiled round's instructions are not counted
# (the profiler's work would count as the daemon's), and three rounds remain for the medians.
ROUNDS=$(arg rounds 4)
BENCH_DEST=$(arg target_ip 169.254.50.1)
TGUID=$(arg target_guid 000000fffe000001)
CTL_PORT=$(arg ctl_port 5600)
# variant=NAME: the target VM runs a second daemon on srpt_port + 1 (bench-2host-target.sh),
# measured as target srpt-mem-NAME right after the first in every round.
VARIANT=$(arg variant "")
# trace_round=N: the round whose jobs the target traces (see above); 0, none.
TRACE_ROUND=$(arg trace_round 0)
# trace_kind=timeline: that round traces each I/O's path through the target instead
# (bench-2host-target.sh, "trace-start timeline").
TRACE_KIND=$(arg trace_kind "")
INSN=$(arg insn 0)
IDLE_S=$(arg idle_s 10)
BENCH_IDLE=

BENCH_RAW=/tmp/bench/raw.txt
BENCH_FAILED=0
BENCH_ERRS=0
mkdir -p /tmp/bench
: >"$BENCH_RAW"
bench_write_snap_script
bench_rxe_eth0

# login_retry NAME PORT CH: the target VM boots at the same time as this one; retry until
# its target listens (5 min).
login_retry() {
	local t0 i=0
	t0=$(uptime_s)
	until bench_login "$TGUID" "$2" "$3" 1 >/tmp/bench/login.txt 2>&1; do
		srp_logout >/dev/null 2>&1
		i=$((i + 1))
		[ "$(since "$t0" | cut -d. -f1)" -lt 300 ] || { cat /tmp/bench/login.txt; return 1; }
		sleep 3
	done
	[ $i = 0 ] || echo "SRPTVM: $1 login after $i retries, $(since "$t0") s"
}

step "prefill: both memory disks written once"
ch0=${CH_COUNTS%% *}
for tp in srptarget:$SRPT_PORT LIO:$LIO_PORT ${VARIANT:+variant:$((SRPT_PORT + 1))}; do
	login_retry "${tp%:*}" "${tp#*:}" "$ch0" || fail "login to ${tp%:*} at $BENCH_DEST:${tp#*:}"
	d=$(srp_disks | head -1)
	t=$(uptime_s)
	bench_prefill "/dev/$d" || fail "prefill of ${tp%:*}'s /dev/$d: $(tail -3 /tmp/bench/prefill.txt)"
	record "prefill ${tp%:*}" pass "/dev/$d, ${SIZE_MIB} MiB in $(since "$t") s"
	srp_logout >/dev/null || fail "logout from ${tp%:*}"
done

# ctl CMD: one command to the target's control server, its answer on stdout (the target VM
# boots alongside this one; it has listened since before its srptarget took logins).
ctl() {
	local i
	for i in 1 2 3 4 5; do
		if exec 9<>"/dev/tcp/$BENCH_DEST/$CTL_PORT"; then
			echo "$1" >&9
			cat <&9
			exec 9<&-
			return 0
		fi 2>/dev/null
		sleep 1
	done
	echo "SRPTVM: the target's control server at $BENCH_DEST:$CTL_PORT does not answer" >&2
	return 1
}

# block NAME TARGET PORT ROUND CH: log in, every job, log out, one result row.
block() {
	local name=$1 target=$2 port=$3 round=$4 ch=$5 mark t got_ch nfail=0 errs d j p profiled=0 prof
	local what="$name r$round ch$ch"
	[ "$PROFILE" = 1 ] && [ "$target" = srpt-mem ] && [ "$round" = "$PROFILE_ROUND" ] && profiled=1
	step "$what$([ $profiled = 1 ] && echo ", CPU profile")"
	[ "$(ctl "only $target")" = ok ] || echo "SRPTVM: the target did not stop the daemons not measured"
	mark=$(dmesg_mark)
	t=$(uptime_s)
	login_retry "$name" "$port" "$ch" || {
		record "$what" fail "login failed"
		return 1
	}
	got_ch=$(cat "$BENCH_HOST/ch_count")
	d=$(srp_disks | head -1)
	if [ $profiled = 1 ] && [ "$(ctl profile-start)" != ok ]; then
		echo "SRPTVM: the daemon's profile did not start"
		profiled=0
	fi
	for j in $JOBS; do
		read -r -a p <<<"$(job_params "$j")"
		[ "$round" = "$TRACE_ROUND" ] && ctl "trace-start${TRACE_KIND:+ $TRACE_KIND}" >/dev/null
		bench_fio_job "$round" "$ch" "$target" "$j" "/dev/$d" "" "$profiled" "${p[@]}" || nfail=$((nfail + 1))
		[ "$round" = "$TRACE_ROUND" ] && ctl "trace-stop $target-ch$ch-$j" >/dev/null
	done
	if [ $profiled = 1 ]; then
		prof=/tmp/bench/srptarget.cpu.ch$ch.pprof
		ctl profile-stop >"$prof"
		[ -s "$prof" ] || echo "SRPTVM: no profile came back from the target"
	fi
	srp_logout >/dev/null
	errs=$(srp_transport_errors "$mark" | grep -c .)
	if [ $nfail = 0 ] && [ "$got_ch" = "$ch" ] && [ "$errs" = 0 ]; then
		record "$what" pass "ch_count $got_ch, $(wc -w <<<"$JOBS") jobs, $(since "$t") s"
	else
		record "$what" fail "ch_count $got_ch (want $ch), $nfail failed jobs, $errs transport error lines"
	fi
}

if [ "$INSN" = 1 ]; then
	step "the target idle for $IDLE_S s"
	t=$(uptime_s)
	until [ "$(ctl ready)" = ok ]; do
		[ "$(since "$t" | cut -d. -f1)" -lt 300 ] || fail "the target did not say it is ready"
		sleep 2
	done
	[ "$(ctl "only lio")" = ok ] || echo "SRPTVM: the target did not stop the daemons"
	a=$(uptime_s)
	sleep "$IDLE_S"
	BENCH_IDLE=$a,$(uptime_s)
	record "idle target" pass "$IDLE_S s from uptime $a"
fi

bench_t0=$(uptime_s)
for round in $(seq 1 "$ROUNDS"); do
	for ch in $CH_COUNTS; do
		# With a variant, the two daemons take turns at going first, round by round.
		if [ -n "$VARIANT" ] && [ $((round % 2)) = 0 ]; then
			block "srptarget $VARIANT" "srpt-mem-$VARIANT" "$((SRPT_PORT + 1))" "$round" "$ch"
			block srptarget srpt-mem "$SRPT_PORT" "$round" "$ch"
		else
			block srptarget srpt-mem "$SRPT_PORT" "$round" "$ch"
			[ -z "$VARIANT" ] || block "srptarget $VARIANT" "srpt-mem-$VARIANT" "$((SRPT_PORT + 1))" "$round" "$ch"
		fi
		block LIO lio "$LIO_PORT" "$round" "$ch"
	done
done
bench_s=$(since "$bench_t0")
# The target's samples, which it keeps in a file, on its console: one more sample after the
# last run first. The host stops the target when this VM ends.
sleep 1
[ "$(ctl samples)" = ok ] || echo "SRPTVM: the target did not print its samples"
bench_record_runs "$bench_s"
record_kernel_log

dmesg -n 1
{
	bench_info_guest
	bench_info_run "$bench_s"
	echo "BENCHINFO profile=$PROFILE round=$PROFILE_ROUND ch=$CH_COUNTS"
	[ -z "$BENCH_IDLE" ] || echo "BENCHINFO idle=$BENCH_IDLE"
} | tee /tmp/bench/info.txt
bench_print_results
finish
