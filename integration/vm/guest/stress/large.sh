# shellcheck shell=bash
# stress/large.sh - the "large" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_large in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# large: 4 MiB and 8 MiB writes, direct and buffered, with cmd_sg_entries=255
#   (descriptor table inside SRP_CMD) and cmd_sg_entries=1 + allow_ext_sg=1
#   (external table the target fetches with RDMA READ), max_sect=16384, as
#   blktests srp/005-010. Buffered writes are read back with O_DIRECT after
#   dropping the page cache (fio --verify_only), so the target's data is
#   what is checked, not the page cache. The block layer's requests to the
#   disk are traced (block:block_rq_issue): at least 3/4 of the direct writes
#   must go out whole, as one SRP_CMD each.
# shellcheck disable=SC2317 # functions called through check/wait_for
scenario_large() {
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
}
