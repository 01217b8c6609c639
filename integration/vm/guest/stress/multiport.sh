# shellcheck shell=bash
# stress/multiport.sh - the "multiport" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_multiport in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# multiport: two initiator ports (initiator_ext a1 and b2) logged in at once
#   with ch_count=4 each, each ACL its own LUN map: port a1 sees only LUN 2,
#   port b2 only LUN 3 (neither has a LUN 0: Linux finds them by REPORT LUNS);
#   fio on both at once.
# shellcheck disable=SC2317 # functions called through check/wait_for
scenario_multiport() {
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
}
