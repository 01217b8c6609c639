#!/bin/bash
# stress.sh - the faults a SAN sees, against srptarget, with the data checked:
# the guest side of integration/vm/stress.sh (`make stress`, `make stress-quick`).
#
# Every scenario moves data with fio --verify=crc32c --verify_fatal=1 and must
# end with no verify error, the daemon running (no panic or fatal error in its
# log), and the daemon's resources back where they were (see "Bounds").
#
# Scenarios, in the order they run (instance = srptarget process):
#   instance 1, "reference": one login and logout, then SIGQUIT: the number of
#     goroutines of an idle daemon that has served a session (the yardstick for
#     the goroutine checks; the daemon has no debug endpoint).
#   instance 2 runs multiport, large, cycles, resets, reload and rejects in turn, and is
#   then SIGQUIT for its goroutines:
#   (each of the scenarios below has its own file, guest/stress/NAME.sh, with
#   its description: multiport, large, cycles, resets, reload, rejects)
#   instance 3, "kill" (not with quick=1): guest/stress/kill.sh
#   instance 4, "devdel" (not with quick=1): guest/stress/devdel.sh
#   last instance, "hog": guest/stress/hog.sh
#
# Bounds (per scenario, measured on a quiet daemon: no channel open; the
# daemon has no debug endpoint, so /proc and a SIGQUIT goroutine dump it is):
#   open files (/proc/PID/fd): exactly back to their number;
#   OS threads (/proc/PID/status): at most THREAD_SLACK (4) over the larger of
#     the count before and the peak sampled while the scenario ran: the Go
#     runtime keeps every thread it made for blocking (cgo) calls and never
#     ends it, so the count after a scenario is its high-water mark;
#   RSS: at most RSS_SLACK_MIB (32 MiB) more. The daemon runs with GOGC=10
#     (daemon_gogc=): its heap holds the 64 MiB buffer pool and the 64 MiB
#     memory LUN, and with Go's default GOGC=100 garbage could grow by that
#     much again before a collection; a leaked buffer pool shows well above;
#   over the repeated part of cycles and rejects (from a quarter of the way to
#     the end, at the same number of open channels): threads
#     +REPEAT_THREAD_SLACK (2), RSS +REPEAT_RSS_MIB (8 MiB);
#   goroutines at SIGQUIT, not counting the Go runtime's own: at most
#     GOROUTINE_SLACK (0) more than the reference.
#
# Arguments (k=v): quick=1 (the CI subset: multiport, large 4 MiB direct only,
#   cycles=5, resets_secs=15, reloads=4, rejects=100, hog; no kill and devdel),
#   cycles=20, resets_secs=30, reloads=10, rejects=1000, port=5555,
#   port2=5556, only=LIST (comma
#   separated scenario names: run only these, for debugging);
#   hog: hog_rdma_timeout=10s (limits.rdma_timeout of the daemon instance;
#   empty: not written, the daemon's default 30s), hog_max_initiator_buffer=
#   (limits.max_initiator_buffer, e.g. 100%; empty: the daemon's default),
#   hog_secs= (how long srpflood holds the connection unless disconnected:
#   the timeout + 15 s), hog_commands=32 (per channel: more than the trickle lets through in rdma_timeout), hog_channels=4,
#   hog_trickle=500ms (0s: srpflood never receives), hog_source=169.254.50.9
#   (the second address srpflood connects from), hog_stall_re='^RDMA stalled: '
#   (the message of the daemon's WARN line).
# shellcheck disable=SC2317 # functions called through check/wait_for
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=stress-lib.sh
. /lab/stress-lib.sh
# The scenarios, one file each (integration/vm/guest/stress/; stress.sh on the host ships them):
# each defines scenario_NAME, called below in its turn.
for f in /lab/stress/*.sh; do
	# shellcheck source=/dev/null
	. "$f"
done

QUICK=$(arg quick 0)
if [ "$QUICK" = 1 ]; then
	CYCLES=$(arg cycles 5) RESET_SECS=$(arg resets_secs 15) REJECTS=$(arg rejects 100) RELOADS=$(arg reloads 4)
else
	CYCLES=$(arg cycles 20) RESET_SECS=$(arg resets_secs 30) REJECTS=$(arg rejects 1000) RELOADS=$(arg reloads 10)
fi
PORT=$(arg port 5555)
PORT2=$(arg port2 5556)
ONLY=$(arg only "")
THREAD_SLACK=$(arg thread_slack 4)
RSS_SLACK_KIB=$(($(arg rss_slack_mib 32) * 1024))
REPEAT_THREAD_SLACK=$(arg repeat_thread_slack 2)
REPEAT_RSS_KIB=$(($(arg repeat_rss_mib 8) * 1024))
GOROUTINE_SLACK=$(arg goroutine_slack 0)
# The daemon's Go heap holds the 64 MiB buffer pool and the memory LUN: with the
# default GOGC=100 its garbage could grow to that much again before a
# collection, so RSS would say little. GOGC=10 keeps it within a tenth.
DAEMON_GOGC=$(arg daemon_gogc 10)

LUN_DIR=/var/lib/srptarget-stress
L0_MIB=64
BAD_EXT=00000000deadbeef
STAMP_T0=$(uptime_s)

want() { [ -z "$ONLY" ] || [[ ,$ONLY, == *",$1,"* ]]; }

# scenario NAME: progress marker, the scenario's start time in SC_T0.
scenario() {
	SC_NAME=$1
	SC_T0=$(uptime_s)
	step "scenario $1: $2"
	SC_DMESG=$(dmesg_mark)
	if [ -n "$(ls /sys/class/srp_remote_ports 2>/dev/null)" ]; then
		echo "SRPTVM: sessions left by the previous scenario: logging them out"
		logout_all
	fi
}
# scenario_end: kernel lines of the scenario (capped) into the console log.
scenario_end() {
	echo "SRPTVM: ---- kernel log of $SC_NAME (the first 30 lines, then up to 60 of errors, resets and reconnects)"
	klog_excerpt "$SC_DMESG" 30
	dmesg_since "$SC_DMESG" | tail -n +31 | grep -iE 'WARNING|BUG|error|fail|timed? ?out|abort|reset|reconnect|reject|offline' | head -60
	echo "SRPTVM: ---- $SC_NAME took $(elapsed "$SC_T0") s"
	TIMES="$TIMES $SC_NAME=$(elapsed "$SC_T0")s"
}

# daemon_ok NAME: record that the daemon runs and logged no crash.
daemon_ok() {
	local c
	c=$(daemon_crashes "$DLOG")
	if daemon_alive && [ -z "$c" ]; then
		record "$1" pass "pid $PID running, no panic or fatal error in its log"
	else
		record "$1" fail "$(daemon_alive && echo running || echo "exited")${c:+: $c}"
		return 1
	fi
}

# goroutines_check NAME: SIGQUIT the daemon and compare with the reference.
goroutines_check() {
	local name=$1 diff
	if ! daemon_goroutines "$name"; then
		record "$name" fail "no goroutine dump: daemon did not exit on SIGQUIT"
		return 1
	fi
	diff=$(awk 'NR == FNR { r[$2] = $1; k[$2] = 1; next } { g[$2] = $1; k[$2] = 1 }
		END { for (x in k) if (r[x] + 0 != g[x] + 0) printf "%s%s %d->%d", (n++ ? ", " : ""), x, r[x], g[x] }' \
		"${REF_GR_FILE:-/dev/null}" "$GR_FILE")
	if [ "$GR_COUNT" = 0 ]; then
		record "$name" fail "no goroutine of the daemon's in the SIGQUIT dump ($GR_DUMP): cannot count"
	elif [ -z "$REF_GR" ]; then
		record "$name" fail "$GR_COUNT goroutines; no reference count to compare with"
	elif [ "$GR_COUNT" -le $((REF_GR + GOROUTINE_SLACK)) ]; then
		record "$name" pass "$GR_COUNT goroutines at SIGQUIT, reference $REF_GR (bound +$GOROUTINE_SLACK)${diff:+; by creator: $diff}"
	else
		echo "SRPTVM: ---- goroutine stacks of instance $INSTANCE (grouped; the dump is $GR_DUMP in the guest)"
		goroutine_stacks 10
		record "$name" fail "$GR_COUNT goroutines at SIGQUIT, reference $REF_GR (bound +$GOROUTINE_SLACK); by creator: $diff"
	fi
}

# login_wait NAME OPTS "LUNS": login_host, then wait for exactly these LUNs;
# records a failure (not a pass) when it does not work. Sets H.
login_wait() {
	local name=$1 opts=$2 luns=$3 t
	t=$(uptime_s)
	H=
	if ! login_host "$opts"; then
		record "$name" fail "add_target $opts: ${LOGIN_ERR:-failed}"
		return 1
	fi
	H=$NEW_HOST
	if ! wait_host_luns "$H" "$luns" 30; then
		record "$name" fail "$H has LUNs '$(host_luns "$H")' 30 s after the login, want '$luns'"
		return 1
	fi
	LOGIN_S=$(since "$t")
}

# ================================================================== setup
step "srptarget binary"
[ -x "$BIN" ] || fail "$BIN is absent: integration/vm/stress.sh builds it and passes it in"
libs=$(/lib64/ld-linux-x86-64.so.2 --list "$BIN" 2>&1)
grep -q 'not found' <<<"$libs" && fail "$BIN needs libraries the image lacks: $(grep 'not found' <<<"$libs" | awk '{print $1}' | tr '\n' ' ')"
grep -q 'librdmacm\.so' <<<"$libs" || fail "$BIN does not link librdmacm (built without cgo?)"
record "srptarget binary" pass "$(stat -c %s "$BIN") bytes, $("$BIN" version 2>&1 | head -1)"

# bash's process substitution uses /dev/fd, which devtmpfs does not have
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd

step "soft-RoCE"
setup_rxe || fail "soft-RoCE setup (rdma_rxe on dummy0)"
ID_EXT=$RXE_GUID IOC_GUID=$RXE_GUID
record rxe pass "rxe0 on $RXE_NETDEV, node GUID $RXE_GUID, $RXE_IP4"
# Only errors and worse on the console: reconnects and resets log a lot, and
# the kernel log is printed per scenario anyway.
dmesg -n 4

step "configuration $CONFIG"
mkdir -p "$LUN_DIR"
rm -f "$LUN_DIR"/*.img
cat >"$CONFIG" <<EOF
# Generated by stress.sh. Target identity: the node GUID of rxe0.
listeners:
  - address: "::"
    port: $PORT
  - address: $RXE_IP4
    port: $PORT2
limits:
  max_transfer_size: 8MiB
luns:
  - lun: 0
    backstore: memory
    size: ${L0_MIB}MiB
    thin_provisioning: false
    serial: stress0
  - lun: 1
    backstore: file
    path: $LUN_DIR/lun1.img
    create: true
    size: 256MiB
    serial: stress1
  - lun: 2
    backstore: file
    path: $LUN_DIR/lun2.img
    create: true
    size: 64MiB
    serial: stress2
  - lun: 3
    backstore: file
    path: $LUN_DIR/lun3.img
    create: true
    size: 64MiB
    serial: stress3
acls:
  # ib_srp's default initiator_ext 0
  - initiators: ["0x0000000000000000*"]
    luns: [0, 1]
  # the two initiator ports of the multiport scenario
  - initiators: ["0x00000000000000a1*"]
    luns: [2]
  - initiators: ["0x00000000000000b2*"]
    luns: [3]
EOF
cat "$CONFIG"
if "$BIN" validate --config "$CONFIG" >/tmp/validate.txt 2>&1; then
	record "srptarget validate" pass "$(head -1 /tmp/validate.txt)"
else
	cat /tmp/validate.txt
	fail "srptarget validate: $(head -1 /tmp/validate.txt)"
fi
echo "SRPTVM: quick=$QUICK cycles=$CYCLES resets_secs=$RESET_SECS rejects=$REJECTS; bounds: threads +$THREAD_SLACK, fds +0, RSS +$((RSS_SLACK_KIB / 1024)) MiB; repeated part: threads +$REPEAT_THREAD_SLACK, RSS +$((REPEAT_RSS_KIB / 1024)) MiB; goroutines +$GOROUTINE_SLACK"

# ================================================================== reference
scenario reference "goroutines of an idle daemon after one session"
daemon_start
daemon_wait_listening 30 || fail "srptarget not listening on ports $PORT and $PORT2 after 30 s: $(tail -3 "$DLOG")"
if login_wait "reference login" "ch_count=2" "0 1"; then
	dd if=/dev/urandom of=/tmp/ref.bin bs=1M count=4 status=none
	dd if=/tmp/ref.bin of="$(host_lun_dev "$H" 0)" bs=1M oflag=direct status=none
	logout_host "$H"
fi
wait_for 20 eval '[ "$(daemon_open_channels)" = 0 ]'
sleep 2
REF_RES=$(res_now)
echo "SRPTVM: reference resources (threads fds rss_kib): $REF_RES; open files: $(res_fds)"
REF_GR=
if daemon_goroutines reference && [ "$GR_COUNT" -gt 0 ]; then
	REF_GR=$GR_COUNT REF_GR_FILE=$GR_FILE
	record "reference goroutines" pass "$REF_GR goroutines after one login/logout (threads fds rss_kib before SIGQUIT: $REF_RES)"
else
	record "reference goroutines" fail "no goroutine dump"
fi
scenario_end

# ================================================================== instance 2
step "srptarget instance 2: warm-up"
daemon_start
daemon_wait_listening 30 || fail "srptarget not listening after 30 s: $(tail -3 "$DLOG")"
# Warm-up: a session creates the buffer pool and the device context; LUN 0
# (memory, allocated as written) is filled so that later writes do not grow
# the RSS the checks look at.
if login_wait "warm-up login" "ch_count=2" "0 1"; then
	fio_quiet --name=fill --filename="$(host_lun_dev "$H" 0)" --direct=1 --rw=write --bs=1M \
		--iodepth=8 --size=${L0_MIB}M --verify=0 >/dev/null
	echo "SRPTVM: LUN 0 filled: $FIO_SUMMARY"
	logout_host "$H"
fi
wait_quiet 20 1000
BASE=$(res_now)
echo "SRPTVM: instance 2 after warm-up (threads fds rss_kib): $BASE; open files: $(res_fds)"

# ------------------------------------------------------------------ instance 2's scenarios
for s in multiport large cycles resets reload rejects; do
	want "$s" && "scenario_$s"
done

# ------------------------------------------------------------------ instance 2 goroutines
step "instance 2: goroutines"
wait_quiet 20 "$(fds_of "$BASE")"
echo "SRPTVM: instance 2 at the end (threads fds rss_kib): $(res_now), after warm-up: $BASE; open files: $(res_fds)"
if daemon_alive; then
	goroutines_check "goroutines after instance 2's scenarios"
else
	record "goroutines after instance 2's scenarios" fail "instance 2 is not running"
fi

# ================================================================== the other instances
# kill and devdel start instances 3 and 4 (not with quick=1), hog the last.
[ "$QUICK" != 1 ] && want kill && scenario_kill
[ "$QUICK" != 1 ] && want devdel && scenario_devdel
want hog && scenario_hog

# ================================================================== the end
step "daemon logs"
for l in "$DLOG_DIR"/srptarget-*.log; do
	c=$(daemon_crashes "$l")
	echo "SRPTVM: $(basename "$l"): $(wc -l <"$l") lines; by message: $(awk -F'\t' 'NF >= 3 { n[$2 " " $3]++ } END { for (m in n) printf "%s x%d; ", m, n[m] }' "$l" | tr -s ' ' | cut -c1-1500)"
	[ -n "$c" ] && echo "SRPTVM: $(basename "$l"): $c"
	# warnings and errors: count per message, with the first one in full (cut)
	awk -F'\t' '$2 == "WARN" || $2 == "ERROR" { k = $2 " " $3; if (!(k in n)) ex[k] = $4; n[k]++ }
		END { for (k in n) printf "SRPTVM:   %dx %s  e.g. %s\n", n[k], k, substr(ex[k], 1, 400) }' "$l"
done
for f in "$STRESS_DIR"/samples-*; do
	[ -s "$f" ] || continue
	echo "SRPTVM: $(basename "$f") (uptime threads rss_kib, every 0.5 s): $(awk 'NR == 1 { f = $0 } { if ($2 > t) t = $2; if ($3 > r) r = $3; l = $0 }
		END { printf "first %s, last %s, max %d threads, max RSS %.1f MiB, %d samples", f, l, t, r / 1024, NR }' "$f")"
done
step "kernel log"
problems=$(kernel_log_problems)
if [ -z "$problems" ]; then
	record "kernel log" pass "no warnings, oopses or hung tasks"
else
	echo "SRPTVM: ---- each WARNING/BUG/Oops with the 40 lines after it"
	dmesg | grep -A40 -E 'WARNING:|BUG:|Oops|blocked for more than' | head -200
	record "kernel log" fail "$(echo "$problems" | head -1)"
fi
echo "SRPTVM: scenario times:$TIMES; total $(elapsed "$STAMP_T0") s"
record "timings" pass "${TIMES# }; total $(elapsed "$STAMP_T0") s"
follow_stop
finish
