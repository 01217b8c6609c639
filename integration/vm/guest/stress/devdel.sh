# shellcheck shell=bash
# stress/devdel.sh - the "devdel" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_devdel in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# instance 4, "devdel" (not with quick=1): `rdma link del rxe0` while the
#   initiator is logged in and writing: the command must complete (rxe cannot
#   revoke a process's verbs contexts, so it waits until the daemon has
#   closed them), the daemon stays up, logs it and holds no verbs device
#   file any more; `rdma link add` brings rxe0 back and the daemon serves
#   logins on its wildcard listener without being told; its listener on the
#   specific address 169.254.50.1:$PORT2 failed with the device and listens
#   again after SIGHUP (configs/README.md). Data written before the removal
#   reads back. Then SIGQUIT for the goroutines. If `rdma link del` is still
#   blocked after 90 s, the daemon gets SIGTERM (then SIGKILL after 40 s) so
#   that the run can go on, and the checks after it say so.
# shellcheck disable=SC2317 # functions called through check/wait_for
rxe_back() {
	run rdma link add "$RXE" type rxe netdev "$RXE_NETDEV" || return 1
	wait_for 20 port_active "$RXE" || return 1
	wait_for 20 gid_index "$RXE" "$(ip4_gid "$RXE_IP4")" || return 1
	wait_for 20 test -e "/sys/class/infiniband_srp/srp-$RXE-1/add_target"
}
uverbs_fds() { for f in "/proc/$PID/fd/"*; do readlink "$f"; done 2>/dev/null | grep -c '/dev/infiniband/uverbs'; }
uverbs_maps() { grep -c 'uverbs' "/proc/$PID/maps" 2>/dev/null; }

scenario_devdel() {
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
}
