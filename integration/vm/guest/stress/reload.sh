# shellcheck shell=bash
# stress/reload.sh - the "reload" scenario of guest/stress.sh, which sources this file
# (with lib.sh and stress-lib.sh) and calls scenario_reload in its turn; the scenario
# shares stress.sh's variables (the daemon instance, ports, LUNs, bounds).
#
# reload: SIGHUP every 2 s (reloads=, 4 with quick=1, else 10) alternating
#   between the configuration and one that gives LUN 0 and LUN 1 a vendor
#   string, so that each reload replaces both logical units (over the same
#   backstores) while fio writes and verifies on LUN 1: every reload must
#   succeed, fio must verify without error, and no command may fail because
#   its logical unit was retired (configs/README.md, "Reloading").
# shellcheck disable=SC2317 # functions called through check/wait_for
scenario_reload() {
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
}
