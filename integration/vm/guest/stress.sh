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
#   multiport: two initiator ports (initiator_ext a1 and b2) logged in at once
#     with ch_count=4 each, each ACL its own LUN map: port a1 sees only LUN 2,
#     port b2 only LUN 3 (neither has a LUN 0: Linux finds them by REPORT LUNS);
#     fio on both at once.
#   large: 4 MiB and 8 MiB writes, direct and buffered, with cmd_sg_entries=255
#     (descriptor table inside SRP_CMD) and cmd_sg_entries=1 + allow_ext_sg=1
#     (external table the target fetches with RDMA READ), max_sect=16384, as
#     blktests srp/005-010. Buffered writes are read back with O_DIRECT after
#     dropping the page cache (fio --verify_only), so the target's data is
#     what is checked, not the page cache. The block layer's requests to the
#     disk are traced (block:block_rq_issue): at least 3/4 of the direct writes
#     must go out whole, as one SRP_CMD each.
#   cycles: logout/login cycles of the initiator while fio writes, as blktests
#     srp/011: fio runs on a dm-multipath device (queue_if_no_path, one path)
#     over the SRP disk; each cycle deletes the SRP remote port, waits 1-3 s,
#     logs in again and switches the multipath table to the new disk. Needs
#     dm-mod, dm-multipath, dm-round-robin (/lab/dm/*.ko) and dmsetup, which
#     stress.sh on the host takes from Debian's packages.
#   resets: every second alternately `sg_reset -d` (LOGICAL UNIT RESET) and
#     `sg_reset -b` (bus reset, which ib_srp does not have, so the kernel
#     escalates it to a host reset: ib_srp disconnects and logs in again) while
#     fio writes, as blktests srp/014 (which flips a device the error handler
#     set offline back to running, counted here).
#   reload: SIGHUP every 2 s (reloads=, 4 with quick=1, else 10) alternating
#     between the configuration and one that gives LUN 0 and LUN 1 a vendor
#     string, so that each reload replaces both logical units (over the same
#     backstores) while fio writes and verifies on LUN 1: every reload must
#     succeed, fio must verify without error, and no command may fail because
#     its logical unit was retired (configs/README.md, "Reloading").
#   rejects: logins the target must refuse, alternately with a wrong target
#     port identifier (id_ext) and from an initiator port no ACL admits; then
#     a good login still works.
#   instance 3, "kill" (not with quick=1): file LUN; data written and then
#     synchronized (SYNCHRONIZE CACHE from fsync), data written with O_SYNC
#     (FUA, or a cache flush per write if FUA is not offered), then fio with
#     O_SYNC writes running while the daemon is killed with SIGKILL; ib_srp
#     waits (fast_io_fail_tmo raised) and reconnects to instance 4; fio must
#     finish and verify, and the data acknowledged before the kill reads back.
#   instance 4, "devdel" (not with quick=1): `rdma link del rxe0` while the
#     initiator is logged in and writing: the command must complete (rxe cannot
#     revoke a process's verbs contexts, so it waits until the daemon has
#     closed them), the daemon stays up, logs it and holds no verbs device
#     file any more; `rdma link add` brings rxe0 back and the daemon serves
#     logins on its wildcard listener without being told; its listener on the
#     specific address 169.254.50.1:$PORT2 failed with the device and listens
#     again after SIGHUP (configs/README.md). Data written before the removal
#     reads back. Then SIGQUIT for the goroutines. If `rdma link del` is still
#     blocked after 90 s, the daemon gets SIGTERM (then SIGKILL after 40 s) so
#     that the run can go on, and the checks after it say so.
#   last instance, "hog": a misbehaving initiator against the shared data-buffer
#     pool. srpflood (integration/vm/tools/srpflood) logs in on the second
#     listener ($PORT2) as initiator port ext f1 with RNR retry 7, as ib_srp
#     does, posts no receive buffer and sends hog_commands READ(10) of 8 MiB:
#     the target's first response SEND retries for ever (RNR), everything
#     behind it on the send queue waits, and until the daemon closes the
#     channel the commands keep their pool buffers. Meanwhile ib_srp on the
#     first listener ($PORT) writes and verifies 64 KiB blocks on LUN 0. Pass:
#     0 verify errors, the victim's disk never goes longer than rdma_timeout
#     (10 s here) + 5 s without completing an I/O (sampled from
#     /sys/block/sdX/stat every 0.25 s), the daemon logs a WARN line saying
#     it closed srpflood's stalled channel, srpflood sees the disconnect, and
#     the goroutines are back to the reference.
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
#   empty: not written, the daemon's default 30s), hog_max_channel_buffer=
#   (limits.max_channel_buffer, e.g. 100%; empty: the daemon's default),
#   hog_secs= (how long srpflood holds the connection unless disconnected:
#   the timeout + 15 s), hog_commands=16, hog_stall_re='^RDMA stalled: '
#   (the message of the daemon's WARN line).
# shellcheck disable=SC2317 # functions called through check/wait_for
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=stress-lib.sh
. /lab/stress-lib.sh

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

# ------------------------------------------------------------------ multiport
if want multiport; then
	scenario multiport "two initiator ports, ch_count=4 each, own LUN maps"
	before=$(res_now)
	d0=$(wc -l <"$DLOG")
	ok=1 HA='' HB=''
	login_wait "multiport: login a1" "initiator_ext=00000000000000a1,ch_count=4" "2" || ok=0
	HA=$H
	login_wait "multiport: login b2" "initiator_ext=00000000000000b2,ch_count=4" "3" || ok=0
	HB=$H
	if [ $ok = 1 ]; then
		ida=0x00000000000000a1$RXE_GUID idb=0x00000000000000b2$RXE_GUID
		na=$(session_channels "$ida")
		nb=$(session_channels "$idb")
		ca=$(cat "/sys/class/scsi_host/$HA/ch_count") cb=$(cat "/sys/class/scsi_host/$HB/ch_count")
		open=$(daemon_open_channels)
		if [ "$ca" = 4 ] && [ "$cb" = 4 ] && [ "$na" = 4 ] && [ "$nb" = 4 ] && [ "$open" = 8 ]; then
			record "multiport: 2 ports x 4 channels" pass "ib_srp ch_count $ca and $cb; daemon (srptarget sessions, stats): 4 channels for $ida, 4 for $idb, 8 channels open"
		else
			record "multiport: 2 ports x 4 channels" fail "ib_srp ch_count $ca/$cb; daemon (srptarget sessions, stats): $na channels for $ida, $nb for $idb; open channels $open"
		fi
		DA=$(host_lun_dev "$HA" 2) DB=$(host_lun_dev "$HB" 3)
		la=$(sg_luns "$DA" 2>&1 | grep -oE '^ +[0-9a-f]{16}' | tr -d ' ' | tr '\n' ' ')
		lb=$(sg_luns "$DB" 2>&1 | grep -oE '^ +[0-9a-f]{16}' | tr -d ' ' | tr '\n' ' ')
		if [ "$(host_luns "$HA")" = 2 ] && [ "$(host_luns "$HB")" = 3 ] &&
			[ "$la" = "0002000000000000 " ] && [ "$lb" = "0003000000000000 " ]; then
			record "multiport: LUN maps" pass "port a1 ($HA): disks for LUN $(host_luns "$HA"), REPORT LUNS $la; port b2 ($HB): LUN $(host_luns "$HB"), REPORT LUNS $lb"
		else
			record "multiport: LUN maps" fail "port a1 ($HA): LUNs '$(host_luns "$HA")', REPORT LUNS '$la'; port b2 ($HB): LUNs '$(host_luns "$HB")', REPORT LUNS '$lb'; want 2 and 3 only"
		fi
		qp_psns() { rdma resource show qp 2>/dev/null | grep "comm $(basename "$BIN")" | grep -o 'lqpn [0-9]*.*sq-psn [0-9]*' | awk '{print $2 ":" $NF}'; }
		qb=$(qp_psns)
		ncpu=$(nproc)
		FIO_NOTE="both ports at once, 2 jobs per port, iodepth 16"
		fio_check "multiport: fio verify" --direct=1 --rw=randwrite --bs=4k --iodepth=16 --size=16M \
			--numjobs=2 --offset_increment=16M --verify_backlog=64 \
			--name=porta --filename="$DA" --name=portb --filename="$DB"
		qa=$(qp_psns)
		moved=0 total=0
		for a in $qa; do
			total=$((total + 1))
			was=$(tr ' ' '\n' <<<"$qb" | grep "^${a%%:*}:")
			[ -n "$was" ] && [ "${a#*:}" != "${was#*:}" ] && moved=$((moved + 1))
		done
		# blk-mq maps each CPU to one hardware queue (= ib_srp channel): with
		# fewer CPUs than channels only as many channels per port carry I/O.
		want_moved=$((2 * (ncpu < 4 ? ncpu : 4)))
		if [ "$total" = 8 ] && [ "$moved" -ge "$want_moved" ]; then
			record "multiport: channels carrying I/O" pass "$moved of the 8 target QPs sent responses during fio (at least $want_moved wanted: $ncpu CPUs map to $((ncpu < 4 ? ncpu : 4)) of each port's 4 queues)"
		else
			record "multiport: channels carrying I/O" fail "$moved of $total target QPs sent during fio, want >= $want_moved of 8"
		fi
	fi
	[ -n "$HA" ] && logout_host "$HA"
	[ -n "$HB" ] && logout_host "$HB"
	HA='' HB=''
	wait_quiet 20 "$(fds_of "$before")"
	res_check "multiport: resources" "$before" "$(res_now)" "" "" "$SC_T0"
	daemon_ok "multiport: daemon"
	scenario_end
fi

# ------------------------------------------------------------------ large
if want large; then
	scenario large "4 MiB / 8 MiB writes, cmd_sg_entries=255 and =1"
	before=$(res_now)
	if [ "$QUICK" = 1 ]; then sizes="4M" modes="direct"; else sizes="4M 8M" modes="direct buffered"; fi
	for sg in 255 1; do
		opts="ch_count=1,queue_size=32,max_cmd_per_lun=32,max_sect=16384,cmd_sg_entries=$sg,sg_tablesize=2048"
		[ "$sg" = 1 ] && opts="$opts,allow_ext_sg=1"
		login_wait "large: login cmd_sg_entries=$sg" "$opts" "0 1" || continue
		D=$(host_lun_dev "$H" 0)
		d=${D#/dev/}
		hw=$(cat "/sys/block/$d/queue/max_hw_sectors_kb")
		echo $((hw < 8192 ? hw : 8192)) >"/sys/block/$d/queue/max_sectors_kb"
		echo "$d: max_sectors_kb $(cat "/sys/block/$d/queue/max_sectors_kb"), max_hw_sectors_kb $hw, max_segments $(cat "/sys/block/$d/queue/max_segments"); $H cmd_sg_entries $(cat "/sys/class/scsi_host/$H/cmd_sg_entries"), allow_ext_sg $(cat "/sys/class/scsi_host/$H/allow_ext_sg"), sg_tablesize $(cat "/sys/class/scsi_host/$H/sg_tablesize")"
		for bs in $sizes; do
			kib=$((${bs%M} * 1024))
			for mode in $modes; do
				name="large: $bs $mode cmd_sg_entries=$sg"
				rq_trace_start "$d" || echo "SRPTVM: no block tracing: request sizes unknown"
				common=(--name="large$bs" --filename="$D" --rw=randwrite --bs="$bs" --iodepth=4 --size=64M --sync=1)
				if [ "$mode" = direct ]; then
					fio_quiet "${common[@]}" --direct=1
				else
					fio_quiet "${common[@]}" --direct=0 --do_verify=0 --end_fsync=1
				fi
				wrc=$FIO_RC werr=$FIO_VERR wio=$FIO_IOERR wsum=$FIO_SUMMARY wout=$FIO_OUT wn=$FIO_WRITES
				rq_trace_stop "$kib"
				if [ "$mode" = buffered ]; then
					# read back what reached the target, not the page cache
					sync
					echo 3 >/proc/sys/vm/drop_caches
					blockdev --flushbufs "$D"
					fio_quiet "${common[@]}" --direct=1 --verify_only
					rsum="read back after dropping the page cache: $FIO_READS verify reads, $FIO_VERR verify errors, $FIO_IOERR I/O errors, fio exit $FIO_RC"
				else
					rsum=
				fi
				detail="$wsum; WRITE commands by size: ${RQ_HIST:-none traced}${rsum:+; $rsum}"
				# direct: most of fio's writes must go out whole, as one SRP_CMD each
				# (the block layer may still split one now and then); buffered:
				# writeback decides the sizes, the data is what counts
				big=1
				[ "$mode" = buffered ] || [ $((RQ_FULL * 4)) -ge $((wn * 3)) ] || big=0
				if [ "$wrc" = 0 ] && [ "$werr" = 0 ] && [ "$wio" = 0 ] && [ "$FIO_RC" = 0 ] && [ "$FIO_VERR" = 0 ] &&
					[ "$FIO_IOERR" = 0 ] && [ "$FIO_READS" -gt 0 ] && [ "$wn" -gt 0 ] && [ $big = 1 ]; then
					record "$name" pass "$detail"
				else
					sed 's/^/fio| /' "$wout" | head -40
					record "$name" fail "$detail$([ $big = 0 ] && echo "; want at least 3/4 of the $wn writes as $kib KiB commands")"
				fi
			done
		done
		logout_host "$H"
	done
	wait_quiet 20 "$(fds_of "$before")"
	res_check "large: resources" "$before" "$(res_now)" "" "" "$SC_T0"
	daemon_ok "large: daemon"
	scenario_end
fi

# ------------------------------------------------------------------ cycles
# dm_table DEV: a one-path multipath table that queues I/O while no path works.
dm_table() { echo "0 $MP_SECTORS multipath 1 queue_if_no_path 0 1 1 round-robin 0 1 1 $(cat "/sys/block/${1#/dev/}/dev") 1000"; }
dm_setup() {
	local m
	export DM_DISABLE_UDEV=1 # no udev in the VM: libdevmapper makes the nodes
	command -v dmsetup >/dev/null || { echo "no dmsetup"; return 1; }
	for m in dm-mod dm-multipath dm-round-robin; do
		[ -d "/sys/module/${m//-/_}" ] && continue
		[ -f "/lab/dm/$m.ko" ] || { echo "no /lab/dm/$m.ko"; return 1; }
		run insmod "/lab/dm/$m.ko" || return 1
	done
}
# sched_none sdX|dm-N: no I/O scheduler, as blktests sets on the SRP paths and
# the multipath device (elevator=none): with mq-deadline on dm-0, Linux 6.1
# warned "WARNING: ... at block/mq-deadline.c:669 dd_exit_sched" from
# `dmsetup remove` after the cycles (its per-priority request statistics did
# not add up after the requeues of queue_if_no_path): the initiator's kernel,
# not the target.
sched_none() { echo none >"/sys/block/${1#/dev/}/queue/scheduler" 2>/dev/null; }
dm_block() {
	local d
	for d in /sys/block/dm-*; do
		[ "$(cat "$d/dm/name" 2>/dev/null)" = "$1" ] && { echo "${d##*/}"; return 0; }
	done
	return 1
}
dm_switch() {
	# noflush: keep the I/O queued for want of a path instead of failing it
	run dmsetup --noudevsync suspend --noflush srpmp &&
		run dmsetup --noudevsync reload srpmp --table "$(dm_table "$1")" &&
		run dmsetup --noudevsync resume srpmp
}

if want cycles; then
	scenario cycles "$CYCLES logout/login cycles under fio on dm-multipath"
	before=$(res_now)
	if ! dm_setup >/tmp/dm.txt 2>&1; then
		cat /tmp/dm.txt
		record "cycles: dm-multipath" fail "cannot set up dm-multipath: $(tail -1 /tmp/dm.txt)"
	elif login_wait "cycles: first login" "ch_count=2" "0 1"; then
		D=$(host_lun_dev "$H" 0)
		sched_none "$D"
		MP_SECTORS=$(blockdev --getsz "$D")
		if run dmsetup --noudevsync create srpmp --table "$(dm_table "$D")" && wait_for 10 test -b /dev/mapper/srpmp; then
			sched_none "$(dm_block srpmp)"
			record "cycles: dm-multipath" pass "/dev/mapper/srpmp ($(dm_block srpmp), scheduler none) over $D: $(dmsetup table srpmp)"
			fio_loop_start cycles /tmp/cycles.stop --name=cycles --filename=/dev/mapper/srpmp --direct=1 --sync=1 \
				--rw=randwrite --bs=4k --iodepth=64 --iodepth_batch=32 --size=8M --verify_backlog=256
			done_cycles=0 io_cycles=0 cfail='' mid=''
			for i in $(seq 1 "$CYCLES"); do
				d=${D#/dev/}
				read -r w0 _ <<<"$(disk_writes "$d")"
				# I/O on this path before it goes away (the first run may still be starting)
				wait_for 20 eval "[ \"\$(disk_writes $d | cut -d' ' -f1)\" -gt $((w0 + 16)) ]"
				sleep 1
				read -r w1 _ <<<"$(disk_writes "$d")"
				[ "$w1" -gt "$w0" ] && io_cycles=$((io_cycles + 1))
				logout_host "$H" || { cfail="cycle $i: logout of $H failed"; break; }
				sleep $(((i * 7) % 3 + 1))
				ok=0
				for try in 1 2 3; do
					if login_host "ch_count=2" && wait_host_luns "$NEW_HOST" "0 1" 30; then ok=1; break; fi
					echo "cycle $i: login attempt $try failed: ${LOGIN_ERR:-LUNs '$(host_luns "$NEW_HOST")'}"
					sleep 2
				done
				[ $ok = 1 ] || { cfail="cycle $i: login failed 3 times: $LOGIN_ERR"; break; }
				H=$NEW_HOST D=$(host_lun_dev "$H" 0)
				sched_none "$D"
				dm_switch "$D" || { cfail="cycle $i: switching the multipath table to $D failed"; break; }
				done_cycles=$i
				[ "$i" = $(((CYCLES + 3) / 4)) ] && { sleep 1; mid=$(res_now); }
				echo "SRPTVM: cycle $i done: path now $D ($H); dmsetup status: $(dmsetup status srpmp)"
			done
			end=$(res_now)
			: >/tmp/cycles.stop
			if ! fio_loop_wait 300; then
				# the multipath device may be queueing for a path that never came
				run dmsetup message srpmp 0 fail_if_no_path
				fio_loop_wait 60
			fi
			if [ "$done_cycles" = "$CYCLES" ] && [ -z "$cfail" ]; then
				record "cycles: $CYCLES logout/login cycles" pass "$CYCLES cycles in $(elapsed "$SC_T0") s; writes went to the path before $io_cycles of $CYCLES logouts"
			else
				record "cycles: $CYCLES logout/login cycles" fail "${cfail:-stopped after $done_cycles cycles}"
			fi
			if [ -z "$FL_FAIL" ] && [ "$FL_RUNS" -gt 0 ]; then
				record "cycles: fio verify" pass "$FL_RUNS fio runs (8 MiB of 4 KiB O_SYNC random writes each, iodepth 64, verified), $FL_WRITES writes, $FL_READS verify reads, 0 errors"
			else
				record "cycles: fio verify" fail "${FL_FAIL:-no fio run}"
			fi
			[ -n "$mid" ] && res_check "cycles: growth over cycles $(((CYCLES + 3) / 4))-$done_cycles" "$mid" "$end" "$REPEAT_THREAD_SLACK" "$REPEAT_RSS_KIB"
			run dmsetup --noudevsync remove srpmp
		else
			record "cycles: dm-multipath" fail "dmsetup create srpmp failed"
		fi
		logout_host "$H"
	fi
	wait_quiet 20 "$(fds_of "$before")"
	res_check "cycles: resources" "$before" "$(res_now)" "" "" "$SC_T0"
	daemon_ok "cycles: daemon"
	scenario_end
fi

# ------------------------------------------------------------------ resets
if want resets; then
	scenario resets "sg_reset -d / -b every second for ${RESET_SECS}s under fio"
	before=$(res_now)
	if login_wait "resets: login" "ch_count=2" "0 1"; then
		D=$(host_lun_dev "$H" 0)
		d=${D#/dev/}
		n0=$(dmesg_mark)
		tmf0=$(dstat task_mgmt) relog0=$(dstat logins_accepted)
		fio_loop_start resets /tmp/resets.stop --name=resets --filename="$D" --direct=1 --sync=1 \
			--rw=randwrite --bs=64k --iodepth=16 --size=16M --offset=32M --verify_backlog=64
		wait_for 20 eval "[ \"\$(disk_writes $d | cut -d' ' -f1)\" -gt 16 ]"
		lun_ok=0 lun_bad=0 host_ok=0 host_bad=0 offline=0 i=0
		end=$(awk -v t="$(uptime_s)" -v s="$RESET_SECS" 'BEGIN { print t + s }')
		while awk -v t="$(uptime_s)" -v e="$end" 'BEGIN { exit !(t < e) }'; do
			sleep 1
			i=$((i + 1))
			if [ $((i % 2)) = 1 ]; then
				if sg_reset -d "$D" >>/tmp/sg_reset.txt 2>&1; then lun_ok=$((lun_ok + 1)); else lun_bad=$((lun_bad + 1)); fi
			else
				if sg_reset -b "$D" >>/tmp/sg_reset.txt 2>&1; then host_ok=$((host_ok + 1)); else host_bad=$((host_bad + 1)); fi
			fi
			# as blktests srp/014: a device the error handler set offline goes back to running
			if [ "$(cat "/sys/block/$d/device/state" 2>/dev/null)" = offline ]; then
				echo running >"/sys/block/$d/device/state"
				offline=$((offline + 1))
			fi
		done
		: >/tmp/resets.stop
		if ! fio_loop_wait 300; then
			echo running >"/sys/block/$d/device/state" 2>/dev/null
			fio_loop_wait 60
		fi
		tail -20 /tmp/sg_reset.txt
		reconn=$(dmesg_since "$n0" | grep -c 'reconnect succeeded')
		tmf=$(($(dstat task_mgmt) - tmf0))
		relog=$(($(dstat logins_accepted) - relog0))
		rport=$(cat "$(rport_of "$H")/state" 2>/dev/null)
		detail="sg_reset -d: $lun_ok ok, $lun_bad failed; sg_reset -b: $host_ok ok, $host_bad failed; kernel: $reconn reconnects; daemon (srptarget stats): $tmf task management functions, $relog logins accepted; device set offline $offline time(s); rport $rport"
		if [ "$lun_bad" = 0 ] && [ "$host_bad" = 0 ] && [ "$reconn" -ge 1 ] && [ "$tmf" -ge 1 ] && [ "$rport" = running ]; then
			record "resets: LUN and host resets" pass "$detail"
		else
			record "resets: LUN and host resets" fail "$detail"
		fi
		if [ -z "$FL_FAIL" ] && [ "$FL_RUNS" -gt 0 ]; then
			record "resets: fio verify" pass "$FL_RUNS fio runs (16 MiB of 64 KiB O_SYNC random writes each, iodepth 16, verified), $FL_WRITES writes, $FL_READS verify reads, 0 errors"
		else
			record "resets: fio verify" fail "${FL_FAIL:-no fio run}"
		fi
		logout_host "$H"
	fi
	wait_quiet 30 "$(fds_of "$before")"
	res_check "resets: resources" "$before" "$(res_now)" "" "" "$SC_T0"
	daemon_ok "resets: daemon"
	scenario_end
fi

# ------------------------------------------------------------------ rejects
# ------------------------------------------------------------------ reload
if want reload; then
	scenario reload "$RELOADS configuration reloads under I/O"
	before=$(res_now)
	# Configuration B: LUN 0 and LUN 1 get a vendor string, so every reload replaces both
	# logical units (over the same backstores) while fio writes to LUN 1.
	CONFIG_B=$STRESS_DIR/reload-b.yaml
	sed -e 's/^    serial: stress0$/    serial: stress0\n    vendor: RELOADB/' \
		-e 's/^    serial: stress1$/    serial: stress1\n    vendor: RELOADB/' "$CONFIG" >"$CONFIG_B"
	cp "$CONFIG" "$STRESS_DIR/reload-a.yaml"
	if ! grep -c 'vendor: RELOADB' "$CONFIG_B" | grep -qx 2 || ! "$BIN" validate --config "$CONFIG_B" >/tmp/validate-b.txt 2>&1; then
		record "reload: configuration B" fail "$(head -2 /tmp/validate-b.txt)"
	elif login_wait "reload: login" "ch_count=2" "0 1"; then
		d0=$(wc -l <"$DLOG")
		ok0=$(dstat reloads_applied) fail0=$(dstat reloads_failed) r0=$((ok0 + fail0))
		DEV1=$(host_lun_dev "$H" 1)
		fio_loop_start reload "$STRESS_DIR/reload.stop" --name=reload --filename="$DEV1" --direct=1 \
			--rw=randwrite --bs=64k --iodepth=16 --size=32M --offset=128M
		reloaded() { [ "$(($(dstat reloads_applied) + $(dstat reloads_failed) - r0))" -ge "$1" ]; }
		nhup=0
		for i in $(seq 1 "$RELOADS"); do
			sleep 2
			if [ $((i % 2)) = 1 ]; then cp "$CONFIG_B" "$CONFIG"; else cp "$STRESS_DIR/reload-a.yaml" "$CONFIG"; fi
			kill -HUP "$PID"
			nhup=$((nhup + 1))
			wait_for 20 reloaded "$nhup" || break
		done
		cp "$STRESS_DIR/reload-a.yaml" "$CONFIG"
		if [ $((nhup % 2)) = 1 ]; then
			kill -HUP "$PID"
			nhup=$((nhup + 1))
			wait_for 20 reloaded "$nhup"
		fi
		touch "$STRESS_DIR/reload.stop"
		fio_loop_wait 300
		log=$(tail -n +$((d0 + 1)) "$DLOG")
		nok=$(($(dstat reloads_applied) - ok0))
		nfail=$(($(dstat reloads_failed) - fail0))
		nret=$(grep -c 'retired logical unit closed after its commands in progress finished' <<<"$log")
		nlate=$(grep -c 'retired logical unit closed with commands still in progress' <<<"$log")
		if [ "$nok" = "$nhup" ] && [ "$nfail" = 0 ]; then
			record "reload: $nhup reloads" pass "$nok reloads applied (srptarget stats; LUN 0 and LUN 1 replaced each time); $nret retired unit(s) had commands in progress and closed after them"
		else
			record "reload: $nhup reloads" fail "$nok reloaded, $nfail failed: $(grep -m1 -E 'configuration error|reload failed' <<<"$log" | cut -f3- | cut -c1-200)"
		fi
		if [ -z "$FL_FAIL" ] && [ "$FL_RUNS" -gt 0 ]; then
			record "reload: fio verify" pass "$FL_RUNS runs, $FL_WRITES writes, $FL_READS verify reads, 0 verify errors, 0 I/O errors while the units were replaced"
		else
			record "reload: fio verify" fail "${FL_FAIL:-no fio run}"
		fi
		sense=$(dmesg_since "$SC_DMESG" | grep -ciE 'Hardware Error|Logical unit communication failure')
		if [ "$nlate" = 0 ] && [ "$sense" = 0 ]; then
			record "reload: no command failed by the retirement" pass "no 'closed with commands still in progress' in the daemon's log, no HARDWARE ERROR sense in the kernel's"
		else
			record "reload: no command failed by the retirement" fail "$nlate late closes in the daemon's log, $sense HARDWARE ERROR / LOGICAL UNIT COMMUNICATION FAILURE lines in the kernel's"
		fi
		logout_host "$H"
	fi
	wait_quiet 20 "$(fds_of "$before")"
	res_check "reload: resources" "$before" "$(res_now)" "" "" "$SC_T0"
	daemon_ok "reload: daemon"
	scenario_end
fi

if want rejects; then
	scenario rejects "$REJECTS logins to refuse"
	before=$(res_now)
	f=/sys/class/infiniband_srp/srp-$RXE-1/add_target
	d0=$(wc -l <"$DLOG")
	hosts0=$(scsi_hosts | wc -l)
	refused=0 accepted=0 mid='' q=$(((REJECTS + 3) / 4)) errs=''
	bad_target="id_ext=$BAD_EXT,ioc_guid=$IOC_GUID,dest=$RXE_IP4:$PORT"
	bad_acl="id_ext=$ID_EXT,ioc_guid=$IOC_GUID,initiator_ext=$BAD_EXT,dest=$RXE_IP4:$PORT"
	echo "SRPTVM: odd logins: $bad_target; even: $bad_acl"
	dmesg -n 1 # the kernel logs each refusal
	t=$(uptime_s)
	for i in $(seq 1 "$REJECTS"); do
		if [ $((i % 2)) = 1 ]; then o=$bad_target; else o=$bad_acl; fi
		if e=$({ echo "$o" >"$f"; } 2>&1); then
			accepted=$((accepted + 1))
		else
			refused=$((refused + 1))
			[ "$i" -le 2 ] && errs="$errs ${e##*: }"
		fi
		[ "$i" = "$q" ] && { wait_for 10 eval '[ -z "$(new_unclosed_channels)" ]'; mid=$(res_now); }
	done
	rate=$(since "$t")
	dmesg -n 4
	wait_quiet 20 "$(fds_of "$before")"
	end=$(res_now)
	hosts1=$(scsi_hosts | wc -l)
	rej=$(tail -n +$((d0 + 1)) "$DLOG" | grep '	login rejected	')
	nrej=$(grep -c . <<<"$rej")
	reasons=$(grep -o '"reason": "[A-Z_]*' <<<"$rej" | sed 's/"reason": "//' | sort | uniq -c | awk '{ printf "%s%s x%s", (n++ ? ", " : ""), $2, $1 }')
	# The daemon logs refused logins per source address at most 5 times per 10 s, the next
	# line saying how many it left out (similar_lines_suppressed; srp/loglimit.go): every
	# refusal here comes from 169.254.50.1, so a few lines per 10 s, not one per login.
	nsup=$(grep -o '"similar_lines_suppressed": [0-9]*' <<<"$rej" | awk '{ n += $2 } END { print n + 0 }')
	maxrej=$(awk -v r="$rate" 'BEGIN { printf "%d", 5 * (int(r / 10) + 2) }')
	if [ "$refused" = "$REJECTS" ] && [ "$hosts1" = "$hosts0" ] && [ "$nrej" -ge 1 ] && [ "$nrej" -le "$maxrej" ] &&
		[ $((nrej + nsup)) -le "$REJECTS" ] && daemon_alive; then
		record "rejects: $REJECTS logins refused" pass "in $rate s; add_target failed each time (${errs# }); daemon logged $nrej rejections (at most $maxrej at 5 per 10 s), $nsup more said suppressed: $reasons"
	else
		record "rejects: $REJECTS logins refused" fail "$refused refused, $accepted accepted, SCSI hosts $hosts0 -> $hosts1; daemon logged $nrej rejections (want 1 to $maxrej at 5 per 10 s), $nsup more said suppressed ($reasons)"
	fi
	echo "SRPTVM: kernel lines for the first two refusals:"
	dmesg_since "$SC_DMESG" | grep -v 'speed is unknown' | head -8
	[ -n "$mid" ] && res_check "rejects: growth over logins $q-$REJECTS" "$mid" "$end" "$REPEAT_THREAD_SLACK" "$REPEAT_RSS_KIB"
	res_check "rejects: resources" "$before" "$end" "" "" "$SC_T0"
	if login_wait "rejects: good login afterwards" "ch_count=2" "0 1"; then
		FIO_NOTE="login after the refusals: $LOGIN_S s"
		fio_check "rejects: good login afterwards" --name=afterrej --filename="$(host_lun_dev "$H" 0)" --direct=1 \
			--rw=randwrite --bs=16k --iodepth=16 --size=8M --offset=48M
		logout_host "$H"
	fi
	daemon_ok "rejects: daemon"
	scenario_end
fi

# ------------------------------------------------------------------ instance 2 goroutines
step "instance 2: goroutines"
wait_quiet 20 "$(fds_of "$BASE")"
echo "SRPTVM: instance 2 at the end (threads fds rss_kib): $(res_now), after warm-up: $BASE; open files: $(res_fds)"
if daemon_alive; then
	goroutines_check "goroutines after instance 2's scenarios"
else
	record "goroutines after instance 2's scenarios" fail "instance 2 is not running"
fi

# ================================================================== kill
if [ "$QUICK" != 1 ] && want kill; then
	scenario kill "SIGKILL and restart while the initiator waits (file LUN)"
	daemon_start
	daemon_wait_listening 30 || record "kill: instance 3 listening" fail "not listening after 30 s"
	if login_wait "kill: login" "ch_count=2" "0 1"; then
		E=$(host_lun_dev "$H" 1)
		e=${E#/dev/}
		rp=$(rport_of "$H")
		echo 2 >"$rp/reconnect_delay"
		echo 90 >"$rp/fast_io_fail_tmo"
		echo "$rp: reconnect_delay $(cat "$rp/reconnect_delay"), fast_io_fail_tmo $(cat "$rp/fast_io_fail_tmo"), dev_loss_tmo $(cat "$rp/dev_loss_tmo")"
		sg_modes -p 0x08 "$E" >/tmp/modes.txt 2>&1
		cat /tmp/modes.txt
		dpofua=$(grep -o 'DpoFua=[01]' /tmp/modes.txt | head -1)
		cache=$(cat /sys/block/"$e"/device/scsi_disk/*/cache_type 2>/dev/null)
		fua=$(cat /sys/block/"$e"/queue/fua 2>/dev/null)
		flushes() { awk '{ print $16 }' "/sys/block/$e/stat"; }
		f0=$(flushes)
		fio_quiet --name=regionA --filename="$E" --direct=1 --rw=write --bs=64k --size=16M --offset=0 \
			--do_verify=0 --end_fsync=1
		record "kill: region A written and synchronized" "$([ "$FIO_RC" = 0 ] && [ "$FIO_WRITES" -gt 0 ] && echo pass || echo fail)" "$FIO_SUMMARY; then fsync: $(($(flushes) - f0)) flush requests (SYNCHRONIZE CACHE); device: $dpofua, cache_type '$cache', queue/fua $fua"
		f1=$(flushes)
		fio_quiet --name=regionB --filename="$E" --direct=1 --sync=1 --rw=write --bs=64k --size=16M --offset=32M \
			--do_verify=0
		record "kill: region B written with O_SYNC" "$([ "$FIO_RC" = 0 ] && [ "$FIO_WRITES" -gt 0 ] && echo pass || echo fail)" "$FIO_SUMMARY; $(($(flushes) - f1)) flush requests ($([ "$fua" = 1 ] && echo "FUA writes" || echo "no FUA: a flush per write"))"
		# region C: O_SYNC random writes across the kill, verified at the end
		(
			fio_quiet --name=regionC --filename="$E" --direct=1 --sync=1 --rw=randwrite --bs=64k --iodepth=8 \
				--size=32M --offset=64M --verify_backlog=64 2>/dev/null
			echo "$FIO_RC|$FIO_WRITES|$FIO_READS|$FIO_VERR|$FIO_IOERR|$FIO_SUMMARY|$FIO_OUT" >/tmp/regionC.res
		) &
		cpid=$!
		read -r w0 _ <<<"$(disk_writes "$e")"
		wait_for 30 eval "[ \"\$(disk_writes $e | cut -d' ' -f1)\" -gt $((w0 + 40)) ]"
		n1=$(dmesg_mark)
		read -r wk _ <<<"$(disk_writes "$e")"
		KLOG=$DLOG
		kpid=$PID
		run kill -KILL "$kpid"
		wait "$kpid" 2>/dev/null
		kst=$?
		follow_stop
		echo "SRPTVM: instance $INSTANCE killed (wait status $kst) after $((wk - w0)) region C writes; initiator rport: $(cat "$rp/state")"
		sleep 3
		echo "SRPTVM: 3 s later: rport $(cat "$rp/state")"
		c=$(daemon_crashes "$KLOG")
		if [ "$kst" = 137 ] && [ -z "$c" ]; then
			record "kill: SIGKILL" pass "instance $INSTANCE killed (status 137) with region C writes in flight; no panic in its log"
		else
			record "kill: SIGKILL" fail "wait status $kst${c:+; $c}"
		fi
		t=$(uptime_s)
		daemon_start
		if daemon_wait_listening 30; then
			if wait_for 90 eval "[ \"\$(cat $rp/state)\" = running ]"; then
				record "kill: initiator reconnected" pass "rport running $(since "$t") s after the restart; $(dmesg_since "$n1" | grep -c 'reconnect attempt.*failed\|reconnect.*failed') failed attempt(s); $(dmesg_since "$n1" | grep -m1 -o 'reconnect succeeded')"
			else
				record "kill: initiator reconnected" fail "rport '$(cat "$rp/state" 2>/dev/null)' 90 s after the restart"
			fi
		else
			record "kill: restart" fail "instance $INSTANCE not listening after 30 s"
		fi
		klog_excerpt "$n1" 30
		if wait_for 300 eval "! kill -0 $cpid"; then
			wait $cpid
			IFS='|' read -r crc cw cr cv cio csum cout </tmp/regionC.res
			if [ "$crc" = 0 ] && [ "$cv" = 0 ] && [ "$cio" = 0 ] && [ "$cw" -gt 0 ] && [ "$cr" -gt 0 ]; then
				record "kill: O_SYNC writes across the kill" pass "$csum ($((wk - w0)) writes done before the kill)"
			else
				sed 's/^/fio| /' "$cout" | head -40
				record "kill: O_SYNC writes across the kill" fail "$csum: $(grep -m1 -iE 'verify|error|bad' "$cout")"
			fi
		else
			record "kill: O_SYNC writes across the kill" fail "fio still running 300 s after the restart"
		fi
		E=$(host_lun_dev "$H" 1)
		fio_check "kill: region A reads back" --name=regionA --filename="$E" --direct=1 --rw=write --bs=64k \
			--size=16M --offset=0 --verify_only
		fio_check "kill: region B reads back" --name=regionB --filename="$E" --direct=1 --rw=write --bs=64k \
			--size=16M --offset=32M --verify_only
		daemon_ok "kill: instance after restart"
	fi
	scenario_end
fi

# ================================================================== devdel
rxe_back() {
	run rdma link add "$RXE" type rxe netdev "$RXE_NETDEV" || return 1
	wait_for 20 port_active "$RXE" || return 1
	wait_for 20 gid_index "$RXE" "$(ip4_gid "$RXE_IP4")" || return 1
	wait_for 20 test -e "/sys/class/infiniband_srp/srp-$RXE-1/add_target"
}
uverbs_fds() { for f in "/proc/$PID/fd/"*; do readlink "$f"; done 2>/dev/null | grep -c '/dev/infiniband/uverbs'; }
uverbs_maps() { grep -c 'uverbs' "/proc/$PID/maps" 2>/dev/null; }

if [ "$QUICK" != 1 ] && want devdel; then
	scenario devdel "rdma link del / add under a live session"
	killed=''
	if ! daemon_alive; then
		daemon_start
		daemon_wait_listening 30
	fi
	logout_all
	# Warm-up, as instance 2's: a session creates the buffer pool and the device context of a
	# fresh instance (only=devdel), and LUN 0 (memory, allocated as written) is filled, so that
	# the quiet state below includes them and the resource check after the re-add sees only
	# what the removal left behind (a second buffer pool beside the dead one, say).
	if login_wait "devdel: warm-up login" "ch_count=1" "0 1"; then
		fio_quiet --name=fill --filename="$(host_lun_dev "$H" 0)" --direct=1 --rw=write --bs=1M \
			--iodepth=8 --size=${L0_MIB}M --verify=0 >/dev/null
		echo "SRPTVM: LUN 0 filled: $FIO_SUMMARY"
		logout_all
	fi
	wait_for 20 eval '[ -z "$(new_unclosed_channels)" ]'
	sleep 2
	q0=$(res_now)
	echo "SRPTVM: quiet before the removal (threads fds rss_kib): $q0; open files: $(res_fds)"
	if login_wait "devdel: login" "ch_count=2" "0 1"; then
		D=$(host_lun_dev "$H" 0)
		FIO_NOTE="synchronized (fsync) before the removal"
		fio_check "devdel: data before the removal" --name=devdelA --filename="$D" --direct=1 --rw=write --bs=64k \
			--size=16M --offset=0 --do_verify=0 --end_fsync=1
		# Through the SCSI generic device, not the block device: once the initiator's disk is
		# deleted the block layer sets its capacity to 0, so a direct read of it returns 0
		# bytes (writes fail with ENOSPC) and fio verifies the stale contents of its buffer,
		# reporting "bad header offset X, wanted Y" for data no target sent. The same job on
		# a scsi_debug disk deleted under I/O does that (guest/blockdel-control.sh); through
		# /dev/sgN those commands fail with an error instead, so a verify error is wrong data.
		SG=/dev/$(ls "/sys/block/${D#/dev/}/device/scsi_generic/" 2>/dev/null | head -1)
		echo "SRPTVM: in-flight I/O through $SG ($D)"
		(
			fio_quiet --name=inflight --filename="$SG" --ioengine=sg --rw=randwrite --bs=16k --iodepth=16 \
				--size=16M --offset=32M --verify_backlog=64 --time_based --runtime=60 2>/dev/null
			echo "$FIO_RC|$FIO_WRITES|$FIO_READS|$FIO_VERR|$FIO_IOERR|$FIO_SUMMARY|$FIO_OUT" >/tmp/inflight.res
		) &
		ipid=$!
		sleep 3
		echo "SRPTVM: daemon open files with the session: $(res_fds)"
		echo "SRPTVM: the daemon's verbs objects (rdma resource show):"
		for r in qp cq mr pd; do rdma resource show "$r" 2>/dev/null | grep "comm $(basename "$BIN")"; done
		live_uv=$(uverbs_fds)
		d0=$(wc -l <"$DLOG")
		n0=$(dmesg_mark)
		t=$(uptime_s)
		echo "SRPTVM\$ rdma link del $RXE"
		rdma link del "$RXE" >/tmp/linkdel.txt 2>&1 &
		rpid=$!
		killed=
		if wait_for 90 eval "! kill -0 $rpid"; then
			wait $rpid
			lrc=$?
			record "devdel: rdma link del under a live session" "$([ $lrc = 0 ] && echo pass || echo fail)" "exit $lrc after $(since "$t") s$( [ $lrc = 0 ] || echo ": $(cat /tmp/linkdel.txt)")"
		else
			echo "SRPTVM: rdma link del still running after 90 s: its kernel stack:"
			cat "/proc/$rpid/stack" 2>/dev/null
			echo "SRPTVM: daemon open files: $(res_fds); uverbs mappings: $(uverbs_maps)"
			ls -l "/proc/$PID/fd/"
			klog_excerpt "$n0" 80
			record "devdel: rdma link del under a live session" fail "blocked > 90 s in $(head -1 "/proc/$rpid/stack" 2>/dev/null | sed 's/^\[<0>\] //'): daemon pid $PID still holds $(uverbs_fds) open files of /dev/infiniband/uverbs0 (rxe cannot revoke them); all open: $(res_fds)"
			# let it finish: the device goes once the daemon has closed its files.
			# SIGTERM first: does a graceful shutdown release them?
			killed=$PID
			kill -TERM "$PID"
			if wait_for 40 eval '! daemon_alive'; then
				wait "$PID" 2>/dev/null
				how="SIGTERM (exit status $?)"
			else
				kill -KILL "$PID"
				wait "$PID" 2>/dev/null
				how="SIGKILL (still running 40 s after SIGTERM)"
			fi
			follow_stop
			if wait_for 60 eval "! kill -0 $rpid"; then
				record "devdel: rdma link del once the daemon exits" pass "completed $(since "$t") s after it began, after $how of the daemon"
			else
				record "devdel: rdma link del once the daemon exits" fail "still blocked after $how of the daemon"
			fi
		fi
		sleep 2
		klog_excerpt "$n0" 40
		after_uv=$(uverbs_fds) after_maps=$(uverbs_maps)
		lines=$(tail -n +$((d0 + 1)) "$DLOG")
		# ib/verbs logs the removal (through the listeners' Logf) with what it released;
		# channels log "RDMA device removed" when they see the removal before the
		# initiator's disconnect (ib_srp is on the same device and usually disconnects first)
		vrem=$(grep -m1 "RDMA device removed: $RXE" <<<"$lines" | cut -f3- | cut -c1-400)
		nrem=$(grep -c '"reason": "RDMA device removed"' <<<"$lines")
		nclosed=$(grep -c 'channel closed' <<<"$lines")
		lfail=$(grep -m1 'listener failed' <<<"$lines" | cut -f3- | cut -c1-300)
		if [ -z "$killed" ]; then
			daemon_ok "devdel: daemon stays up"
			if [ "$after_uv" = 0 ] && [ "${after_maps:-0}" = 0 ]; then
				record "devdel: daemon released the device" pass "verbs device files open: $live_uv with the session, $after_uv after the removal, no uverbs mapping; open files now: $(res_fds)"
			else
				record "devdel: daemon released the device" fail "$after_uv verbs device files, $after_maps uverbs mappings still open: $(res_fds)"
			fi
			if [ -n "$vrem" ] && [ "$nclosed" -ge 2 ]; then
				record "devdel: daemon logged it" pass "$vrem; $nclosed channels closed ($nrem for the removal, the others by the initiator's disconnect); ${lfail:-no listener failure logged}"
			else
				record "devdel: daemon logged it" fail "${vrem:-no line names the removal of $RXE}; $nclosed channels closed (2 were open), $nrem for the removal; ${lfail:-no listener failure logged}"
			fi
		fi
		if wait_for 120 eval "! kill -0 $ipid"; then
			wait $ipid
			IFS='|' read -r crc cw cr cv cio csum cout </tmp/inflight.res
			# the initiator's own device went away too: I/O errors are expected, wrong data is not
			if [ "$cv" = 0 ] && [ "$cw" -gt 0 ] && [ "$cr" -gt 0 ]; then
				record "devdel: I/O in flight at the removal" pass "$csum through $SG (I/O errors expected: ib_srp lost its device too; no verify error)"
			else
				sed 's/^/fio| /' "$cout" | head -60
				record "devdel: I/O in flight at the removal" fail "$csum: $(grep -m1 -iE 'verify|bad' "$cout")"
			fi
		else
			record "devdel: I/O in flight at the removal" fail "fio still running 120 s after the removal"
		fi
		if rxe_back; then
			record "devdel: rdma link add" pass "rxe0 back, port active"
		else
			record "devdel: rdma link add" fail "rxe0 not back: $(rdma link 2>&1 | head -2)"
		fi
		if [ -n "$killed" ]; then
			daemon_start
			daemon_wait_listening 30
		fi
		t=$(uptime_s)
		if login_wait "devdel: serves again on [::]:$PORT" "ch_count=2" "0 1"; then
			record "devdel: serves again on [::]:$PORT" "$([ -z "$killed" ] && echo pass || echo fail)" "login $(since "$t") s after, without a reload$([ -n "$killed" ] && echo "; but by a new instance: the first had to be stopped")"
			D=$(host_lun_dev "$H" 0) E=$(host_lun_dev "$H" 1)
			if [ -z "$killed" ]; then
				fio_check "devdel: data before the removal reads back" --name=devdelA --filename="$D" --direct=1 \
					--rw=write --bs=64k --size=16M --offset=0 --verify_only
			fi
			want kill && fio_check "devdel: file LUN data reads back" --name=regionA --filename="$E" --direct=1 \
				--rw=write --bs=64k --size=16M --offset=0 --verify_only
			fio_check "devdel: I/O after rdma link add" --name=afterdel --filename="$D" --direct=1 --rw=randwrite \
				--bs=16k --iodepth=16 --size=8M --offset=48M
			logout_host "$H"
		fi
		# the listener on the specific address went with the device; SIGHUP listens again
		d1=$(wc -l <"$DLOG")
		after_hup=''
		if login_host "ch_count=1,dest=$RXE_IP4:$PORT2"; then
			before_hup="logged in without a reload"
			logout_host "$NEW_HOST"
		else
			before_hup="refused before SIGHUP ($LOGIN_ERR)"
			run kill -HUP "$PID"
			wait_for 20 eval "tail -n +$((d1 + 1)) $DLOG | grep -q 'configuration reloaded\|reload failed'"
			wait_for 20 eval "cm_listening $PORT2"
			if login_host "ch_count=1,dest=$RXE_IP4:$PORT2" && wait_host_luns "$NEW_HOST" "0 1" 30; then
				after_hup="logged in after SIGHUP"
				logout_host "$NEW_HOST"
			else
				after_hup="still refused after SIGHUP: $LOGIN_ERR; $(tail -n +$((d1 + 1)) "$DLOG" | grep -m1 -iE 'error|failed' | cut -f3- | cut -c1-200)"
			fi
		fi
		if [ -n "$killed" ]; then
			record "devdel: listener $RXE_IP4:$PORT2" fail "not tested: the instance whose listener failed had to be stopped, and a new one listens from its start ($before_hup)"
		elif [ -z "$after_hup" ] || [ "$after_hup" = "logged in after SIGHUP" ]; then
			record "devdel: listener $RXE_IP4:$PORT2" pass "$before_hup${after_hup:+, $after_hup}"
		else
			record "devdel: listener $RXE_IP4:$PORT2" fail "$before_hup, $after_hup"
		fi
	fi
	wait_quiet 30 "$(fds_of "$q0")"
	if [ -z "$killed" ]; then
		res_check "devdel: resources" "$q0" "$(res_now)" "" "" "$SC_T0"
	else
		record "devdel: resources" fail "not comparable: the daemon had to be stopped for rdma link del to finish"
	fi
	daemon_ok "devdel: daemon"
	goroutines_check "devdel: goroutines"
	scenario_end
fi

# ================================================================== hog
# hog_sampler sdX FILE STOPFILE: "uptime completed_ios" (reads + writes completed, fields 1
# and 5 of /sys/block/sdX/stat, Documentation/block/stat.rst) about every 0.25 s until
# STOPFILE exists; builtins only, so that a sample costs one fork (sleep).
hog_sampler() {
	local up r w
	while [ ! -e "$3" ]; do
		read -r up _ </proc/uptime
		read -r r _ _ _ w _ <"/sys/block/$1/stat" || break
		echo "$up $((r + w))"
		sleep 0.25
	done >"$2"
}
# hog_stall FILE FROM TO: the longest time in [FROM, TO] (uptimes) during which the count
# did not change: "seconds start end completions_in_window".
hog_stall() {
	awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b {
			if (!n++) { last = $1; c = $2; c0 = $2; next }
			if ($2 != c) { if ($1 - last > max) { max = $1 - last; s = last; e = $1 } last = $1; c = $2 }
			t = $1 }
		END { if (t - last > max) { max = t - last; s = last; e = t }
			printf "%.1f %s %s %d\n", max, s, e, c - c0 }' "$1"
}
# hog_count FILE FROM TO: I/Os completed between two uptimes.
hog_count() {
	awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b { if (!n++) f = $2; l = $2 } END { print l - f + 0 }' "$1"
}
# secs DURATION: whole seconds of "30s", "2m", "1m30s" or "45".
secs() {
	awk -v d="$1" 'BEGIN { s = 0; while (match(d, /^[0-9.]+[hms]?/)) { v = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
		u = substr(v, length(v)); if (u ~ /[hms]/) v = substr(v, 1, length(v) - 1); else u = "s"
		s += v * (u == "h" ? 3600 : u == "m" ? 60 : 1) } printf "%d", s + 0.5 }'
}

if want hog; then
	# srpflood (integration/vm/tools/srpflood): logs in on the second listener as initiator
	# port ext f1 (its own ACL: LUN 3), RNR retry 7 like ib_srp, posts no receive buffer and
	# sends HOG_COMMANDS READ(10) of 8 MiB each: the target's first response SEND retries
	# for ever (RNR), the work requests behind it wait, and a target that holds each
	# command's data buffer until its SEND completes lends srpflood its whole 64 MiB buffer
	# pool for as long as it stays. Meanwhile ib_srp (initiator_ext 0, the first listener,
	# LUN 0) writes and verifies with fio, 64 KiB writes (above max_imm_data, so they need a
	# pool buffer as the verify reads do). Pass: fio verifies with no error, and the longest
	# time in which the victim's disk completed no I/O at all stays within the daemon's
	# rdma_timeout + 5 s; the daemon logs that it closed the stalled channel and stays up.
	HOG_EXT=00000000000000f1
	# limits.rdma_timeout written to the daemon's configuration for this instance; empty
	# (hog_rdma_timeout=): none, the daemon's default HOG_DEFAULT_TIMEOUT.
	HOG_RDMA_TIMEOUT=$(arg hog_rdma_timeout 10s)
	HOG_DEFAULT_TIMEOUT=30s
	# limits.max_channel_buffer: empty, the daemon's default (25% of the pool); 100% leaves
	# the victim only the stall watchdog.
	HOG_MAX_CHANNEL_BUFFER=$(arg hog_max_channel_buffer "")
	HOG_TIMEOUT_S=$(secs "${HOG_RDMA_TIMEOUT:-$HOG_DEFAULT_TIMEOUT}")
	HOG_BOUND_S=$((HOG_TIMEOUT_S + 5))
	# srpflood holds the connection this long unless the target closes it first: longer than
	# the bound, so that a daemon that never closes the channel fails.
	HOG_SECS=$(arg hog_secs $((HOG_TIMEOUT_S + 15)))
	HOG_COMMANDS=$(arg hog_commands 16)
	# The daemon's line for the channel it closed (srp/channel.go, watchdog): WARN "RDMA
	# stalled: no work request completed within rdma_timeout; closing the channel and
	# aborting its commands", naming srpflood's initiator port.
	HOG_STALL_RE=$(arg hog_stall_re '^RDMA stalled: ')
	scenario hog "srpflood holds the buffer pool (no receives, RNR retry 7) for up to ${HOG_SECS}s while ib_srp verifies on the other listener"
	CONFIG_HOG=$STRESS_DIR/hog.yaml
	{
		add=
		[ -n "$HOG_RDMA_TIMEOUT" ] && add="$add\n  rdma_timeout: $HOG_RDMA_TIMEOUT"
		[ -n "$HOG_MAX_CHANNEL_BUFFER" ] && add="$add\n  max_channel_buffer: \"$HOG_MAX_CHANNEL_BUFFER\""
		sed "s/^  max_transfer_size: 8MiB\$/&$add/" "$CONFIG"
		# acls: is the configuration's last section
		printf '  # srpflood (the hog scenario)\n  - initiators: ["0x%s*"]\n    luns: [3]\n' "$HOG_EXT"
	} >"$CONFIG_HOG"
	echo "SRPTVM: $CONFIG_HOG: rdma_timeout ${HOG_RDMA_TIMEOUT:-not set (default $HOG_DEFAULT_TIMEOUT)}, max_channel_buffer ${HOG_MAX_CHANNEL_BUFFER:-not set (default)}; bound on the victim's stall ${HOG_BOUND_S}s; srpflood holds up to ${HOG_SECS}s with $HOG_COMMANDS commands"
	diff "$CONFIG" "$CONFIG_HOG"
	FLOOD=$(command -v srpflood)
	if [ -z "$FLOOD" ]; then
		record "hog: srpflood" fail "no srpflood in the guest: integration/vm/stress.sh builds it and passes it in"
	elif ! "$BIN" validate --config "$CONFIG_HOG" >/tmp/validate-hog.txt 2>&1; then
		record "hog: configuration" fail "$(head -2 /tmp/validate-hog.txt | tr '\n' ' ')"
	else
		CONFIG=$CONFIG_HOG daemon_start
		hog_instance=$INSTANCE
		if ! daemon_wait_listening 30; then
			record "hog: instance $hog_instance listening" fail "not listening after 30 s: $(tail -3 "$DLOG")"
		elif login_wait "hog: ib_srp login" "ch_count=2" "0 1"; then
			D=$(host_lun_dev "$H" 0)
			d=${D#/dev/}
			d0=$(wc -l <"$DLOG")
			stop=$STRESS_DIR/hog.stop samples=$STRESS_DIR/hog.samples flog=$STRESS_DIR/srpflood.txt
			rm -f "$stop"
			hog_sampler "$d" "$samples" "$stop" &
			spid=$!
			fio_secs=$((8 + HOG_SECS + 10))
			(
				fio_quiet --name=hogvictim --filename="$D" --direct=1 --rw=randwrite --bs=64k --iodepth=8 \
					--size=32M --offset=0 --verify_backlog=32 --time_based --runtime="$fio_secs" 2>/dev/null
				echo "$FIO_RC|$FIO_WRITES|$FIO_READS|$FIO_VERR|$FIO_IOERR|$FIO_SUMMARY|$FIO_OUT" >/tmp/hog.res
			) &
			vpid=$!
			read -r w0 _ <<<"$(disk_writes "$d")"
			wait_for 30 eval "[ \"\$(disk_writes $d | cut -d' ' -f1)\" -gt $((w0 + 16)) ]"
			t_io=$(uptime_s)
			sleep 3
			# srpflood's lines with the guest uptime in front (process substitution: $! is
			# srpflood's own PID)
			t_fl=$(uptime_s)
			echo "SRPTVM\$ $FLOOD -target $RXE_IP4:$PORT2 -id-ext $ID_EXT -ioc-guid $IOC_GUID -initiator-ext $HOG_EXT -lun 3 -commands $HOG_COMMANDS -size 8MiB -duration ${HOG_SECS}s"
			"$FLOOD" -target "$RXE_IP4:$PORT2" -id-ext "$ID_EXT" -ioc-guid "$IOC_GUID" -initiator-ext "$HOG_EXT" \
				-lun 3 -commands "$HOG_COMMANDS" -size 8MiB -duration "${HOG_SECS}s" \
				> >(while IFS= read -r l; do read -r up _ </proc/uptime; echo "$up $l"; done >"$flog") 2>&1 &
			fpid=$!
			if wait_for $((HOG_SECS + 60)) eval "! kill -0 $fpid"; then
				wait "$fpid"
				frc=$?
			else
				kill -KILL "$fpid"
				wait "$fpid" 2>/dev/null
				frc="killed: still running $((HOG_SECS + 60)) s after it started"
			fi
			sleep 0.5
			sed 's/^/srpflood| /' "$flog"
			if ! wait_for $((fio_secs + 240)) eval "! kill -0 $vpid"; then
				echo "SRPTVM: victim fio still running; its disk: $(cat "/sys/block/$d/stat")"
			fi
			wait "$vpid"
			: >"$stop"
			wait "$spid"
			IFS='|' read -r vrc vw vr vv vio vsum vout </tmp/hog.res
			t_fio=$(tail -1 "$samples" | cut -d' ' -f1)
			# srpflood's own account
			fl_login=$(grep -m1 ' SRPFLOOD login ok ' "$flog" | cut -d' ' -f5- | cut -c1-200)
			t_sent=$(grep -m1 ' SRPFLOOD sent ' "$flog" | cut -d' ' -f1)
			fl_sent=$(grep -m1 ' SRPFLOOD sent ' "$flog" | sed -n 's/.*commands=\([0-9]*\).*/\1/p')
			fl_comp=$(grep -m1 ' SRPFLOOD send completions ' "$flog" | cut -d' ' -f5-)
			fl_end=$(grep -m1 ' SRPFLOOD end ' "$flog")
			t_end=$(cut -d' ' -f1 <<<"$fl_end")
			reason=$(sed -n 's/.* reason=\([a-z-]*\).*/\1/p' <<<"$fl_end")
			after=$(sed -n 's/.* after_s=\([0-9.]*\).*/\1/p' <<<"$fl_end")
			datain=$(sed -n 's/.* data_in_bytes=\([0-9]*\).*/\1/p' <<<"$fl_end")
			sendok=$(sed -n 's/.* send_ok=\([0-9]*\).*/\1/p' <<<"$fl_end")
			if [ "$frc" = 0 ] && [ -n "$fl_end" ] && [ -n "$fl_sent" ] && [ "${sendok:-0}" = "$fl_sent" ]; then
				record "hog: srpflood" pass "port $PORT2, initiator ext $HOG_EXT: $fl_login; $fl_sent READ(10) of 8 MiB to LUN 3 all received by the target ($fl_comp); the target's RDMA WRITEs changed $datain bytes of its buffer (0 when the first response, stuck in RNR, is in front of every WRITE); ended by $reason after $after s"
			else
				record "hog: srpflood" fail "exit $frc; $(grep -v ' SRPFLOOD \(login\|sent\|send\) ' "$flog" | head -2 | cut -d' ' -f2- | tr '\n' ' ')${fl_end:+; $fl_end}"
			fi
			if [ "$vrc" = 0 ] && [ "$vv" = 0 ] && [ "$vio" = 0 ] && [ "$vw" -gt 0 ] && [ "$vr" -gt 0 ]; then
				record "hog: fio verify on port $PORT" pass "$vsum (64 KiB random writes, iodepth 8, ${fio_secs} s)"
			else
				sed 's/^/fio| /' "$vout" | head -60
				record "hog: fio verify on port $PORT" fail "$vsum: $(grep -m1 -iE 'verify|error|bad' "$vout")"
			fi
			# the stall, over the whole of fio's run once its I/O flowed
			read -r st ss se _ <<<"$(hog_stall "$samples" "$t_io" "$t_fio")"
			t_sent=${t_sent:-$t_fl} t_end=${t_end:-$t_fio}
			before_n=$(hog_count "$samples" "$t_io" "$t_sent")
			during_n=$(hog_count "$samples" "$t_sent" "$t_end")
			after_n=$(hog_count "$samples" "$t_end" "$t_fio")
			rel() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f", a - b }'; }
			errs=$(srp_transport_errors "$SC_DMESG")
			log=$(tail -n +$((d0 + 1)) "$DLOG")
			# the daemon logs its BUSY answers per channel, with a count, at most every 10 s
			vid=0x0000000000000000$RXE_GUID
			busy=$(grep '	commands answered BUSY' <<<"$log" | grep -F "\"initiator\": \"$vid\"" |
				sed -n 's/.*"commands": \([0-9]*\).*/\1/p' | awk '{ n += $1 } END { print n + 0 }')
			detail="longest time without a completed I/O ${st} s (uptime $ss to $se: $(rel "$ss" "$t_sent") to $(rel "$se" "$t_sent") s from srpflood's commands); bound ${HOG_BOUND_S} s (rdma_timeout ${HOG_RDMA_TIMEOUT:-default $HOG_DEFAULT_TIMEOUT} + 5); I/Os completed: $before_n in the $(rel "$t_sent" "$t_io") s before srpflood's commands, $during_n in the $(rel "$t_end" "$t_sent") s until srpflood ended ($reason), $after_n in the $(rel "$t_fio" "$t_end") s after; ib_srp: ${errs:+$(srp_errors_summary "$errs")}${errs:-no transport errors}; daemon: $busy BUSY answers to ib_srp logged"
			if awk -v s="$st" -v b="$HOG_BOUND_S" 'BEGIN { exit !(s != "" && s <= b) }'; then
				record "hog: victim I/O stall" pass "$detail"
			else
				record "hog: victim I/O stall" fail "$detail"
			fi
			# The daemon's account: a WARN line matching HOG_STALL_RE (to be named exactly by
			# the engine's watchdog), for the channel of srpflood's initiator port.
			fid=0x$HOG_EXT$RXE_GUID
			warn=$(awk -F'\t' -v re="$HOG_STALL_RE" '$2 == "WARN" && $3 ~ re' <<<"$log" | grep -F "\"initiator\": \"$fid\"" |
				head -1 | cut -f3- | cut -c1-500)
			acc=$(grep '	login accepted	' <<<"$log" | grep -c "\"initiator\": \"$fid\"")
			if [ -n "$warn" ] && [ "$reason" = disconnected ]; then
				record "hog: daemon closed the stalled channel" pass "$warn; srpflood disconnected by the target $after s after its commands"
			else
				[ -n "$warn" ] || warn="no WARN line matching \"$HOG_STALL_RE\" for $fid in the log of instance $hog_instance"
				held=
				[ "$reason" = duration ] && held=": it held the connection as long as it wanted"
				record "hog: daemon closed the stalled channel" fail "$warn ($acc login(s) of $fid accepted); srpflood: ${reason:-no end line}${after:+ after $after s}$held"
			fi
			logout_host "$H"
		fi
		wait_for 30 eval '[ -z "$(new_unclosed_channels)" ]'
		daemon_ok "hog: daemon"
		goroutines_check "hog: goroutines"
	fi
	scenario_end
fi

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
