# shellcheck shell=bash
# stress/cycles.sh - the "cycles" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_cycles in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# cycles: logout/login cycles of the initiator while fio writes, as blktests
#   srp/011: fio runs on a dm-multipath device (queue_if_no_path, one path)
#   over the SRP disk; each cycle deletes the SRP remote port, waits 1-3 s,
#   logs in again and switches the multipath table to the new disk. Needs
#   dm-mod, dm-multipath, dm-round-robin (/lab/dm/*.ko) and dmsetup, which
#   stress.sh on the host takes from Debian's packages.
# shellcheck disable=SC2317 # functions called through check/wait_for
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

scenario_cycles() {
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
}
