#!/bin/bash
# selftest.sh - proves the VM harness without srptarget: soft-RoCE, user-space
# verbs (RC and RDMA/CM), and a real SRP login of the Linux ib_srp initiator to
# the kernel's own SRP target (LIO ib_srpt) serving a RAM disk, with SCSI
# queries, a data check, a fio verify run, ext4, and logout.
#
#   integration/vm/run-vm.sh integration/vm/guest/selftest.sh [k=v ...]
#
# Arguments (k=v): port=5000 (ib_srpt's RDMA/CM port), rd_mib=256 (RAM disk
# size), fio_runtime=5, ipv6_login=1 (second login over IPv6; 0 skips it),
# plus setup_rxe's (netdev, mac, ip4, ip6; see lib.sh).
# Functions below are called through check and wait_for:
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh

PORT=$(arg port 5000)
RD_MIB=$(arg rd_mib 256)
FIO_RUNTIME=$(arg fio_runtime 5)
IPV6_LOGIN=$(arg ipv6_login 1)
CFG=/sys/kernel/config/target

# ------------------------------------------------------------------ soft-RoCE
step "soft-RoCE"
t=$(uptime_s)
setup_rxe || fail "soft-RoCE setup (rdma_rxe on dummy0)"
record rxe pass "rxe0 on $RXE_NETDEV, node GUID $RXE_GUID, GID[$RXE_GID4] $RXE_IP4, GID[$RXE_GID6] $RXE_IP6 ($(since "$t") s)"

run ibv_devinfo -d "$RXE" >/tmp/devinfo.txt 2>&1
cat /tmp/devinfo.txt
if grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo.txt; then
	record ibv_devinfo pass "PORT_ACTIVE, $(awk '/active_mtu/ {print "active_mtu " $2}' /tmp/devinfo.txt), $(awk '/link_layer/ {print "link_layer " $2}' /tmp/devinfo.txt)"
else
	record ibv_devinfo fail "port 1 not PORT_ACTIVE"
fi

# ------------------------------------------------------------------ user-space verbs
step "verbs: ibv_rc_pingpong (RC, GID index $RXE_GID4)"
# server and client in this VM; they exchange QP numbers over TCP port 18515
timeout 60 ibv_rc_pingpong -d "$RXE" -g "$RXE_GID4" -n 200 >/tmp/pp-server.txt 2>&1 &
srv=$!
if wait_for 20 tcp_listening 18515; then
	run timeout 60 ibv_rc_pingpong -d "$RXE" -g "$RXE_GID4" -n 200 127.0.0.1 >/tmp/pp-client.txt 2>&1
	crc=$?
else
	crc=timeout
fi
wait $srv
src=$?
cat /tmp/pp-server.txt /tmp/pp-client.txt
if [ "$crc" = 0 ] && [ $src = 0 ]; then
	record ibv_rc_pingpong pass "200 x 4096 B, $(grep -o '[0-9.]* usec/iter' /tmp/pp-client.txt)"
else
	record ibv_rc_pingpong fail "client $crc, server $src"
fi

for ip in "$RXE_IP4" "$RXE_IP6"; do
	step "verbs: rping over RDMA/CM to $ip"
	timeout 60 rping -s -a "$ip" -C 20 >/tmp/rping-server.txt 2>&1 &
	srv=$!
	if wait_for 20 cm_listening 7174; then
		run timeout 60 rping -c -a "$ip" -C 20 -V >/tmp/rping-client.txt 2>&1
		crc=$?
	else
		crc="no RDMA/CM listener on port 7174"
	fi
	wait $srv
	src=$?
	cat /tmp/rping-client.txt /tmp/rping-server.txt
	if [ "$crc" = 0 ] && [ $src = 0 ]; then
		record "rping $ip" pass "20 RDMA read/write ping-pongs with data verify (-V)"
	else
		record "rping $ip" fail "client $crc, server $src"
	fi
done

# ------------------------------------------------------------------ LIO ib_srpt (reference target)
step "LIO ib_srpt: rd_mcp RAM disk of $RD_MIB MiB on RDMA/CM port $PORT"
run modprobe target_core_mod || fail "modprobe target_core_mod"
run modprobe ib_srpt || fail "modprobe ib_srpt"
# ib_srpt takes the node GUID of the first RDMA device as its service GUID;
# ib_srp's id_ext and ioc_guid must both equal it.
GUID=$(cat /sys/module/ib_srpt/parameters/srpt_service_guid)
GUID=${GUID#0x}
# target port name: the port GUID (GID 0 without the fe80:: prefix)
GID0=$(cat "/sys/class/infiniband/$RXE/ports/1/gids/0")
TPORT=${GID0#fe80:0000:0000:0000:}
TPG=$CFG/srpt/$TPORT/$TPORT
RD=$CFG/core/rd_mcp_0/ramdisk0
SERIAL=srptvm-ramdisk0
lio_setup() {
	mkdir -p /etc/target &&
		mkdir -p "$RD" &&
		echo "rd_pages=$((RD_MIB * 256))" >"$RD/control" &&
		echo 1 >"$RD/enable" &&
		echo "$SERIAL" >"$RD/wwn/vpd_unit_serial" &&
		mkdir "$CFG/srpt" &&
		echo "$PORT" >"$CFG/srpt/discovery_auth/rdma_cm_port" &&
		mkdir "$CFG/srpt/$TPORT" &&
		mkdir "$TPG" &&
		mkdir "$TPG/lun/lun_0" &&
		ln -s "$RD" "$TPG/lun/lun_0/ramdisk0" || return 1
	# ACLs: for an RDMA/CM login ib_srpt names the initiator after its
	# source IP address; an IPv6 one fully expanded (%pI6, not %pI6c)
	local ip
	for ip in "$RXE_IP4" "$(ip6_gid "$RXE_IP6")"; do
		mkdir "$TPG/acls/$ip" &&
			mkdir "$TPG/acls/$ip/lun_0" &&
			ln -s "$TPG/lun/lun_0" "$TPG/acls/$ip/lun_0/lun_0" || return 1
	done
	echo 1 >"$TPG/enable"
}
check "LIO configfs" lio_setup || fail "LIO configuration"
find "$CFG/srpt" -maxdepth 4 | head -40
if wait_for 10 cm_listening "$PORT"; then
	record "ib_srpt listening" pass "RDMA/CM port $PORT, service GUID $GUID, target port $TPORT"
else
	record "ib_srpt listening" fail "no RDMA/CM listener on port $PORT"
fi

# ------------------------------------------------------------------ ib_srp login over IPv4
step "ib_srp: add_target over RDMA/CM to $RXE_IP4:$PORT"
n0=$(dmesg_mark)
t=$(uptime_s)
srp_login "id_ext=$GUID,ioc_guid=$GUID,dest=$RXE_IP4:$PORT" || fail "add_target"
wait_for 60 srp_disks || fail "no SCSI disk 60 s after add_target"
DISK=$(srp_disks | head -1)
DEV=/dev/$DISK
wait_for 10 test -b "$DEV" || fail "$DEV did not appear"
host=/sys/class/scsi_host/$(disk_host "$DISK")
record "srp login ipv4" pass "$DEV after $(since "$t") s; ch_count $(cat "$host/ch_count"), req_lim $(cat "$host/req_lim"), can_queue $(cat "$host/can_queue")"
dmesg_since "$n0" | grep -v 'speed is unknown'

# ------------------------------------------------------------------ SCSI and data
step "sg3-utils on $DEV"
check_eq "sg_inq vendor/product" "LIO-ORG/RAMDISK-MCP" "$(inq_id "$DEV")"
run sg_vpd -p sn "$DEV" | tee /tmp/vpd.txt
check_eq "sg_vpd unit serial" "$SERIAL" "$(awk -F': *' '/Unit serial number:/ {print $2}' /tmp/vpd.txt)"
run sg_readcap -l "$DEV" | tee /tmp/cap.txt
check_eq "sg_readcap" "$((RD_MIB * 2048)) x 512" \
	"$(awk -F'[=,: ]+' '/Number of logical blocks/ {n = $NF} /Logical block length/ {l = $(NF-1)} END {print n " x " l}' /tmp/cap.txt)"
check_eq "lsblk size" "$((RD_MIB * 1048576))" "$(lsblk -b -d -n -o SIZE "$DEV" | tr -d ' ')"

step "data: 8 MiB of random data written and read back with O_DIRECT"
dd if=/dev/urandom of=/tmp/pattern bs=1M count=8 status=none
want=$(sha256sum </tmp/pattern | cut -d' ' -f1)
if run dd if=/tmp/pattern of="$DEV" bs=1M oflag=direct status=none &&
	run dd if="$DEV" of=/tmp/readback bs=1M count=8 iflag=direct status=none; then
	check_eq "dd write/read sha256" "$want" "$(sha256sum </tmp/readback | cut -d' ' -f1)"
else
	record "dd write/read sha256" fail "dd failed"
fi

step "fio: ${FIO_RUNTIME} s of 4 KiB random writes with crc32c verify"
run fio --name=verify --filename="$DEV" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
	--iodepth=16 --size=64M --time_based --runtime="$FIO_RUNTIME" --verify=crc32c \
	--verify_backlog=256 --verify_fatal=1 --eta=never >/tmp/fio.txt 2>&1
frc=$?
cat /tmp/fio.txt
# A write job's verify reads are not reported as read statistics; they show
# in "issued rwts: total=READS,WRITES,...".
issued=$(sed -n 's/.*issued rwts: total=\([0-9]*\),\([0-9]*\),.*/\1 \2/p' /tmp/fio.txt)
reads=${issued% *} writes=${issued#* }
wr=$(grep -m1 -oE 'write: IOPS=[^,]*' /tmp/fio.txt)
if [ $frc = 0 ] && [ "${reads:-0}" -gt 0 ] && [ "${writes:-0}" -gt 0 ] && ! grep -qiE 'verify.*(bad|fail)' /tmp/fio.txt; then
	record "fio verify" pass "$writes writes of 4 KiB, $reads read back and crc32c-verified, ${wr#write: } in ${FIO_RUNTIME} s"
else
	record "fio verify" fail "exit $frc; writes ${writes:-?}, verify reads ${reads:-?}"
fi

step "ext4 on $DEV"
ext4_check() {
	mkdir -p /mnt/srp &&
		run mkfs.ext4 -q -F "$DEV" &&
		run mount -t ext4 "$DEV" /mnt/srp &&
		cp /tmp/pattern /mnt/srp/pattern &&
		run umount /mnt/srp &&
		echo 3 >/proc/sys/vm/drop_caches &&
		run mount -t ext4 "$DEV" /mnt/srp || return 1
	local got
	got=$(sha256sum </mnt/srp/pattern | cut -d' ' -f1)
	run umount /mnt/srp || return 1
	[ "$got" = "$want" ] || { echo "sha256 after remount: $got, want $want"; return 1; }
	run e2fsck -f -n "$DEV"
}
CHECK_DETAIL="mkfs, 8 MiB file, remount, sha256 equal, e2fsck clean" check "ext4" ext4_check

errs=$(srp_transport_errors "$n0")
if [ -z "$errs" ]; then
	record "srp session ipv4" pass "no transport errors or reconnects"
else
	echo "$errs"
	record "srp session ipv4" fail "$(srp_errors_summary "$errs")"
fi

step "logout"
CHECK_DETAIL="disk removed" check "srp logout ipv4" srp_logout

# ------------------------------------------------------------------ ib_srp login over IPv6
if [ "$IPV6_LOGIN" = 1 ]; then
	step "ib_srp: add_target over RDMA/CM to [$RXE_IP6]:$PORT"
	t=$(uptime_s)
	if srp_login "id_ext=$GUID,ioc_guid=$GUID,dest=[$RXE_IP6]:$PORT" && wait_for 60 srp_disks; then
		DISK=$(srp_disks | head -1)
		wait_for 10 test -b "/dev/$DISK"
		check_eq "srp login ipv6" "LIO-ORG/RAMDISK-MCP" "$(inq_id "/dev/$DISK")"
		# the ext4 file system written over IPv4 is there
		CHECK_DETAIL="ext4 written over IPv4 is clean" check "ipv6 e2fsck" e2fsck -f -n "/dev/$DISK"
		CHECK_DETAIL="disk removed" check "srp logout ipv6" srp_logout
	else
		record "srp login ipv6" fail "no disk 60 s after add_target dest=[$RXE_IP6]:$PORT"
		dmesg | tail -30
	fi
fi

# ------------------------------------------------------------------ kernel log
step "kernel log"
record_kernel_log
finish
