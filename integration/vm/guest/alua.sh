#!/bin/bash
# alua.sh - ALUA end to end: srptarget serves one LUN through two target ports
# (target.id_ext and target.ports[0]), each in its own target port group, plus a
# remote port of a second daemon that does not exist; ib_srp logs in to both;
# sg_inq, sg_vpd and sg_rtpg show the groups; dm-multipath (multipath-tools,
# without udev or multipathd) makes one map with the ALUA handler and
# priorities; a SIGHUP reload that swaps the groups' states moves the I/O from
# one path to the other (per-path I/O counts from /sys/block/sdX/stat), the
# standby path answers NOT READY 04h/0Bh, a reload to unavailable 04h/0Ch.
#
#   integration/vm/alua.sh          # host side: build, image, run, table
#
# Arguments (k=v): bin=/usr/local/bin/srptarget
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
CONFIG=/etc/srptarget-alua.yaml
DLOG=/tmp/srptarget.log
PORT=5555
ID_A=5e2e00000000a001 # target.id_ext, relative port 1, group 1
ID_B=5e2e00000000a002 # target.ports[0].id_ext, relative port 2, group 2
# Relative port 3 is in group 2 too: another daemon's port, described but not served.

daemon_alive() { [ -n "$PID" ] && [ -r "/proc/$PID/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$PID/stat"; }
both_disks() { srp_disk_of "$ID_A" >/dev/null && srp_disk_of "$ID_B" >/dev/null; }

# write_config STATE1 STATE2: the daemon's configuration with those group states.
write_config() {
	cat >"$CONFIG" <<EOF
target:
  id_ext: "$ID_A"
  relative_port_id: 1
  ports:
    - id_ext: "$ID_B"
      relative_port_id: 2
listeners:
  - address: $RXE_IP4
    port: $PORT
luns:
  - lun: 0
    backstore: memory
    size: 64MiB
    serial: "a1ua0000"
acls:
  - initiators: ["*"]
    luns: [0]
alua:
  groups:
    - id: 1
      state: $1
      ports: [1]
    - id: 2
      state: $2
      ports: [2, 3]
EOF
	chmod 0600 "$CONFIG"
}

# reload_states STATE1 STATE2: rewrite the configuration, SIGHUP, wait for the daemon to log
# the new states.
reload_states() {
	local n
	n=$(grep -c "asymmetric access states changed" "$DLOG")
	write_config "$1" "$2"
	run kill -HUP "$PID"
	changed() { [ "$(grep -c "asymmetric access states changed" "$DLOG")" -gt "$n" ]; }
	wait_for 10 changed
}

# mpath_read: 4 MiB of direct reads from the multipath device.
mpath_read() { dd if="$MPDEV" of=/dev/null bs=64k count=64 iflag=direct 2>&1 | tail -1; }

[ -x "$BIN" ] || fail "no $BIN"

step "soft-RoCE, modules"
setup_rxe >/tmp/rxe.txt 2>&1 || { cat /tmp/rxe.txt; fail "soft-RoCE setup"; }
# The ALUA device handler must be loaded before the disks appear: the SCSI midlayer attaches it
# at scan time to devices whose INQUIRY says TPGS != 0.
for m in scsi_dh_alua dm_mod dm_multipath dm_round_robin dm_service_time dm_queue_length; do
	run modprobe $m || fail "modprobe $m"
done
record "modules" pass "scsi_dh_alua, dm_multipath"

step "srptarget with two target ports"
write_config active/optimized active/non-optimized
cat "$CONFIG"
run "$BIN" validate --config "$CONFIG" || fail "configuration refused"
"$BIN" serve --config "$CONFIG" >"$DLOG" 2>&1 &
PID=$!
tail -n +1 -f "$DLOG" 2>/dev/null | awk '{ print "srptarget| " $0; fflush() }' &
listening() { daemon_alive && cm_listening "$PORT"; }
wait_for 30 listening || fail "srptarget does not listen on $PORT"
record "srptarget listening" pass "port $PORT, target ports $ID_A (relative 1) and $ID_B (relative 2)"

step "two logins"
srp_login "id_ext=$ID_A,ioc_guid=$ID_A,dest=$RXE_IP4:$PORT" || fail "add_target port A"
srp_login "id_ext=$ID_B,ioc_guid=$ID_A,dest=$RXE_IP4:$PORT" || fail "add_target port B"
if wait_for 60 both_disks; then
	DA=$(srp_disk_of $ID_A) DB=$(srp_disk_of $ID_B)
	record "two paths" pass "port A /dev/$DA, port B /dev/$DB"
else
	for h in /sys/class/scsi_host/host*; do echo "$h: $(cat "$h/id_ext" 2>/dev/null)"; done
	fail "want a disk through each target port, have: $(srp_disks | tr '\n' ' ')"
fi

step "sg_inq, sg_vpd -p di, sg_rtpg -d -e"
for d in $DA $DB; do
	run sg_inq "/dev/$d" | tee "/tmp/inq-$d.txt"
done
if grep -q "TPGS=1" "/tmp/inq-$DA.txt" && grep -q "TPGS=1" "/tmp/inq-$DB.txt"; then
	record "sg_inq TPGS" pass "TPGS=1 (implicit ALUA) on both paths"
else
	record "sg_inq TPGS" fail "$(grep -o 'TPGS=[0-9]' "/tmp/inq-$DA.txt" "/tmp/inq-$DB.txt" | tr '\n' ' ')"
fi
for d in $DA $DB; do
	run sg_vpd -p di "/dev/$d" | tee "/tmp/vpd-$d.txt"
	run sg_inq -p 0x83 "/dev/$d"
done
rel_tpg() { awk '/Relative target port:/ { r = $NF } /Target port group:/ { g = $NF } END { print r "/" g }' "$1"; }
if [ "$(rel_tpg "/tmp/vpd-$DA.txt")" = "0x1/0x1" ] && [ "$(rel_tpg "/tmp/vpd-$DB.txt")" = "0x2/0x2" ]; then
	record "VPD 0x83 port designators" pass "relative port/group: A $(rel_tpg "/tmp/vpd-$DA.txt"), B $(rel_tpg "/tmp/vpd-$DB.txt")"
else
	record "VPD 0x83 port designators" fail "A $(rel_tpg "/tmp/vpd-$DA.txt"), B $(rel_tpg "/tmp/vpd-$DB.txt"), want 0x1/0x1 and 0x2/0x2"
fi
run sg_rtpg -d -e "/dev/$DB" | tee /tmp/rtpg1.txt
run sg_rtpg -e -H "/dev/$DB"
# sg_rtpg -d prints each group's state and its relative ports.
if grep -A3 "target port group id : 0x1" /tmp/rtpg1.txt | grep -q "active/optimized" &&
	grep -A3 "target port group id : 0x2" /tmp/rtpg1.txt | grep -q "active/non optimized" &&
	grep -q "Relative target port ids:" /tmp/rtpg1.txt && grep -qE "^ +0x03$" /tmp/rtpg1.txt; then
	record "sg_rtpg -d -e" pass "group 1 active/optimized (port 1), group 2 active/non-optimized (ports 2, 3: 3 is remote)"
else
	record "sg_rtpg -d -e" fail "$(tr '\n' ' ' </tmp/rtpg1.txt | head -c 300)"
fi
for d in $DA $DB; do
	echo "SRPTVM: /dev/$d: dh_state $(cat "/sys/block/$d/device/dh_state" 2>/dev/null), access_state $(cat "/sys/block/$d/device/access_state" 2>/dev/null)"
done
check_eq "scsi_dh_alua attached" "alua alua" "$(cat "/sys/block/$DA/device/dh_state") $(cat "/sys/block/$DB/device/dh_state")"

step "multipath"
mpath_setup /tmp/mp1.txt "$DA" "$DB"
if [ -n "$MPNAME" ] && [ -b "$MPDEV" ] && grep -q "hwhandler='1 alua'" /tmp/mp1.txt &&
	grep -q "prio=50" /tmp/mp1.txt && grep -q "prio=10" /tmp/mp1.txt; then
	record "multipath -ll" pass "$MPNAME: hwhandler '1 alua', path groups prio 50 ($DA) and 10 ($DB)"
	MP=1
else
	record "multipath -ll" fail "$(tr '\n' ' ' </tmp/mp1.txt | head -c 300)"
	run multipath -v4 2>&1 | tail -120
	MP=
fi

if [ -n "$MP" ]; then
	step "I/O through the map: on the active/optimized path"
	a0=$(disk_ios "$DA") b0=$(disk_ios "$DB")
	run mpath_read
	a1=$(disk_ios "$DA") b1=$(disk_ios "$DB")
	if [ $((a1 - a0)) -ge 64 ] && [ $((b1 - b0)) -eq 0 ]; then
		record "I/O on the optimized path" pass "$DA +$((a1 - a0)) I/Os, $DB +$((b1 - b0))"
	else
		record "I/O on the optimized path" fail "$DA +$((a1 - a0)) I/Os, $DB +$((b1 - b0))"
	fi
fi

step "SIGHUP: group 1 standby, group 2 active/optimized"
mark=$(dmesg_mark)
reload_states standby active/optimized || fail "the daemon did not apply the new states"
record "reload" pass "$(grep "asymmetric access states changed" "$DLOG" | tail -1 | head -c 200)"
if [ -n "$MP" ]; then
	a0=$(disk_ios "$DA") b0=$(disk_ios "$DB")
	run mpath_read
	run mpath_read
	a1=$(disk_ios "$DA") b1=$(disk_ios "$DB")
	dmesg_since "$mark" | grep -iE "alua|multipath|device-mapper" | tail -20
	# The first command on each path gets ASYMMETRIC ACCESS STATE CHANGED; scsi_dh_alua then
	# asks REPORT TARGET PORT GROUPS again and the map moves to port B's path.
	if [ $((b1 - b0)) -ge 128 ] && [ $((a1 - a0)) -le 4 ]; then
		record "I/O moved" pass "$DB +$((b1 - b0)) I/Os, $DA +$((a1 - a0))"
	else
		record "I/O moved" fail "$DB +$((b1 - b0)) I/Os, $DA +$((a1 - a0))"
	fi
	run multipath -ll 2>&1 | tee /tmp/mp2.txt
	run multipath -r -v2 2>&1 | tail -5
	run multipath -ll 2>&1 | tee /tmp/mp3.txt
	# in_group PRIO DISK: DISK is listed under the path group line with prio=PRIO.
	in_group() { awk -v p="prio=$1 " -v d=" $2 " '/prio=/ { in_g = index($0 " ", p) > 0; next } in_g && index($0, d) { ok = 1 } END { exit !ok }' /tmp/mp3.txt; }
	if in_group 50 "$DB" && in_group 1 "$DA"; then
		record "multipath -ll after reload" pass "$DB in the prio 50 group, $DA in the prio 1 (standby) group"
	else
		record "multipath -ll after reload" fail "$(tr '\n' ' ' </tmp/mp3.txt | head -c 300)"
	fi
fi
# Linux logs the unit attention ASYMMETRIC ACCESS STATE CHANGED as "Asymmetric access state
# changed" (scsi_report_sense), then scsi_dh_alua the state it read again.
ua=$(dmesg_since "$mark" | grep -c "Asymmetric access state changed")
states=$(dmesg_since "$mark" | grep -oE "alua: port group 0[12] state [A-Z]" | sort -u | tr '\n' ' ')
# (scsi_dh_alua updates every port group one REPORT TARGET PORT GROUPS describes, but logs
# only some: group 2's new state shows in access_state and in multipath's priorities above.)
if [ "$ua" -ge 2 ] && [[ $states == *"01 state S"* ]]; then
	record "ASYMMETRIC ACCESS STATE CHANGED seen" pass "kernel: $ua unit attentions, then $states"
else
	record "ASYMMETRIC ACCESS STATE CHANGED seen" fail "$ua unit attentions logged; $states"
fi
for d in $DA $DB; do
	echo "SRPTVM: /dev/$d: access_state $(cat "/sys/block/$d/device/access_state" 2>/dev/null)"
done

step "the standby path answers NOT READY"
run sg_rtpg -d -e "/dev/$DA" | tee /tmp/rtpg2.txt
# sg_turs -v prints the sense; sg_dd would read too, sg_turs is enough to see the state.
run sg_turs -v "/dev/$DA" >/tmp/tur-a.txt 2>&1
cat /tmp/tur-a.txt
if grep -qi "standby" /tmp/tur-a.txt; then
	record "standby: NOT READY 04h/0Bh" pass "$(grep -im1 "standby" /tmp/tur-a.txt | sed 's/^ *//')"
else
	record "standby: NOT READY 04h/0Bh" fail "$(tr '\n' ' ' </tmp/tur-a.txt | head -c 200)"
fi
if run sg_turs -v "/dev/$DB"; then
	record "active path: TEST UNIT READY" pass "GOOD on $DB"
else
	record "active path: TEST UNIT READY" fail "on $DB"
fi

step "SIGHUP: group 1 unavailable"
reload_states unavailable active/optimized || fail "the daemon did not apply the new states"
run sg_turs -v "/dev/$DA" >/tmp/tur-u.txt 2>&1
run sg_turs -v "/dev/$DA" >>/tmp/tur-u.txt 2>&1
cat /tmp/tur-u.txt
if grep -qi "unavailable" /tmp/tur-u.txt; then
	record "unavailable: NOT READY 04h/0Ch" pass "$(grep -im1 "unavailable" /tmp/tur-u.txt | sed 's/^ *//')"
else
	record "unavailable: NOT READY 04h/0Ch" fail "$(tr '\n' ' ' </tmp/tur-u.txt | head -c 200)"
fi
run sg_rtpg -d "/dev/$DB"

step "logout, stop"
[ -n "$MP" ] && run multipath -F
srp_logout || record "logout" fail "disks stay"
kill -TERM "$PID"
wait "$PID"
record "srptarget stop" pass "exit $?"
kernel_log_problems >/tmp/klog.txt 2>&1
if [ -s /tmp/klog.txt ]; then
	cat /tmp/klog.txt
	record "kernel log" fail "$(head -1 /tmp/klog.txt)"
else
	record "kernel log" pass "no warnings, oopses or hung tasks"
fi
finish
