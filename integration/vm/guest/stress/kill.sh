# shellcheck shell=bash
# stress/kill.sh - the "kill" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_kill in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# instance 3, "kill" (not with quick=1): file LUN; data written and then
#   synchronized (SYNCHRONIZE CACHE from fsync), data written with O_SYNC
#   (FUA, or a cache flush per write if FUA is not offered), then fio with
#   O_SYNC writes running while the daemon is killed with SIGKILL; ib_srp
#   waits (fast_io_fail_tmo raised) and reconnects to instance 4; fio must
#   finish and verify, and the data acknowledged before the kill reads back.
# shellcheck disable=SC2317 # functions called through check/wait_for
scenario_kill() {
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
}
