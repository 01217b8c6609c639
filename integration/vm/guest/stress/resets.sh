# shellcheck shell=bash
# stress/resets.sh - the "resets" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_resets in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# resets: every second alternately `sg_reset -d` (LOGICAL UNIT RESET) and
#   `sg_reset -b` (bus reset, which ib_srp does not have, so the kernel
#   escalates it to a host reset: ib_srp disconnects and logs in again) while
#   fio writes, as blktests srp/014 (which flips a device the error handler
#   set offline back to running, counted here).
# shellcheck disable=SC2317 # functions called through check/wait_for
scenario_resets() {
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
}
