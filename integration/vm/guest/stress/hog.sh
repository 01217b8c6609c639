# shellcheck shell=bash
# stress/hog.sh - the "hog" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_hog in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# last instance, "hog": a misbehaving initiator against the shared data-buffer
#   pool. srpflood (integration/vm/tools/srpflood) logs in on the second
#   listener ($PORT2) from a second address of the guest (hog_source, another
#   host as far as the target can tell) as initiator port ext f1 with RNR
#   retry 7, as ib_srp does, on hog_channels channels (4), posts no receive
#   buffer and sends hog_commands READ(10) of 8 MiB on each; then it trickles:
#   one receive buffer per channel every hog_trickle (500 ms), a new READ for
#   each response, so that every channel completes something now and then
#   while its commands keep pool buffers. Meanwhile ib_srp on the first
#   listener ($PORT) writes and verifies 64 KiB blocks on LUN 0. Pass: 0
#   verify errors, the victim's disk never goes longer than rdma_timeout (10 s
#   here) + 5 s without completing an I/O (sampled from /sys/block/sdX/stat
#   every 0.25 s), the daemon logs a WARN line for each of srpflood's
#   channels saying it closed it as stalled (its oldest work request older
#   than rdma_timeout), srpflood sees every channel disconnected, and the
#   goroutines are back to the reference. hog_channels=1 hog_trickle=0s is
#   the first round's single channel that never receives.
# shellcheck disable=SC2317 # functions called through check/wait_for
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

scenario_hog() {
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
	# limits.max_initiator_buffer: empty, the daemon's default (25% of the pool); 100% leaves
	# the victim only the stall watchdog.
	HOG_MAX_INITIATOR_BUFFER=$(arg hog_max_initiator_buffer "")
	# srpflood's channels, its trickle (0s: it never receives) and the address it connects
	# from: a second address on the rxe netdev, so that the target sees another host than
	# ib_srp's (each source address has its own share of the pool).
	HOG_CHANNELS=$(arg hog_channels 4)
	HOG_TRICKLE=$(arg hog_trickle 500ms)
	HOG_SOURCE=$(arg hog_source 169.254.50.9)
	HOG_TIMEOUT_S=$(secs "${HOG_RDMA_TIMEOUT:-$HOG_DEFAULT_TIMEOUT}")
	HOG_BOUND_S=$((HOG_TIMEOUT_S + 5))
	# srpflood holds the connection this long unless the target closes it first: longer than
	# the bound, so that a daemon that never closes the channel fails.
	HOG_SECS=$(arg hog_secs $((HOG_TIMEOUT_S + 15)))
	HOG_COMMANDS=$(arg hog_commands 32)
	# The daemon's line for each channel it closed (srp/watchdog.go): WARN "RDMA stalled: a
	# work request outstanding for longer than rdma_timeout; closing the channel and
	# aborting its commands", naming srpflood's initiator port.
	HOG_STALL_RE=$(arg hog_stall_re '^RDMA stalled: ')
	scenario hog "srpflood, $HOG_CHANNELS channels from $HOG_SOURCE, holds pool buffers (RNR retry 7, one receive per channel every $HOG_TRICKLE) for up to ${HOG_SECS}s while ib_srp verifies on the other listener"
	CONFIG_HOG=$STRESS_DIR/hog.yaml
	{
		add=
		[ -n "$HOG_RDMA_TIMEOUT" ] && add="$add\n  rdma_timeout: $HOG_RDMA_TIMEOUT"
		[ -n "$HOG_MAX_INITIATOR_BUFFER" ] && add="$add\n  max_initiator_buffer: \"$HOG_MAX_INITIATOR_BUFFER\""
		sed "s/^  max_transfer_size: 8MiB\$/&$add/" "$CONFIG"
		# acls: is the configuration's last section
		printf '  # srpflood (the hog scenario)\n  - initiators: ["0x%s*"]\n    luns: [3]\n' "$HOG_EXT"
	} >"$CONFIG_HOG"
	echo "SRPTVM: $CONFIG_HOG: rdma_timeout ${HOG_RDMA_TIMEOUT:-not set (default $HOG_DEFAULT_TIMEOUT)}, max_initiator_buffer ${HOG_MAX_INITIATOR_BUFFER:-not set (default)}; bound on the victim's stall ${HOG_BOUND_S}s; srpflood holds up to ${HOG_SECS}s with $HOG_COMMANDS commands"
	diff "$CONFIG" "$CONFIG_HOG"
	FLOOD=$(command -v srpflood)
	hog_src_added=
	if [ -n "$HOG_SOURCE" ] && ! ip -o addr show dev "$RXE_NETDEV" | grep -qF " $HOG_SOURCE/"; then
		ip addr add "$HOG_SOURCE/16" dev "$RXE_NETDEV" && hog_src_added=1
	fi
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
			fargs=(-target "$RXE_IP4:$PORT2" -id-ext "$ID_EXT" -ioc-guid "$IOC_GUID" -initiator-ext "$HOG_EXT"
				-lun 3 -commands "$HOG_COMMANDS" -size 8MiB -duration "${HOG_SECS}s"
				-channels "$HOG_CHANNELS" -trickle "$HOG_TRICKLE" ${HOG_SOURCE:+-source "$HOG_SOURCE"})
			echo "SRPTVM\$ $FLOOD ${fargs[*]}"
			"$FLOOD" "${fargs[@]}" \
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
			fl_logins=$(grep -c ' SRPFLOOD login ok ' "$flog")
			t_sent=$(grep -m1 ' SRPFLOOD sent ' "$flog" | cut -d' ' -f1)
			fl_sent=$(grep -m1 ' SRPFLOOD sent ' "$flog" | sed -n 's/.*commands=\([0-9]*\).*/\1/p')
			fl_comp=$(grep -m1 ' SRPFLOOD send completions ' "$flog" | cut -d' ' -f5-)
			fl_end=$(grep -m1 ' SRPFLOOD end ' "$flog")
			t_end=$(cut -d' ' -f1 <<<"$fl_end")
			reason=$(sed -n 's/.* reason=\([a-z-]*\).*/\1/p' <<<"$fl_end")
			after=$(sed -n 's/.* after_s=\([0-9.]*\).*/\1/p' <<<"$fl_end")
			datain=$(sed -n 's/.* data_in_bytes=\([0-9]*\).*/\1/p' <<<"$fl_end")
			sendok=$(sed -n 's/.* send_ok=\([0-9]*\).*/\1/p' <<<"$fl_end")
			responses=$(sed -n 's/.* responses=\([0-9]*\).*/\1/p' <<<"$fl_end")
			if [ "$frc" = 0 ] && [ -n "$fl_end" ] && [ -n "$fl_sent" ] && [ "$fl_logins" = "$HOG_CHANNELS" ] &&
				[ "${sendok:-0}" -ge "$fl_sent" ]; then
				record "hog: srpflood" pass "port $PORT2, initiator ext $HOG_EXT, $fl_logins channels from ${HOG_SOURCE:-the address of its route}: $fl_login; $fl_sent READ(10) of 8 MiB to LUN 3 all received by the target ($fl_comp); $responses responses taken by the trickle (one receive per channel every $HOG_TRICKLE), each answered by a new READ; the target's RDMA WRITEs changed $datain bytes of its buffers; ended by $reason after $after s"
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
			warns=$(awk -F'\t' -v re="$HOG_STALL_RE" '$2 == "WARN" && $3 ~ re' <<<"$log" | grep -F "\"initiator\": \"$fid\"")
			nwarn=$(grep -c . <<<"$warns")
			warn=$(head -1 <<<"$warns" | cut -f3- | cut -c1-500)
			acc=$(grep '	login accepted	' <<<"$log" | grep -c "\"initiator\": \"$fid\"")
			if [ -n "$warn" ] && [ "$nwarn" = "$HOG_CHANNELS" ] && [ "$reason" = disconnected ]; then
				record "hog: daemon closed the stalled channels" pass "$nwarn WARN lines, the first: $warn; srpflood's $HOG_CHANNELS channels disconnected by the target $after s after its commands"
			else
				[ -n "$warn" ] || warn="no WARN line matching \"$HOG_STALL_RE\" for $fid in the log of instance $hog_instance"
				held=
				[ "$reason" = duration ] && held=": it held the connection as long as it wanted"
				record "hog: daemon closed the stalled channels" fail "$nwarn of $HOG_CHANNELS channels closed as stalled: $warn ($acc login(s) of $fid accepted); srpflood: ${reason:-no end line}${after:+ after $after s}$held"
			fi
			logout_host "$H"
		fi
		wait_for 30 eval '[ -z "$(new_unclosed_channels)" ]'
		[ -n "$hog_src_added" ] && ip addr del "$HOG_SOURCE/16" dev "$RXE_NETDEV"
		daemon_ok "hog: daemon"
		goroutines_check "hog: goroutines"
	fi
	scenario_end
}
