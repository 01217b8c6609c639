# stress-lib.sh - helpers for guest/stress.sh (the fault scenarios of `make stress`).
# stress.sh sources /lab/lib.sh first, then this file (put in the guest as
# /lab/stress-lib.sh by integration/vm/stress.sh through SRPT_VM_FILES).
#
# The daemon
#   daemon_start                   srptarget serve in the background (a new instance);
#                                  its log in $DLOG, streamed to the console through a
#                                  filter that thins out the per-login/per-channel lines
#   daemon_alive                   the current instance runs (a zombie counts as gone)
#   daemon_wait_listening SECS     its RDMA/CM listeners are up
#   daemon_crashes FILE            panic/fatal lines in a daemon log (none wanted)
#   daemon_open_channels           channels the current instance logged in and has not
#                                  closed yet (from its log)
#   daemon_goroutines NAME         SIGQUIT: the goroutine dump, counted (those not of the
#                                  Go runtime); sets GR_COUNT and GR_FILE (a histogram by
#                                  creating function)
# Resources of the daemon process (/proc)
#   res_now                        "threads fds rss_kib"
#   res_fds                        the daemon's open files by kind
#   res_check NAME BEFORE AFTER [THREAD_SLACK RSS_SLACK_KIB [T0]]
#                                  record whether AFTER stays within the bounds of BEFORE
#   peak_since T0                  highest threads and RSS sampled since uptime T0
#   wait_quiet SECS FDS            no channel open and the fd count back to FDS
# SRP logins (several at once, per SCSI host)
#   login_host OPTS                add_target OPTS (the target's id/dest prepended);
#                                  sets NEW_HOST (hostN) of the session it made
#   host_disks hostN               "LUN:sdX" pairs of a SCSI host, by LUN
#   host_lun_dev hostN LUN         /dev/sdX of LUN on that host
#   logout_host hostN              delete its remote port, wait for its disks to go
#   logout_all                     every SRP session
# fio
#   fio_check NAME ARGS...         run fio (crc32c verify, verify_fatal) and record
#                                  pass/fail with the writes and verify reads it did
#   fio_quiet ARGS...              the same without recording; sets FIO_RC, FIO_SUMMARY
#   fio_loop_start NAME STOP ARGS...  fio runs back to back until the file STOP exists
#   fio_loop_wait SECS             wait for it; sets FL_RUNS FL_WRITES FL_READS FL_FAIL
# Kernel log
#   klog_excerpt MARK [MAX]        kernel lines since MARK, without rxe's speed noise
# shellcheck shell=bash
# shellcheck disable=SC2034 # variables are for stress.sh

BIN=${BIN:-/usr/local/bin/srptarget}
CONFIG=${CONFIG:-/etc/srptarget-stress.yaml}
STRESS_DIR=/tmp/stress
DLOG_DIR=$STRESS_DIR/daemon
FIO_DIR=$STRESS_DIR/fio
mkdir -p "$DLOG_DIR" "$FIO_DIR"
PID=
DLOG=
INSTANCE=0
TAILPID=

# ------------------------------------------------------------------ daemon
# The console gets every daemon line except that messages logged once per login,
# channel or task management function are shown for their first 6 occurrences
# and then every 100th (a rejected-login storm would otherwise take minutes of
# serial console). The whole log stays in $DLOG.
DLOG_FILTER='
BEGIN { split("login accepted|login rejected|closing channel|channel closed|last channel of the I_T nexus closed: nexus reset|task management function done|draining channel|login with MULTI-CHANNEL ACTION single: terminating the nexus'"'"'s channels|RDMA device removed", a, "|")
	for (i in a) noisy[a[i]] = 1 }
{
	n = split($0, f, "\t")
	msg = (n >= 3) ? f[3] : ""
	if (msg in noisy) {
		c[msg]++
		if (c[msg] > 6 && c[msg] % 100 != 0) next
		if (c[msg] > 6) { print p "(" c[msg] "th \"" msg "\") " $0; fflush(); next }
	}
	print p $0; fflush()
}'

daemon_start() {
	INSTANCE=$((INSTANCE + 1))
	DLOG=$DLOG_DIR/srptarget-$INSTANCE.log
	SAMPLES=$STRESS_DIR/samples-$INSTANCE
	: >"$DLOG"
	echo "SRPTVM\$ GOGC=$DAEMON_GOGC $BIN serve --config $CONFIG  (instance $INSTANCE, log $DLOG)"
	GOGC=$DAEMON_GOGC GOTRACEBACK=all "$BIN" serve --config "$CONFIG" >"$DLOG" 2>&1 &
	PID=$!
	STUCK=''
	# "uptime threads rss_kib" twice a second, for the peaks (res_check) and the record
	(
		while [ -r "/proc/$PID/status" ]; do
			awk -v u="$(cut -d' ' -f1 /proc/uptime)" '/^Threads:/ { t = $2 } /^VmRSS:/ { r = $2 }
				END { if (t) print u, t, r }' "/proc/$PID/status" 2>/dev/null
			sleep 0.5
		done
	) >"$SAMPLES" 2>/dev/null &
	follow_stop
	# $! is tail's PID; awk ends when tail does
	tail -n +1 -f "$DLOG" 2>/dev/null > >(awk -v p="srptarget[$INSTANCE]| " "$DLOG_FILTER") &
	TAILPID=$!
}

follow_stop() {
	if [ -n "$TAILPID" ]; then
		sleep 0.3 # let the last lines through
		kill "$TAILPID" 2>/dev/null
		wait "$TAILPID" 2>/dev/null
		TAILPID=
	fi
}

daemon_alive() {
	[ -n "$PID" ] && [ -r "/proc/$PID/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$PID/stat" 2>/dev/null
}

# daemon_listening: both configured listeners are up (RDMA/CM ids in LISTEN state).
daemon_listening() {
	daemon_alive && cm_listening "$PORT" && cm_listening "$PORT2"
}

daemon_wait_listening() {
	wait_for "$1" daemon_listening
}

# daemon_crashes FILE: Go runtime panics and fatal errors, and the daemon's own
# ERROR/panic-level lines that say the process is going down. A SIGQUIT dump we
# asked for starts with "SIGQUIT: quit" and is not counted.
daemon_crashes() {
	grep -nE '^(panic: |fatal error: |runtime: |SIGSEGV|SIGBUS|unexpected fault)|	(DPANIC|PANIC|FATAL)	' "$1" | head -5
}

# unclosed_channels: the channel numbers the current instance accepted and has
# not logged as closed.
unclosed_channels() {
	awk -F'\t' '$3 == "login accepted" || $3 == "channel closed" {
			if (match($4, /"channel": [0-9]+/)) { c = substr($4, RSTART + 11, RLENGTH - 11); n[c] += ($3 == "login accepted") ? 1 : -1 } }
		END { for (c in n) if (n[c] > 0) print c }' "$DLOG" | sort -n | tr '\n' ' ' | sed 's/ $//'
}

# new_unclosed_channels: unclosed_channels that no earlier check reported
# (STUCK, reset per instance), so that one stuck channel fails one scenario.
new_unclosed_channels() {
	local c out=''
	for c in $(unclosed_channels); do
		[[ " $STUCK " == *" $c "* ]] || out="$out $c"
	done
	echo "${out# }"
}

# channel_lines N: every log line of channel N of the current instance.
channel_lines() { grep -E "\"channel\": $1[,}]" "$DLOG"; }

# daemon_open_channels: the channels the daemon has open (srptarget stats on its control
# socket); empty when it does not answer.
daemon_open_channels() { dstat channels_open; }

# session_channels ID: the channels of initiator port ID's session (srptarget sessions).
session_channels() {
	"$BIN" sessions 2>/dev/null | awk -v id="$1" '/^initiator / { on = ($2 "" == id "") } on && /^  channel / { n++ } END { print n + 0 }'
}

# daemon_goroutines NAME: SIGQUIT the daemon (Go prints every goroutine and exits
# with status 2) and count the goroutines. GR_COUNT is the count, GR_FILE a
# histogram "N created-by-function" (the goroutines' creators, which say what
# kind of goroutine each is), GR_DUMP the dump. The daemon is gone afterwards.
daemon_goroutines() {
	local name=$1 mark
	follow_stop
	mark=$(wc -l <"$DLOG")
	kill -QUIT "$PID"
	if ! wait_for 20 eval '! daemon_alive'; then
		GR_COUNT=
		echo "SRPTVM: $name: daemon still running 20 s after SIGQUIT"
		return 1
	fi
	wait "$PID" 2>/dev/null
	GR_DUMP=$STRESS_DIR/goroutines-$name.txt
	tail -n +$((mark + 1)) "$DLOG" >"$GR_DUMP"
	GR_FILE=$STRESS_DIR/goroutines-$name.hist
	# Each goroutine's block starts "goroutine N gp=... m=... [state]:" and ends
	# with "created by F in goroutine M" (nothing for main). The signal dump
	# includes the runtime's own goroutines (GC workers, scavenger, ...), whose
	# number depends on GC timing: only those created outside package runtime
	# (and main) are counted.
	awk 'function out() { if (g && c !~ /^runtime\./) print (c ? c : "(main)") }
		/^goroutine [0-9]+ .*\[.*\]:/ { out(); g = ($2 != "0"); c = ""; next }
		/^created by / { c = $3 }
		END { out() }' "$GR_DUMP" | sort | uniq -c | sort -k2 >"$GR_FILE"
	GR_COUNT=$(awk '{ n += $1 } END { print n + 0 }' "$GR_FILE")
	[ "$(grep -cE '^goroutine [0-9]+ ' "$GR_DUMP")" -gt 0 ] || { echo "SRPTVM: $name: no goroutine dump in $DLOG"; return 1; }
	echo "SRPTVM: goroutines of instance $INSTANCE at SIGQUIT ($name): $GR_COUNT"
	sed 's/^/SRPTVM:   /' "$GR_FILE"
}

# goroutine_stacks [MAX]: the goroutines of the last dump (GR_DUMP) that are not
# the runtime's, grouped by identical stack (state and functions, without
# arguments), most frequent first; each group shown by the full stack (with
# files and lines) of its first goroutine.
goroutine_stacks() {
	awk -v max="${1:-8}" '
		function out() { if (g && c !~ /^runtime\./) { n[k]++; if (!(k in first)) first[k] = st } }
		/^goroutine [0-9]+ .*\[.*\]:/ { out(); g = ($2 != "0"); c = ""; st = $0; k = $0; sub(/^goroutine [0-9]+ [^[]*/, "", k); sub(/, [0-9]+ minutes/, "", k); next }
		/^created by / { c = $3; k = k " <- " $3; st = st "\n  " $0; next }
		/^[a-zA-Z_].*\(/ { f = $0; sub(/\([^()]*\)$/, "", f); k = k " " f; st = st "\n  " $0; next }
		/^\t/ { st = st "\n  " $0; next }
		END { out(); m = 0
			for (x in n) order[++m] = x
			for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (n[order[j]] > n[order[i]]) { t = order[i]; order[i] = order[j]; order[j] = t }
			for (i = 1; i <= m && i <= max; i++) printf "SRPTVM: %d goroutine(s) like\n  %s\n", n[order[i]], first[order[i]] }' "$GR_DUMP"
}

# ------------------------------------------------------------------ resources
res_now() {
	local t r f
	t=$(awk '/^Threads:/ { print $2 }' "/proc/$PID/status" 2>/dev/null)
	r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status" 2>/dev/null)
	f=$(find "/proc/$PID/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	echo "${t:-0} ${f:-0} ${r:-0}"
}

# res_fds: the daemon's open files grouped by kind (device files by name).
res_fds() {
	local f
	for f in "/proc/$PID/fd/"*; do readlink "$f"; done 2>/dev/null |
		sed -E 's/^(socket|pipe):\[[0-9]+\]$/\1/' | sort | uniq -c |
		awk '{ printf "%s%s=%s", (NR > 1 ? " " : ""), $2, $1 }'
}

# fds_of "threads fds rss": the fds.
fds_of() { local r; read -r -a r <<<"$1"; echo "${r[1]}"; }

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# peak_since T0: the highest "threads rss_kib" sampled since uptime T0.
peak_since() {
	awk -v t="$1" '$1 >= t { if ($2 > th) th = $2; if ($3 > r) r = $3 } END { print th + 0, r + 0 }' "$SAMPLES"
}

# res_check NAME BEFORE AFTER [THREAD_SLACK [RSS_SLACK_KIB [T0]]]: BEFORE and
# AFTER are res_now outputs. Open files must come back to exactly their number.
# RSS may grow by RSS_SLACK_KIB. OS threads: the Go runtime keeps the threads
# it made for blocking calls (cgo, syscalls) for reuse and never ends them, so
# the count after a scenario is its high-water mark; with T0 (the scenario's
# start) the bound is THREAD_SLACK over the larger of BEFORE and the peak
# sampled while the scenario ran (sessions open); without T0 over BEFORE. A
# leak grows with the number of sessions, which the repeated checks (cycles,
# rejects) compare at the same concurrency.
res_check() {
	local name=$1 b a tslack=${4:-$THREAD_SLACK} rslack=${5:-$RSS_SLACK_KIB} t0=${6:-} tbase pk peak
	read -r -a b <<<"$2"
	read -r -a a <<<"$3"
	tbase=${b[0]}
	if [ -n "$t0" ]; then
		read -r -a pk <<<"$(peak_since "$t0")"
		[ "${pk[0]}" -gt "$tbase" ] && tbase=${pk[0]}
		peak=", peak while running ${pk[0]} threads, $(mib "${pk[1]}") MiB"
	fi
	local detail open='' c
	detail="threads ${b[0]}->${a[0]} (bound $tbase+$tslack), fds ${b[1]}->${a[1]} (bound +0), RSS $(mib "${b[2]}")->$(mib "${a[2]}") MiB (bound +$(mib "$rslack") MiB)$peak"
	if [ -n "$t0" ]; then
		# after the scenario's logouts every channel must have closed
		open=$(new_unclosed_channels)
		if [ -n "$open" ]; then
			STUCK="$STUCK $open"
			detail="$detail; channels never closed: $open"
			for c in $open; do
				echo "SRPTVM: ---- log of channel $c, still open"
				channel_lines "$c" | cut -c1-600
			done
		fi
	fi
	if [ -z "$open" ] && [ "${a[1]}" -le "${b[1]}" ] && [ "${a[0]}" -le $((tbase + tslack)) ] && [ "${a[2]}" -le $((b[2] + rslack)) ]; then
		record "$name" pass "$detail"
	else
		record "$name" fail "$detail; open files now: $(res_fds)"
		return 1
	fi
}

# wait_quiet SECS FDS: no channel open (by the log; channels already reported
# as stuck aside) and at most FDS open files.
quiet() {
	local r
	read -r -a r <<<"$(res_now)"
	[ -z "$(new_unclosed_channels)" ] && [ "${r[1]}" -le "$1" ]
}
wait_quiet() {
	wait_for "$1" quiet "$2"
	sleep 1 # let the Go runtime settle its threads and the allocator
}

# ------------------------------------------------------------------ SRP logins
scsi_hosts() {
	local h
	for h in /sys/class/scsi_host/*; do [ -e "$h" ] && echo "${h##*/}"; done | sort
}

# login_host OPTS: add_target with the target's identifiers and OPTS (which may
# override dest=). Sets NEW_HOST to the SCSI host it created (add_target returns
# after ib_srp's SCSI scan) or returns 1; LOGIN_ERR says why.
login_host() {
	local opts="id_ext=$ID_EXT,ioc_guid=$IOC_GUID,$1" before after f
	case $1 in *dest=*) ;; *) opts="$opts,dest=$RXE_IP4:$PORT" ;; esac
	before=$(scsi_hosts)
	f=/sys/class/infiniband_srp/srp-$RXE-1/add_target
	NEW_HOST='' LOGIN_ERR=''
	modprobe sd_mod && modprobe sg
	[ -d /sys/module/ib_srp ] || modprobe ib_srp || { LOGIN_ERR="modprobe ib_srp failed"; return 1; }
	[ -e "$f" ] || { LOGIN_ERR="no $f"; return 1; }
	echo "SRPTVM\$ echo $opts > $f"
	if ! LOGIN_ERR=$({ echo "$opts" >"$f"; } 2>&1); then
		LOGIN_ERR=${LOGIN_ERR##*: }
		return 1
	fi
	after=$(scsi_hosts)
	NEW_HOST=$(grep -vxF -f <(echo "$before") <<<"$after" | head -1)
	[ -n "$NEW_HOST" ] || { LOGIN_ERR="add_target succeeded but no new SCSI host"; return 1; }
}

# host_disks hostN: "LUN:sdX" for each disk of the host, sorted by LUN.
host_disks() {
	local d a
	for d in /sys/class/scsi_host/"$1"/device/target*/*:*:*:*/block/*; do
		[ -e "$d" ] || continue
		a=${d%/block/*}
		a=${a##*/}
		echo "${a##*:}:${d##*/}"
	done | sort -n
}

host_luns() { host_disks "$1" | cut -d: -f1 | tr '\n' ' ' | sed 's/ $//'; }

host_lun_dev() {
	local l
	l=$(host_disks "$1" | grep -m1 "^$2:") || return 1
	echo "/dev/${l#*:}"
}

# wait_host_luns hostN "L1 L2 ...": the host has disks for exactly these LUNs.
host_has_luns() { [ "$(host_luns "$1")" = "$2" ]; }
wait_host_luns() { wait_for "${3:-30}" host_has_luns "$1" "$2"; }

host_num() { echo "${1#host}"; }
rport_of() { echo "/sys/class/srp_remote_ports/port-$(host_num "$1"):1"; }

logout_host() {
	local p disks
	p=$(rport_of "$1")
	disks=$(host_disks "$1" | cut -d: -f2 | tr '\n' ' ')
	[ -e "$p/delete" ] || { echo "no $p"; return 1; }
	run sh -c "echo 1 > $p/delete"
	wait_for 60 eval "[ ! -e /sys/class/scsi_host/$1 ]" || { echo "$1 still present"; return 1; }
	echo "logged out $1 (disks $disks)"
}

# logout_all: log out every SRP session left (a failed scenario may leave one,
# and ib_srp refuses a second login with the same identifiers: EEXIST).
logout_all() {
	local p n
	for p in /sys/class/srp_remote_ports/port-*; do
		[ -e "$p" ] || continue
		n=${p##*/port-}
		logout_host "host${n%:1}"
	done
}

# ------------------------------------------------------------------ fio
# fio_quiet ARGS...: fio with crc32c verify that stops at the first verify
# error; its output in FIO_OUT. Sets FIO_RC, FIO_WRITES, FIO_READS (the verify
# reads of a write job: "issued rwts: total=READS,WRITES"), FIO_VERR (verify
# error lines), FIO_IOERR (I/O error lines), FIO_SUMMARY.
FIO_N=0
fio_quiet() {
	local issued
	FIO_N=$((FIO_N + 1))
	FIO_OUT=$FIO_DIR/fio-$FIO_N.txt
	echo "SRPTVM\$ fio $* (output $FIO_OUT)" >&2
	fio --ioengine=libaio --verify=crc32c --verify_fatal=1 --eta=never --group_reporting \
		--output-format=normal "$@" >"$FIO_OUT" 2>&1
	FIO_RC=$?
	issued=$(sed -n 's/.*issued rwts: total=\([0-9]*\),\([0-9]*\),.*/\1 \2/p' "$FIO_OUT" | head -1)
	FIO_READS=${issued% *} FIO_WRITES=${issued#* }
	FIO_READS=${FIO_READS:-0} FIO_WRITES=${FIO_WRITES:-0}
	FIO_VERR=$(grep -ciE 'verify failed|bad magic|bad header|verify: |verify type mismatch|err=84' "$FIO_OUT")
	FIO_IOERR=$(grep -ciE 'io_u error|Input/output error|No such device' "$FIO_OUT")
	FIO_SUMMARY="$FIO_WRITES writes, $FIO_READS verify reads, $FIO_VERR verify errors, $FIO_IOERR I/O errors, fio exit $FIO_RC"
	return $FIO_RC
}

# fio_check NAME ARGS...: fio_quiet and record; a pass needs exit 0, writes and,
# unless the job writes only (do_verify=0), verify reads; no verify or I/O error.
fio_check() {
	local name=$1 needreads=1
	shift
	case " $* " in *" --do_verify=0 "*) needreads=0 ;; esac
	case " $* " in *" --verify_only"*) needreads=1 ;; esac
	fio_quiet "$@"
	local ok=1
	[ "$FIO_RC" = 0 ] && [ "$FIO_VERR" = 0 ] && [ "$FIO_IOERR" = 0 ] || ok=0
	case " $* " in
	*" --verify_only"*) [ "$FIO_READS" -gt 0 ] || ok=0 ;;
	*) [ "$FIO_WRITES" -gt 0 ] || ok=0
		[ $needreads = 0 ] || [ "$FIO_READS" -gt 0 ] || ok=0 ;;
	esac
	if [ $ok = 1 ]; then
		record "$name" pass "$FIO_SUMMARY${FIO_NOTE:+; $FIO_NOTE}"
		FIO_NOTE=
		return 0
	fi
	sed 's/^/fio| /' "$FIO_OUT" | head -60
	record "$name" fail "$FIO_SUMMARY: $(grep -m1 -iE 'verify|error|bad' "$FIO_OUT")"
	FIO_NOTE=
	return 1
}

# fio_loop_start NAME STOPFILE ARGS...: fio runs (ARGS) back to back, in the
# background, until STOPFILE exists (looked at between runs, so at least one
# run), or until a run fails. The loop's summary goes to $STRESS_DIR/NAME.loop.
fio_loop_start() {
	local name=$1 stop=$2
	shift 2
	FL_FILE=$STRESS_DIR/$name.loop
	rm -f "$stop" "$FL_FILE"
	(
		runs=0 writes=0 reads=0 failed=
		while :; do
			fio_quiet "$@" 2>/dev/null
			runs=$((runs + 1)) writes=$((writes + FIO_WRITES)) reads=$((reads + FIO_READS))
			echo "SRPTVM: fio loop $name run $runs: $FIO_SUMMARY"
			if [ "$FIO_RC" != 0 ] || [ "$FIO_VERR" != 0 ] || [ "$FIO_IOERR" != 0 ] || [ "$FIO_WRITES" = 0 ] || [ "$FIO_READS" = 0 ]; then
				failed="run $runs: $FIO_SUMMARY: $(grep -m1 -iE 'verify|error|bad' "$FIO_OUT")"
				sed 's/^/fio| /' "$FIO_OUT" | head -60
				break
			fi
			[ -e "$stop" ] && break
		done
		echo "$runs $writes $reads $failed" >"$FL_FILE"
	) &
	FL_PID=$!
}

# fio_loop_wait SECS: wait for the loop; FL_FAIL is empty on success.
fio_loop_wait() {
	FL_RUNS=0 FL_WRITES=0 FL_READS=0 FL_FAIL=
	if ! wait_for "$1" eval "! kill -0 $FL_PID"; then
		FL_FAIL="fio loop still running ${1}s after the stop request"
		return 1
	fi
	wait "$FL_PID"
	read -r FL_RUNS FL_WRITES FL_READS FL_FAIL <"$FL_FILE"
	[ -z "$FL_FAIL" ]
}

# ------------------------------------------------------------------ block trace
# rq_trace_start sdX: record the requests the block layer issues to sdX
# (tracepoint block:block_rq_issue). rq_trace_stop KIB: stop; RQ_WRITES is the
# number of WRITE requests, RQ_FULL those of exactly KIB KiB, RQ_HIST "KiB xN"
# by size. A request is what ib_srp turns into one SRP_CMD.
RQ_T=/sys/kernel/tracing
rq_trace_start() {
	local dev
	dev=$(cat "/sys/block/$1/dev")
	echo 0 >"$RQ_T/tracing_on" && : >"$RQ_T/trace" || return 1
	# the kernel's dev_t: major << 20 | minor
	echo "dev == $(((${dev%:*} << 20) | ${dev#*:}))" >"$RQ_T/events/block/block_rq_issue/filter" &&
		echo 1 >"$RQ_T/events/block/block_rq_issue/enable" &&
		echo 1 >"$RQ_T/tracing_on"
}
rq_trace_stop() {
	echo 0 >"$RQ_T/tracing_on"
	echo 0 >"$RQ_T/events/block/block_rq_issue/enable"
	# "... block_rq_issue: 8,0 WS 8388608 () 2048 + 16384 [fio]"
	awk '{ for (i = 1; i <= NF; i++) if ($i == "block_rq_issue:") break
		if (i > NF || $(i + 2) !~ /W/) next
		for (j = i; j <= NF; j++) if ($j == "+") { n[$(j + 1) / 2]++; break } }
		END { for (k in n) print k, n[k] }' "$RQ_T/trace" | sort -n >/tmp/rq.hist
	RQ_WRITES=$(awk '{ s += $2 } END { print s + 0 }' /tmp/rq.hist)
	RQ_FULL=$(awk -v k="$1" '$1 == k { print $2 }' /tmp/rq.hist)
	RQ_FULL=${RQ_FULL:-0}
	RQ_HIST=$(awk '{ printf "%s%s KiB x%s", (NR > 1 ? ", " : ""), $1, $2 }' /tmp/rq.hist)
}

# ------------------------------------------------------------------ misc
klog_excerpt() {
	dmesg_since "$1" | grep -v 'speed is unknown' | head -n "${2:-40}"
}

# elapsed T0: seconds since uptime T0, whole.
elapsed() { awk -v a="$1" -v b="$(uptime_s)" 'BEGIN { printf "%d", b - a + 0.5 }'; }

# disk_writes sdX: "write_ios write_sectors" (/sys/block/sdX/stat).
disk_writes() { awk '{ print $5, $7 }' "/sys/block/$1/stat" 2>/dev/null || echo "0 0"; }
