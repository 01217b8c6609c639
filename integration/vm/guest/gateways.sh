#!/bin/bash
# gateways.sh - two gateways in front of one RBD image: two srptarget daemons (A: target port
# id_ext ...b001, relative port 1, RDMA/CM port 5555; B: ...b002, relative port 2, port 5556)
# serve the same image rbd/gw0 as LUN 0 with the same identity (the same configured serial,
# hence the same NAA designator and WWID) in two ALUA target port groups: group 1 (port 1)
# active/optimized, group 2 (port 2) active/non-optimized, each daemon describing the peer's
# port as a remote one. The Ceph cluster runs in the guest (ceph-lib.sh). ib_srp logs in to
# both; dm-multipath (without udev or multipathd, as guest/alua.sh) makes one map of two paths.
# fio writes through the map with crc32c verify while daemon A gets SIGKILL; ib_srp fails A's
# I/O after fast_io_fail_tmo, dm-multipath moves it to B, whose librbd breaks the dead
# owner's exclusive lock; A is restarted, ib_srp reconnects, the map is reloaded (what
# multipathd's path checker would do) and the I/O fails back to A. Checks: one map, two paths,
# ALUA priorities; the failover time (the longest stall of the map's completions after the
# kill, from /sys/block/dm-N/stat sampled every 0.1 s); I/O on B while A is down and on A
# again after; fio exit 0 with 0 verify errors; data written and fsync'd before the kill reads
# back. Then the ALUA states, shared by the two gateways with the reservations: sg_stpg
# through one gateway makes its group active/optimized; the other gateway's I_T nexus gets
# ASYMMETRIC ACCESS STATE CHANGED, REPORT TARGET PORT GROUPS through both gives the same
# states, the kernel's ALUA handler and dm-multipath follow; and back through the other.
# Then persistent reservations, shared by the two gateways through a RADOS object
# (pr_store: rados): two cluster nodes (initiator_ext 1 and 2), each logged in to both
# gateways, register their keys through every path and node 1 reserves, as fence_scsi does;
# both gateways show the same keys and reservation, READ FULL STATUS both gateways' ports;
# node 2 preempts node 1 through gateway B while node 1 writes through A and B: every write of
# node 1 started after the PREEMPT completed fails, and the region node 2 wrote after it holds
# node 2's data at the end. With partition=1 (the default) gateway A is then cut off from the
# cluster (its client blocklisted at the OSDs): it fails closed (02/04/0C) within its lease,
# and a PREEMPT through B completes only after A's lease and drain. Host side:
# integration/vm/gateways.sh (make stress-gateways).
#
# Arguments (k=v): bin=/usr/local/bin/srptarget image_mib=256 fio_size=48M kill_after=10
#   down=20 watch_timeout=10 partition=1
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=ceph-lib.sh
. /lab/ceph-lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
IMAGE_MIB=$(arg image_mib 256)
FIO_SIZE=$(arg fio_size 48M)     # the region fio writes and verifies across the kill
KILL_AFTER=$(arg kill_after 10)  # seconds of fio I/O before SIGKILL
DOWN=$(arg down 20)              # seconds daemon A stays down
WATCH_TIMEOUT=$(arg watch_timeout 10) # osd_client_watch_timeout: when a dead owner's lock can be broken
SERIAL=5e2e000000006001          # the LUN's serial in both daemons: one NAA, one WWID
ID_A=5e2e00000000b001 ID_B=5e2e00000000b002
PORT_A=5555 PORT_B=5556
W=/tmp/gw
mkdir -p $W /run/srptarget
PID_A='' PID_B=''

alive() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$1/stat" 2>/dev/null; }
cleanup() {
	[ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null
	[ -n "${WRITER:-}" ] && touch $W/stop && sleep 1
	[ -n "${MPDEV:-}" ] && multipath -F >/dev/null 2>&1
	alive "$PID_A" && kill -TERM "$PID_A"
	alive "$PID_B" && kill -TERM "$PID_B"
	sleep 1
	ceph_stop
	finish
}
trap cleanup EXIT

# write_config NAME ID_EXT RELATIVE_PORT PORT: gateway NAME's configuration. Both list both
# groups; the other gateway's relative port is a remote port there.
write_config() {
	cat >"$W/$1.yaml" <<YAML
target:
  id_ext: "$2"
  relative_port_id: $3
state_dir: /var/lib/srptarget/gw-$1
listeners:
  - address: $RXE_IP4
    port: $4
luns:
  - lun: 0
    backstore: rbd
    block_size: 512
    serial: "$SERIAL"
    rbd:
      pool: rbd
      image: gw0
      ceph_conf: $C/ceph.conf
      rados_osd_op_timeout: 30s
acls:
  - initiators: ["*"]
    luns: [0]
alua:
  groups:
    - id: 1
      state: active/optimized
      ports: [1]
    - id: 2
      state: active/non-optimized
      ports: [2]
YAML
	chmod 0600 "$W/$1.yaml"
}

# start_gw NAME PORT: serve NAME's configuration; sets PID_NAME.
start_gw() {
	local pid
	echo "SRPTVM\$ $BIN serve --config $W/$1.yaml --control /run/srptarget/$1.sock"
	"$BIN" serve --config "$W/$1.yaml" --control "/run/srptarget/$1.sock" >>"$W/$1.log" 2>&1 &
	pid=$!
	printf -v "PID_$1" %s "$pid"
	# one follower per log: the restarted gateway appends to the same file
	if [ ! -e "$W/$1.followed" ]; then
		: >"$W/$1.followed"
		tail -n +1 -f "$W/$1.log" 2>/dev/null | awk -v p="srptarget-$1| " '{ print p $0; fflush() }' &
	fi
	wait_for 60 eval "alive $pid && cm_listening $2"
}

both_disks() { srp_disk_of "$ID_A" >/dev/null && srp_disk_of "$ID_B" >/dev/null; }

# fio_run TAG NAME ARGS...: fio job NAME with crc32c verify on the map, its output in
# $W/fio-TAG.txt; sets FIO_RC, FIO_VERR, FIO_IOERR, FIO_SUMMARY and writes them to $W/fio-TAG.res.
fio_run() {
	local out=$W/fio-$1.txt res=$W/fio-$1.res name=$2 issued
	shift 2
	echo "SRPTVM\$ fio $* (output $out)"
	fio --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --eta=never --group_reporting \
		--name="$name" --filename="$MPDEV" "$@" >"$out" 2>&1
	FIO_RC=$?
	issued=$(sed -n 's/.*issued rwts: total=\([0-9]*\),\([0-9]*\),.*/\1 \2/p' "$out" | head -1)
	FIO_VERR=$(grep -ciE 'verify failed|bad magic|bad header|verify: |verify type mismatch|err=84' "$out")
	FIO_IOERR=$(grep -ciE 'io_u error|Input/output error' "$out")
	FIO_SUMMARY="${issued#* } writes, ${issued% *} reads, $FIO_VERR verify errors, $FIO_IOERR I/O errors, fio exit $FIO_RC"
	echo "$FIO_RC|$FIO_VERR|$FIO_IOERR|$FIO_SUMMARY" >"$res"
	fio_ok || sed 's/^/fio| /' "$out" | head -40
}
fio_ok() { [ "$FIO_RC" = 0 ] && [ "$FIO_VERR" = 0 ] && [ "$FIO_IOERR" = 0 ]; }
# fio_load TAG: the variables of a fio_run that ran in the background.
fio_load() { IFS='|' read -r FIO_RC FIO_VERR FIO_IOERR FIO_SUMMARY <"$W/fio-$1.res" 2>/dev/null || FIO_RC=none FIO_SUMMARY="no result"; }

# login_to EXT ID PORT: log in with initiator_ext EXT to the target port ID_EXT ID on PORT
# and print the new disk (/dev/sdX): ib_srp has no attribute naming initiator_ext, so the
# logins are made one at a time and the new disk is the one that was not there before.
more_srp_disks() { [ "$(srp_disks | wc -l)" -gt "$1" ]; }
login_to() {
	local before d
	before=$(srp_disks | tr '\n' ' ')
	srp_login "id_ext=$2,ioc_guid=$2,dest=$RXE_IP4:$3,initiator_ext=$1" >&2 || return 1
	wait_for 60 more_srp_disks "$(wc -w <<<"$before")" || return 1
	sleep 1
	for d in $(srp_disks); do
		case " $before " in *" $d "*) ;; *) echo "/dev/$d"; return 0 ;; esac
	done
	return 1
}
# clear_ua DEV: TEST UNIT READY until no unit attention is pending (PERSISTENT RESERVE IN would
# report it instead of answering).
clear_ua() { sg_turs "$1" >/dev/null 2>&1; sg_turs "$1" >/dev/null 2>&1; }
pr_keys() { clear_ua "$1"; sg_persist -n -i -k "$1" 2>&1 | awk '$1 ~ /^0x/ { print $1 }' | sort | tr '\n' ' ' | sed 's/ $//'; }
# pr_holder DEV: the reservation's key and type, as "0xa1 5", or nothing.
pr_holder() { clear_ua "$1"; sg_persist -n -i -r "$1" 2>&1 | awk '/Key=/ { sub(/.*Key=/, ""); k = $1 } /type:/ { t = ($0 ~ /registrants only/) ? 5 : "?" } END { if (k != "") print k, t }'; }
# block TAG I: the 4 KiB block I of region R as TAG writes it.
block() { printf '%-4096s' "$1 block $2" | tr ' ' '.'; }
lba_bytes() { printf '%02x %02x %02x %02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
# write_region DEV TAG: the 64 blocks of region R, each WRITE(10) with sg_raw; also keeps the
# expected content in $W/TAG.bin.
write_region() {
	local i
	: >"$W/$2.bin"
	for i in $(seq 0 63); do
		block "$2" "$i" >"$W/blk"
		cat "$W/blk" >>"$W/$2.bin"
		# shellcheck disable=SC2046 # the LBA's bytes are separate arguments
		sg_raw -t 20 -s 4096 -i "$W/blk" "$1" 2a 00 $(lba_bytes $((R + i * 8))) 00 00 08 00 >/dev/null 2>&1 || return 1
	done
}
read_region() { dd if="$1" iflag=direct bs=4096 skip=$((R / 8)) count=64 2>/dev/null; }
# node1_writer DEV: node 1 writes block after block of region R through DEV until $W/stop,
# logging "start end disk block exit sense" per write to $W/n1.log. A write that PREEMPT AND
# ABORT aborts gets no answer (SAM-5: TAS is 0): sg_raw gives up on it after its 10 s timeout
# (exit 99, the SRP abort that follows is ib_srp's) and the loop goes on.
node1_writer() {
	local i=0 t0 rc out
	while [ ! -e $W/stop ]; do
		block node1 $((i % 64)) >"$W/n1blk.${1##*/}"
		t0=$(uptime_s)
		# shellcheck disable=SC2046
		out=$(sg_raw -t 10 -v -s 4096 -i "$W/n1blk.${1##*/}" "$1" 2a 00 $(lba_bytes $((R + (i % 64) * 8))) 00 00 08 00 2>&1)
		rc=$?
		echo "$t0 $(uptime_s) $1 $((i % 64)) $rc $(grep -ioE 'reservation conflict|registrations preempted|commands cleared|task aborted|unavailable' <<<"$out" | head -1 | tr ' ' _)" >>$W/n1.log
		i=$((i + 1))
	done
}
# started_after T DEV: how many of node 1's writes through DEV started after T.
started_after() { awk -v t="$1" -v d="$2" '$3 == d && $1 > t { n++ } END { print n + 0 }' $W/n1.log; }
# report_fence T0 T1 DEV NAME: node 1's writes through DEV (gateway NAME) around a PREEMPT
# issued at T0 and completed at T1: every write started after T1 must have failed (the unit
# attention REGISTRATIONS PREEMPTED, then RESERVATION CONFLICT). One in flight across the
# PREEMPT is aborted and unanswered; the region check says it did not land after T1.
report_fence() {
	local r
	r=$(awk -v t0="$1" -v t1="$2" -v d="$3" '$3 == d {
			if ($1 < t0) { before++; if ($5 == 0) okb++ }
			else if ($1 > t1) { after++; if ($5 == 0) oka++; if (tolower($6) ~ /conflict/) conf++; if (tolower($6) ~ /preempted/) ua++
				if (first == "") first = sprintf("%.2f", $2 - t1) }
			else { across++; if ($5 == 99) unanswered++ } }
		END { printf "%d %d %d %d %d %d %d %d %s", before, okb, after, oka, conf, ua, across, unanswered, first == "" ? "none" : first }' $W/n1.log)
	read -r before okb after oka conf ua across unanswered first <<<"$r"
	if [ "$okb" -gt 0 ] && [ "$after" -gt 0 ] && [ "$oka" = 0 ] && [ "$conf" -gt 0 ]; then
		record "node 1 fenced through gateway $4" pass "before the PREEMPT $okb of $before writes GOOD; $across in flight across it ($unanswered aborted, unanswered); after it 0 of $after GOOD ($ua REGISTRATIONS PREEMPTED, $conf RESERVATION CONFLICT), the first answered $first s after the PREEMPT completed, which took $(awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }') s"
	else
		record "node 1 fenced through gateway $4" fail "before: $okb of $before GOOD; across: $across; after: $oka of $after GOOD, $conf conflicts, $ua unit attentions"
		grep " $3 " $W/n1.log | tail -20
	fi
}

# rtpg_states DISK: the groups' states as REPORT TARGET PORT GROUPS through /dev/DISK gives them, in
# group order ("00 01": group 1 active/optimized, group 2 active/non-optimized).
rtpg_states() { sg_rtpg "/dev/$1" 2>/dev/null | sed -n 's/.*asymmetric access state : 0x\([0-9a-f]*\).*/\1/p' | tr '\n' ' ' | sed 's/ $//'; }
access_state() { cat "/sys/block/$1/device/access_state" 2>/dev/null; }
hctl() { basename "$(readlink -f "/sys/block/$1/device")"; }
# mp_prio DEV: the priority of DEV's path group in multipath -ll.
mp_prio() { multipath -ll 2>/dev/null | awk -v d=" $1 " '/prio=/ { match($0, /prio=[0-9]+/); p = substr($0, RSTART + 5, RLENGTH - 5) } index($0, d) { print p; exit }'; }
[ -x "$BIN" ] || fail "no $BIN"

step "ceph cluster in the guest, image rbd/gw0 (default features: exclusive-lock)"
for b in ceph-mon ceph-osd monmaptool "$RBDCTL" multipath fio; do
	command -v "$b" >/dev/null || fail "$b is not in the image (build-image.sh with SRPT_VM_CEPH=1)"
done
# The OSD forgets a dead client's watch after osd_client_watch_timeout; only then will the
# surviving gateway's librbd break (and blocklist) the dead owner's exclusive lock.
ceph_start gw0 "$IMAGE_MIB" "osd client watch timeout = $WATCH_TIMEOUT"

step "soft-RoCE, modules"
setup_rxe >$W/rxe.txt 2>&1 || { cat $W/rxe.txt; fail "soft-RoCE setup"; }
for m in scsi_dh_alua dm_mod dm_multipath dm_round_robin; do
	run modprobe $m || fail "modprobe $m"
done

step "two gateways"
write_config A $ID_A 1 $PORT_A
write_config B $ID_B 2 $PORT_B
cat $W/A.yaml
for g in A B; do run "$BIN" validate --config "$W/$g.yaml" || fail "gateway $g: configuration refused"; done
start_gw A $PORT_A || fail "gateway A does not listen on $PORT_A: $(tail -3 $W/A.log)"
start_gw B $PORT_B || fail "gateway B does not listen on $PORT_B: $(tail -3 $W/B.log)"
record "two gateways listening" pass "A pid $PID_A port $PORT_A (relative port 1, group 1), B pid $PID_B port $PORT_B (relative port 2, group 2), one image rbd/gw0"

step "logins to both"
n0=$(dmesg_mark)
srp_login "id_ext=$ID_A,ioc_guid=$ID_A,dest=$RXE_IP4:$PORT_A" || fail "add_target A"
srp_login "id_ext=$ID_B,ioc_guid=$ID_B,dest=$RXE_IP4:$PORT_B" || fail "add_target B"
wait_for 60 both_disks || fail "want a disk through each gateway, have: $(srp_disks | tr '\n' ' ')"
DA=$(srp_disk_of $ID_A) DB=$(srp_disk_of $ID_B)
HA=$(disk_host "$DA") HB=$(disk_host "$DB")
wa=$(cat "/sys/block/$DA/device/wwid") wb=$(cat "/sys/block/$DB/device/wwid")
sa=$(sg_inq -p 0x80 "/dev/$DA" | awk '/Unit serial number:/ { print $NF }')
sb=$(sg_inq -p 0x80 "/dev/$DB" | awk '/Unit serial number:/ { print $NF }')
if [ -n "$wa" ] && [ "$wa" = "$wb" ] && [ "$sa" = "$SERIAL" ] && [ "$sb" = "$SERIAL" ]; then
	record "same LUN identity" pass "/dev/$DA (A) and /dev/$DB (B): wwid $wa, serial $sa"
else
	record "same LUN identity" fail "A: wwid '$wa' serial '$sa'; B: wwid '$wb' serial '$sb'"
fi
# ib_srp: fail I/O on a lost path after 3 s (not 15) so that dm-multipath moves it; try to
# reconnect every 2 s. The SCSI command timeout covers B's wait for the exclusive lock.
for h in $HA $HB; do
	rp=/sys/class/srp_remote_ports/port-${h#host}:1
	echo 2 >"$rp/reconnect_delay"
	echo 3 >"$rp/fast_io_fail_tmo"
	echo "$rp: reconnect_delay $(cat "$rp/reconnect_delay"), fast_io_fail_tmo $(cat "$rp/fast_io_fail_tmo"), dev_loss_tmo $(cat "$rp/dev_loss_tmo")"
done
for d in $DA $DB; do echo 90 >"/sys/block/$d/device/timeout"; done

step "multipath"
mpath_setup $W/mp1.txt "$DA" "$DB"
maps=$(grep -cE ' dm-[0-9]+ ' $W/mp1.txt)
if [ "$maps" = 1 ] && [ -b "$MPDEV" ] && grep -q "hwhandler='1 alua'" $W/mp1.txt &&
	grep -q "prio=50" $W/mp1.txt && grep -q "prio=10" $W/mp1.txt && grep -q " $DA " $W/mp1.txt && grep -q " $DB " $W/mp1.txt; then
	record "multipath -ll" pass "one map $MPNAME ($(awk '/ dm-[0-9]+ / { print $2 " " $3; exit }' $W/mp1.txt)), paths $DA (prio 50, A) and $DB (prio 10, B), hwhandler alua"
else
	MPDEV=
	fail "want one map with two paths and ALUA priorities: $(tr '\n' ' ' <$W/mp1.txt | head -c 300)"
fi
# the map's block device name (dm-N): /dev/mapper/NAME is a node of its own here, not a link
DM=$(awk '/ dm-[0-9]+ / { for (i = 1; i <= NF; i++) if ($i ~ /^dm-[0-9]+$/) { print $i; exit } }' $W/mp1.txt)
[ -e "/sys/block/$DM/stat" ] || fail "no /sys/block/$DM/stat for $MPDEV"

step "data written and fsync'd before the kill"
# Region P (the first 8 MiB) is written and flushed (end_fsync) while both gateways run; it
# must read back at the end, whatever happened in between.
fio_run pre pre --rw=write --bs=64k --size=8M --offset=0 --do_verify=0 --end_fsync=1
if fio_ok; then
	record "region P written, fsync'd" pass "$FIO_SUMMARY"
else
	record "region P written, fsync'd" fail "$FIO_SUMMARY"
fi

step "fio with crc32c verify on the map; SIGKILL gateway A; restart; fail back"
# "uptime completed-I/Os-of-the-map A's B's" every 0.1 s
(
	while [ -e "/sys/block/$DM/stat" ]; do
		echo "$(uptime_s) $(disk_ios "$DM") $(disk_ios "$DA" 2>/dev/null || echo 0) $(disk_ios "$DB" 2>/dev/null || echo 0)"
		sleep 0.1
	done
) >$W/samples 2>/dev/null &
SAMPLER=$!
fio_run main main --rw=randwrite --bs=4k --iodepth=16 --offset=16M --size="$FIO_SIZE" --verify_backlog=64 &
FIOPID=$!
sleep "$KILL_AFTER"
a0=$(disk_ios "$DA") b0=$(disk_ios "$DB")
if ! kill -0 $FIOPID 2>/dev/null; then
	record "fio running at the kill" fail "fio ended within $KILL_AFTER s: raise fio_size"
fi
TK=$(uptime_s)
run kill -KILL "$PID_A"
wait "$PID_A" 2>/dev/null
echo "SRPTVM: gateway A killed at uptime $TK; rport A $(cat "/sys/class/srp_remote_ports/port-${HA#host}:1/state")"
# A stays down until B has completed I/O (at most 90 s), and for at least DOWN s.
on_b() { [ $(($(disk_ios "$DB") - b0)) -ge 16 ]; }
wait_for 90 on_b
tb=$(since "$TK")
awk -v t="$tb" -v d="$DOWN" 'BEGIN { exit !(t < d) }' && sleep "$(awk -v t="$tb" -v d="$DOWN" 'BEGIN { print d - t }')"
a1=$(disk_ios "$DA") b1=$(disk_ios "$DB")
multipath -ll 2>&1 | tee $W/mp2.txt
if [ $((b1 - b0)) -ge 16 ]; then
	record "I/O on B while A is down" pass "$DB +$((b1 - b0)) I/Os, $DA +$((a1 - a0)) in the $(since "$TK") s after the kill (B's first 16 within $tb s)"
else
	record "I/O on B while A is down" fail "$DB +$((b1 - b0)) I/Os, $DA +$((a1 - a0)) in the $(since "$TK") s after the kill"
fi
TR=$(uptime_s)
start_gw A $PORT_A || record "gateway A restarted" fail "not listening: $(tail -3 $W/A.log)"
rport_running() { [ "$(cat "/sys/class/srp_remote_ports/port-${HA#host}:1/state")" = running ]; }
if wait_for 60 rport_running; then
	record "gateway A restarted, ib_srp reconnected" pass "pid $PID_A, rport running $(since "$TR") s after the restart"
else
	record "gateway A restarted, ib_srp reconnected" fail "rport A $(cat "/sys/class/srp_remote_ports/port-${HA#host}:1/state") 60 s after the restart"
fi
# No multipathd here: reload the map, as its path checker would reinstate the path; with
# failback immediate the I/O goes back to A's (optimized) group.
run multipath -r -v2 2>&1 | tail -5
multipath -ll 2>&1 | tee $W/mp3.txt
a2=$(disk_ios "$DA") b2=$(disk_ios "$DB")
# The ALUA states are explicit and shared: when dm-multipath failed over to B's
# active/non-optimized group, Linux's ALUA handler sent SET TARGET PORT GROUPS through B to make
# it active/optimized, and A's group became active/non-optimized for both gateways. So the I/O
# stays on B after A's return (the ALUA step below moves it back with sg_stpg); had the kernel
# not asked, A's group would still be active/optimized and the I/O would fail back to A.
STATES_AFTER=$(rtpg_states "$DA")
echo "SRPTVM: states after A's return, through A: $STATES_AFTER, through B: $(rtpg_states "$DB"); $(dmesg_since "$n0" | grep -oE 'alua: port group 0[12] state [A-Z]' | tail -4 | tr '\n' ' ')"
if [ "$STATES_AFTER" = "01 00" ]; then
	IO_ON=$DB IO_NAME="stays on B (made active/optimized by the kernel's SET TARGET PORT GROUPS at the failover, A's group active/non-optimized, through both gateways)"
else
	IO_ON=$DA IO_NAME="back on A"
fi
io_on0=$(disk_ios "$IO_ON")
io_moved() { [ $(($(disk_ios "$IO_ON") - io_on0)) -ge 32 ]; }
if kill -0 $FIOPID 2>/dev/null && wait_for 60 io_moved; then
	record "I/O after A's return" pass "$IO_NAME: $DA +$(($(disk_ios "$DA") - a2)) I/Os, $DB +$(($(disk_ios "$DB") - b2)) after the map reload"
elif ! kill -0 $FIOPID 2>/dev/null; then
	record "I/O after A's return" fail "fio had ended before A was back: raise fio_size"
else
	record "I/O after A's return" fail "$IO_NAME: $IO_ON +$(($(disk_ios "$IO_ON") - io_on0)) I/Os in 60 s after the map reload ($DA +$(($(disk_ios "$DA") - a2)), $DB +$(($(disk_ios "$DB") - b2)))"
fi
wait_for 600 eval "! kill -0 $FIOPID" || record "fio main" fail "still running 600 s on"
wait $FIOPID
kill "$SAMPLER" 2>/dev/null
SAMPLER=
fio_load main
fw=${FIO_SUMMARY%% *} fr=${FIO_SUMMARY#*, }
if fio_ok && [ "${fw:-0}" -gt 0 ] 2>/dev/null && [ "${fr%% *}" -gt 0 ] 2>/dev/null; then
	record "fio across the failover" pass "4 KiB random writes at QD 16 over $FIO_SIZE, crc32c: $FIO_SUMMARY"
else
	record "fio across the failover" fail "$FIO_SUMMARY"
fi

# Failover time: the longest stretch without a completion on the map that starts at most 1 s
# before the kill and before the restart, measured to the first completion after it.
FAILOVER=$(awk -v tk="$TK" -v tr="$TR" '
	NR == 1 { last = $1; n = $2; next }
	$2 != n { if (last >= tk - 1 && last < tr && $1 - last > gap) { gap = $1 - last; from = last; to = $1 }
		last = $1; n = $2 }
	END { if (gap) printf "%.1f %.1f %.1f", to - tk, from - tk, gap; else print "none" }' $W/samples)
echo "SRPTVM: samples: $(wc -l <$W/samples), kill at $TK, restart at $TR; failover (resumed after kill, stall began after kill, stall length): $FAILOVER"
awk -v tk="$TK" '$1 >= tk - 2 && $1 <= tk + 30' $W/samples | awk 'NR % 5 == 1' | sed 's/^/sample| /'
if [ "$FAILOVER" != none ]; then
	read -r fo_resume fo_from fo_gap <<<"$FAILOVER"
	record "failover time" pass "I/O completed again on B ${fo_resume} s after SIGKILL of A (no completion from ${fo_from} s to ${fo_resume} s after it, ${fo_gap} s; fast_io_fail_tmo 3 s, exclusive-lock break after the ${WATCH_TIMEOUT} s watch timeout)"
else
	record "failover time" fail "no stall found around the kill in $W/samples"
fi

step "reads back"
fio_run preverify pre --rw=write --bs=64k --size=8M --offset=0 --verify_only
if fio_ok; then
	record "region P (fsync'd before the kill) reads back" pass "$FIO_SUMMARY"
else
	record "region P (fsync'd before the kill) reads back" fail "$FIO_SUMMARY"
fi
echo "SRPTVM: ib_srp lines since the logins:"
dmesg_since "$n0" | grep -iE 'srp|alua|multipath|device-mapper' | tail -40

# stpg_switch TO FROM NAME_TO NAME_FROM WANT: sg_stpg --optimized through gateway NAME_TO's
# path TO (its group active/optimized, the one that was active/optimized takes TO's old
# state); the change must reach the other gateway's I_T nexus FROM as ASYMMETRIC ACCESS STATE
# CHANGED (the kernel logs it for FROM's device when a command through FROM meets it), both
# gateways must then report WANT, the kernel's ALUA handler must see the new states, and
# dm-multipath must move the map's I/O to TO.
stpg_switch() {
	local to=$1 from=$2 nto=$3 nfrom=$4 want=$5 mark t0 sa sb ua uato io_to io_from
	clear_ua "/dev/$to"
	clear_ua "/dev/$from"
	mark=$(dmesg_mark)
	t0=$(uptime_s)
	check "ALUA: sg_stpg --optimized through gateway $nto" sg_stpg -v --optimized "/dev/$to"
	echo "SRPTVM: sg_stpg took $(since "$t0") s; access_state before the unit attention: $from $(access_state "$from"), $to $(access_state "$to")"
	sg_turs -v "/dev/$from" 2>&1 | head -5
	ua=$(dmesg_since "$mark" | grep -c "$(hctl "$from"): .*Asymmetric access state changed" || true)
	uato=$(dmesg_since "$mark" | grep -c "$(hctl "$to"): .*Asymmetric access state changed" || true)
	if [ "$ua" -ge 1 ] && [ "$uato" = 0 ]; then
		record "ALUA: unit attention through gateway $nfrom" pass "ASYMMETRIC ACCESS STATE CHANGED on $from ($(hctl "$from"), gateway $nfrom), none on $to (the I_T nexus SET TARGET PORT GROUPS came through)"
	else
		record "ALUA: unit attention through gateway $nfrom" fail "$ua on $from, $uato on $to: $(dmesg_since "$mark" | grep -iE 'alua|asymmetric' | tr '\n' ' ' | head -c 400)"
	fi
	sa=$(rtpg_states "$from") sb=$(rtpg_states "$to")
	sg_rtpg -d "/dev/$from"
	if [ "$sa" = "$want" ] && [ "$sb" = "$want" ] && [ "$(sg_rtpg "/dev/$from" 2>&1)" = "$(sg_rtpg "/dev/$to" 2>&1)" ]; then
		record "ALUA: the same states through both gateways" pass "REPORT TARGET PORT GROUPS through $from (gateway $nfrom) and $to (gateway $nto): $sa, byte for byte the same"
	else
		record "ALUA: the same states through both gateways" fail "through $from '$sa', through $to '$sb', want '$want'"
	fi
	kstates() { [ "$(access_state "$to")" = active/optimized ] && [ "$(access_state "$from")" = active/non-optimized ]; }
	if wait_for 20 kstates; then
		record "ALUA: the kernel's handler follows" pass "access_state $to active/optimized, $from active/non-optimized; $(dmesg_since "$mark" | grep -oE 'alua: port group 0[12] state [A-Z]' | sort -u | tr '\n' ' ')"
	else
		record "ALUA: the kernel's handler follows" fail "access_state $to '$(access_state "$to")', $from '$(access_state "$from")'"
	fi
	run multipath -r -v2 2>&1 | tail -3
	multipath -ll 2>&1 | tee "$W/mp-$nto.txt"
	io_to=$(disk_ios "$to") io_from=$(disk_ios "$from")
	run dd if=/dev/urandom of="$MPDEV" bs=64k count=64 seek=$((224 * 16)) oflag=direct 2>&1 | tail -1
	io_to=$(($(disk_ios "$to") - io_to)) io_from=$(($(disk_ios "$from") - io_from))
	if [ "$(mp_prio "$to")" = 50 ] && [ "$(mp_prio "$from")" = 10 ] && [ "$io_to" -ge 64 ] && [ "$io_from" -lt 8 ]; then
		record "ALUA: dm-multipath follows" pass "after the map reload $to (gateway $nto) prio 50, $from prio 10; 64 writes of 64 KiB through the map: $to +$io_to I/Os, $from +$io_from"
	else
		record "ALUA: dm-multipath follows" fail "prio $to '$(mp_prio "$to")', $from '$(mp_prio "$from")'; $to +$io_to I/Os, $from +$io_from"
	fi
}

step "ALUA states shared by the gateways: SET TARGET PORT GROUPS through one, seen through the other"
tpgs=$(sg_inq "/dev/$DA" 2>/dev/null | grep -o 'TPGS=[0-9]' | head -1)
tpgsb=$(sg_inq "/dev/$DB" 2>/dev/null | grep -o 'TPGS=[0-9]' | head -1)
if [ "$tpgs" = TPGS=3 ] && [ "$tpgsb" = TPGS=3 ] && [ "$(rtpg_states "$DA")" = "$(rtpg_states "$DB")" ]; then
	record "ALUA: implicit and explicit" pass "$tpgs through A and B; groups 1 and 2 $(rtpg_states "$DB") through both"
else
	record "ALUA: implicit and explicit" fail "$tpgs, $tpgsb; through A '$(rtpg_states "$DA")', through B '$(rtpg_states "$DB")'"
fi
if [ "$(rtpg_states "$DA")" = "01 00" ]; then
	stpg_switch "$DA" "$DB" A B "00 01" # fail back to A
	stpg_switch "$DB" "$DA" B A "01 00"
else
	stpg_switch "$DB" "$DA" B A "01 00"
	stpg_switch "$DA" "$DB" A B "00 01"
fi

step "persistent reservations through both gateways: fence_scsi's keys, node 2 preempts node 1"
run multipath -F
MPDEV=
# Two nodes of a cluster, each an initiator port (initiator_ext 1 and 2), each logged in to both
# gateways: four I_T nexuses, four disks. fence_scsi registers a node's key through every path
# of its device, and unfences by registering and reserving Write Exclusive, registrants only.
N1A=$(login_to 0000000000000001 "$ID_A" "$PORT_A") || fail "node 1 to gateway A"
N1B=$(login_to 0000000000000001 "$ID_B" "$PORT_B") || fail "node 1 to gateway B"
N2A=$(login_to 0000000000000002 "$ID_A" "$PORT_A") || fail "node 2 to gateway A"
N2B=$(login_to 0000000000000002 "$ID_B" "$PORT_B") || fail "node 2 to gateway B"
record "two nodes through both gateways" pass "node 1: $N1A (A), $N1B (B); node 2: $N2A (A), $N2B (B)"
for d in $N1A $N1B $N2A $N2B; do sg_turs "$d" >/dev/null 2>&1; sg_turs "$d" >/dev/null 2>&1; done
KEY1=0xa1 KEY2=0xb2
check "node 1 registers through A and B (-o -I -S)" eval "sg_persist -n -o -I -S $KEY1 $N1A && sg_persist -n -o -I -S $KEY1 $N1B"
check "node 2 registers through A and B (-o -I -S)" eval "sg_persist -n -o -I -S $KEY2 $N2A && sg_persist -n -o -I -S $KEY2 $N2B"
check "node 1 reserves through A (-o -R -T 5)" sg_persist -n -o -R -K "$KEY1" -T 5 "$N1A"
kA=$(pr_keys "$N2A") kB=$(pr_keys "$N1B") rA=$(pr_holder "$N2A") rB=$(pr_holder "$N2B")
if [ "$kA" = "0xa1 0xa1 0xb2 0xb2" ] && [ "$kA" = "$kB" ] && [ "$rA" = "0xa1 5" ] && [ "$rB" = "$rA" ]; then
	record "same registrations and reservation through both gateways" pass "keys $kA; reservation key and type $rA, read through A and through B"
else
	record "same registrations and reservation through both gateways" fail "keys through A '$kA', through B '$kB'; reservation through A '$rA', through B '$rB'"
fi
sg_persist -n -i -s "$N2B" >$W/full.txt 2>&1
ports=$(grep -io 'relative port address: 0x[0-9a-f]*' $W/full.txt | awk '{ print $NF }' | sort | uniq -c | awk '{ printf "%s x%s ", $2, $1 }')
if [ "$(grep -ci 'relative port address: 0x1$' $W/full.txt)" = 2 ] && [ "$(grep -ci 'relative port address: 0x2$' $W/full.txt)" = 2 ]; then
	record "READ FULL STATUS through B: both gateways' ports" pass "4 registrations, relative ports $ports"
else
	record "READ FULL STATUS through B: both gateways' ports" fail "relative ports: $ports; $(tr '\n' ' ' <$W/full.txt | head -c 400)"
fi

# Node 1 writes 4 KiB blocks of region R (64 blocks) through A and B in turn, while node 2
# preempts it through B (PREEMPT AND ABORT, as fence_scsi fences); then node 2 writes the
# whole region through B. Every write node 1 starts after the PREEMPT completes must fail, and
# the region must hold node 2's data at the end: no write of node 1 landed after the fence.
R=$((192 << 11)) # LBA of 192 MiB, past fio's regions
rm -f $W/stop $W/n1.log
node1_writer "$N1A" &
WRITER="$!"
node1_writer "$N1B" &
WRITER="$WRITER $!"
sleep 3
TP0=$(uptime_s)
check "node 2 preempts node 1 through B (-o -A -T 5)" sg_persist -n -o -A -K "$KEY2" -S "$KEY1" -T 5 "$N2B"
TP1=$(uptime_s)
check "node 2 writes the region through B" write_region "$N2B" node2
# Until node 1 has tried at least 3 more writes through each gateway (the one aborted in
# flight gets no answer for its 10 s timeout).
more_tries() { [ "$(started_after "$TP1" "$N1A")" -ge 3 ] && [ "$(started_after "$TP1" "$N1B")" -ge 3 ]; }
wait_for 60 more_tries
touch $W/stop
# shellcheck disable=SC2086 # two pids
wait $WRITER
WRITER=
report_fence "$TP0" "$TP1" "$N1A" A
report_fence "$TP0" "$TP1" "$N1B" B
read_region "$N2A" >$W/region.bin
if cmp -s $W/region.bin $W/node2.bin; then
	record "no write of node 1 landed after the fence" pass "the 64 blocks of the region, read through A, are node 2's (written through B after the PREEMPT)"
else
	record "no write of node 1 landed after the fence" fail "$(cmp $W/region.bin $W/node2.bin 2>&1 | head -1); node 1's blocks: $(grep -c 'node1' $W/region.bin)"
fi
k=$(pr_keys "$N1A")
if [ "$k" = "0xb2 0xb2" ] && [ "$(pr_holder "$N1B")" = "0xb2 5" ]; then
	record "after the fence" pass "keys $k, reservation 0xb2 type 5, through A and B"
else
	record "after the fence" fail "keys '$k', reservation through B '$(pr_holder "$N1B")'"
fi

if [ "$(arg partition 1)" = 1 ]; then
	step "gateway A cut off from the cluster (blocklisted at the OSDs) while node 1 preempts node 2 through B"
	for d in $N1A $N1B $N2A $N2B; do clear_ua "$d"; done
	check "node 1 registers again through A and B" eval "sg_persist -n -o -I -S $KEY1 $N1A && sg_persist -n -o -I -S $KEY1 $N1B"
	addr=$(sed -n 's/.*persistent reservations shared with the other gateways.*"client": "\([^"]*\)".*/\1/p' $W/A.log | tail -1)
	[ -n "$addr" ] || fail "no client address of gateway A in its log"
	TC=$(uptime_s)
	run "$RBDCTL" mon "{\"prefix\": \"osd blocklist\", \"blocklistop\": \"add\", \"addr\": \"$addr\"}"
	# Gateway A's lease runs out: what a reservation could conflict with fails there with
	# NOT READY, TARGET PORT IN UNAVAILABLE STATE (02/04/0C), which dm-multipath takes as a
	# path failure; I/O goes on through B.
	stale_on_a() { sg_raw -v "$N1A" 00 00 00 00 00 00 2>&1 | grep -qi 'unavailable state'; }
	if wait_for 30 stale_on_a; then
		TS=$(uptime_s)
		record "gateway A fails closed" pass "02/04/0C (target port in unavailable state) through A $(since "$TC") s after it was cut off (pr_lease 5 s)"
	else
		TS=
		record "gateway A fails closed" fail "$(sg_raw -v "$N1A" 00 00 00 00 00 00 2>&1 | tr '\n' ' ' | head -c 300)"
	fi
	TP0=$(uptime_s)
	check "node 1 preempts node 2 through B while A is cut off" sg_persist -n -o -A -K "$KEY1" -S "$KEY2" -T 5 "$N1B"
	TP1=$(uptime_s)
	took=$(awk -v a="$TP0" -v b="$TP1" 'BEGIN { printf "%.1f", b - a }')
	if [ -n "$TS" ] && awk -v s="$TS" -v p="$TP1" 'BEGIN { exit !(s < p) }'; then
		record "the PREEMPT waits until A is fenced" pass "it took $took s (A's lease 5 s + its rados_osd_op_timeout 30 s + margin); A was failing commands $(awk -v s="$TS" -v p="$TP1" 'BEGIN { printf "%.1f", p - s }') s before it completed"
	else
		record "the PREEMPT waits until A is fenced" fail "took $took s; A stale at ${TS:-never}, PREEMPT done at $TP1"
	fi
	k=$(pr_keys "$N2B")
	if [ "$k" = "0xa1 0xa1" ]; then
		record "after the fence through B" pass "keys $k through B"
	else
		record "after the fence through B" fail "keys '$k'"
	fi
	# A is fenced for good: its client is blocklisted. SIGKILL, as an operator would restart it.
	run kill -KILL "$PID_A"
	wait "$PID_A" 2>/dev/null
	PID_A=
fi

step "logout, stop"
run multipath -F
MPDEV=
srp_logout || record "logout" fail "disks stay"
[ -n "$PID_A" ] && kill -TERM "$PID_A"
kill -TERM "$PID_B"
st=
for p in $PID_A $PID_B; do wait_for 45 eval "! alive $p" || st="$st $p still running"; done
wait "$PID_B"
rb=$?
if [ -z "$st" ] && [ "$rb" = 0 ]; then
	record "gateways stop" pass "SIGTERM: both exited (B with 0)"
else
	record "gateways stop" fail "$st; B exit $rb"
fi
kernel_log_problems >$W/klog.txt 2>&1
if [ -s $W/klog.txt ]; then
	cat $W/klog.txt
	record "kernel log" fail "$(head -1 $W/klog.txt)"
else
	record "kernel log" pass "no warnings, oopses or hung tasks"
fi
