# shellcheck shell=bash
# stress/rejects.sh - the "rejects" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_rejects in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# rejects: logins the target must refuse, alternately with a wrong target
#   port identifier (id_ext) and from an initiator port no ACL admits; then
#   a good login still works.
# shellcheck disable=SC2317 # functions called through check/wait_for
scenario_rejects() {
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
}
