#!/bin/bash
# srptarget-e2e.sh - end-to-end test of the srptarget daemon against the Linux
# SRP initiator (ib_srp) over soft-RoCE, inside the test VM.
#
#   SRPT_VM_FILES="bin/srptarget:/usr/local/bin/srptarget integration/vm/srptarget-e2e.yaml:/etc/srptarget.yaml" \
#     integration/vm/run-vm.sh integration/vm/guest/srptarget-e2e.sh [k=v ...]
#
# The daemon binary (built on the host; the guest has bookworm's glibc 2.36,
# libibverbs.so.1 and librdmacm.so.1) and its configuration come in with
# SRPT_VM_FILES. Without them the test fails at once and says so.
#
# What it does: rxe0 on dummy0 (lib.sh setup_rxe: 169.254.50.1/16,
# fd53:5250::1/64, node GUID 000000fffe000001), `srptarget serve --config`
# in the background, waits until it listens on its RDMA/CM port, logs ib_srp in
# (add_target id_ext=...,ioc_guid=...,dest=IP:PORT), then checks the SCSI disk:
# INQUIRY, READ CAPACITY, data written and read back, fio verify, ext4,
# transport errors, logout, a second login and logout, and a clean daemon
# shutdown on SIGTERM.
#
# Arguments (k=v), all optional:
#   bin=/usr/local/bin/srptarget   config=/etc/srptarget.yaml
#   port=5555             RDMA/CM port the configuration makes srptarget listen on
#                         (5555 is what the configurations in configs/ use)
#   id_ext=, ioc_guid=    SRP target port identifier halves for add_target
#                         (default: the rxe node GUID, 000000fffe000001)
#   srp_opts=             extra add_target options, ':' separated (e.g. ch_count=1)
#   srp_params=           ib_srp module parameters (see lib.sh)
#   luns=1                number of disks the initiator must see
#   vendor=, product=     expected INQUIRY vendor/product (not checked if empty)
#   blocks=, block_size=  expected READ CAPACITY (not checked if empty)
#   data=1                write checks (dd, fio verify, ext4); 0 for read-only LUNs
#   fio_runtime=5         ipv6_login=0 (1: also log in over IPv6)
#   listen_timeout=30     seconds to wait for the daemon's RDMA/CM listener
# Functions below are called through check and wait_for:
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
CONFIG=$(arg config /etc/srptarget.yaml)
PORT=$(arg port 5555)
SRP_OPTS=$(arg srp_opts "")
LUNS=$(arg luns 1)
VENDOR=$(arg vendor "")
PRODUCT=$(arg product "")
BLOCKS=$(arg blocks "")
BLOCK_SIZE=$(arg block_size "")
DATA=$(arg data 1)
FIO_RUNTIME=$(arg fio_runtime 5)
IPV6_LOGIN=$(arg ipv6_login 0)
LISTEN_TIMEOUT=$(arg listen_timeout 30)
DLOG=/tmp/srptarget.log
PID=

# daemon_log: the daemon's output so far, in the console log.
daemon_log() {
	echo "SRPTVM: ---- srptarget output"
	cat "$DLOG" 2>/dev/null
	echo "SRPTVM: ---- end of srptarget output"
}

# daemon_alive: the daemon started by this script is still running.
# (A zombie counts as gone: it has exited, only its status is not collected.)
daemon_alive() {
	[ -n "$PID" ] && [ -r "/proc/$PID/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$PID/stat" 2>/dev/null
}

# ------------------------------------------------------------------ preconditions
step "srptarget binary and configuration"
if [ ! -e "$BIN" ]; then
	fail "$BIN is absent: build srptarget on the host and pass it in, e.g. SRPT_VM_FILES=\"path/to/srptarget:$BIN path/to/config.yaml:$CONFIG\""
fi
[ -x "$BIN" ] || fail "$BIN is not executable"
[ -f "$CONFIG" ] || fail "$CONFIG is absent: pass the daemon configuration with SRPT_VM_FILES=\"...:$CONFIG\""
# a dynamically linked binary must find all its libraries in the image
libs=$(/lib64/ld-linux-x86-64.so.2 --list "$BIN" 2>&1)
if grep -q 'not found' <<<"$libs"; then
	echo "$libs"
	fail "$BIN needs libraries the image does not have: $(grep 'not found' <<<"$libs" | awk '{print $1}' | tr '\n' ' ')"
fi
if ! head -c 4 "$BIN" | grep -q ELF; then
	record "srptarget binary" pass "$(stat -c %s "$BIN") bytes, not ELF (a script?)"
elif grep -q '=>' <<<"$libs"; then
	needs=$(grep '=>' <<<"$libs" | awk '{print $1}' | tr '\n' ' ')
	if grep -q 'librdmacm\.so' <<<"$libs"; then
		record "srptarget binary" pass "$(stat -c %s "$BIN") bytes, needs ${needs% }"
	else
		# a build without the cgo RDMA back end cannot listen on RDMA/CM
		record "srptarget binary" fail "does not link librdmacm (built without the RDMA back end?): needs ${needs% }"
	fi
else
	record "srptarget binary" pass "$(stat -c %s "$BIN") bytes, static"
fi
echo "SRPTVM: ---- $CONFIG"
cat "$CONFIG"

step "soft-RoCE"
setup_rxe || fail "soft-RoCE setup (rdma_rxe on dummy0)"
record rxe pass "rxe0 on $RXE_NETDEV, node GUID $RXE_GUID, $RXE_IP4, $RXE_IP6"
ID_EXT=$(arg id_ext "$RXE_GUID")
IOC_GUID=$(arg ioc_guid "$RXE_GUID")

# ------------------------------------------------------------------ daemon
step "srptarget serve"
t=$(uptime_s)
# not through run(): $! must be the daemon's PID, not a subshell's
echo "SRPTVM\$ $BIN serve --config $CONFIG"
"$BIN" serve --config "$CONFIG" >"$DLOG" 2>&1 &
PID=$!
listening() { daemon_alive && cm_listening "$PORT"; }
if wait_for "$LISTEN_TIMEOUT" listening; then
	record "srptarget listening" pass "RDMA/CM port $PORT after $(since "$t") s (pid $PID)"
else
	rdma resource show cm_id
	daemon_log
	if daemon_alive; then
		fail "srptarget (pid $PID) is not listening on RDMA/CM port $PORT after ${LISTEN_TIMEOUT}s"
	fi
	wait "$PID"
	fail "srptarget exited with status $? before listening on RDMA/CM port $PORT"
fi
rdma resource show cm_id

# ------------------------------------------------------------------ login
enough_disks() { [ "$(srp_disks | wc -l)" -ge "$LUNS" ]; }

# login NAME DEST: add_target to DEST (IP:PORT or [IPv6]:PORT), wait for $LUNS
# disks; sets DISKS and DEV (the first disk).
login() {
	local name=$1 dest=$2 t opts n
	t=$(uptime_s)
	opts="id_ext=$ID_EXT,ioc_guid=$IOC_GUID,dest=$dest"
	[ -n "$SRP_OPTS" ] && opts="$opts,${SRP_OPTS//:/,}"
	if ! srp_login "$opts"; then
		record "$name" fail "add_target $opts failed"
		return 1
	fi
	if ! wait_for 60 srp_disks; then
		record "$name" fail "no disk 60 s after add_target $opts"
		return 1
	fi
	# LUNs beyond the first are scanned a moment later
	wait_for 20 enough_disks
	DISKS=$(srp_disks | tr '\n' ' ')
	DISKS=${DISKS% }
	n=$(srp_disks | wc -l)
	DEV=/dev/$(srp_disks | head -1)
	wait_for 10 test -b "$DEV"
	local host
	host=/sys/class/scsi_host/$(disk_host "${DEV#/dev/}")
	if [ "$n" = "$LUNS" ]; then
		record "$name" pass "$DISKS after $(since "$t") s; ch_count $(cat "$host/ch_count"), req_lim $(cat "$host/req_lim")"
	else
		record "$name" fail "$n disk(s) ($DISKS), want $LUNS"
		return 1
	fi
}

step "ib_srp login to $RXE_IP4:$PORT"
n0=$(dmesg_mark)
if ! login "srp login ipv4" "$RXE_IP4:$PORT"; then
	dmesg_since "$n0" | grep -v 'speed is unknown'
	daemon_log
	fail "login over IPv4 failed"
fi
dmesg_since "$n0" | grep -v 'speed is unknown'

# ------------------------------------------------------------------ SCSI
step "SCSI commands on $DEV"
if run sg_inq "$DEV" >/tmp/inq.txt 2>&1; then
	cat /tmp/inq.txt
	id=$(inq_id "$DEV")
	if [ -n "$VENDOR$PRODUCT" ]; then
		check_eq "INQUIRY" "$VENDOR/$PRODUCT" "$id"
	else
		record "INQUIRY" pass "$id"
	fi
else
	cat /tmp/inq.txt
	record "INQUIRY" fail "sg_inq failed"
fi
CHECK_DETAIL="GOOD" check "TEST UNIT READY" sg_turs "$DEV"
if run sg_readcap -l "$DEV" >/tmp/cap.txt 2>&1; then
	cat /tmp/cap.txt
	cap=$(awk -F'[=,: ]+' '/Number of logical blocks/ {n = $NF} /Logical block length/ {l = $(NF-1)} END {print n " x " l}' /tmp/cap.txt)
	if [ -n "$BLOCKS$BLOCK_SIZE" ]; then
		check_eq "READ CAPACITY(16)" "$BLOCKS x $BLOCK_SIZE" "$cap"
	else
		record "READ CAPACITY(16)" pass "$cap"
	fi
	n=${cap% x *} l=${cap#* x }
	check_eq "lsblk size" "$((n * l))" "$(lsblk -b -d -n -o SIZE "$DEV" | tr -d ' ')"
else
	cat /tmp/cap.txt
	record "READ CAPACITY(16)" fail "sg_readcap failed"
fi
CHECK_DETAIL="VPD pages listed" check "INQUIRY VPD 0x00" sg_vpd -p 0x00 "$DEV"

# ------------------------------------------------------------------ data
if [ "$DATA" = 1 ]; then
	step "data: 8 MiB written and read back with O_DIRECT"
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
	issued=$(sed -n 's/.*issued rwts: total=\([0-9]*\),\([0-9]*\),.*/\1 \2/p' /tmp/fio.txt)
	reads=${issued% *} writes=${issued#* }
	if [ $frc = 0 ] && [ "${reads:-0}" -gt 0 ] && [ "${writes:-0}" -gt 0 ]; then
		record "fio verify" pass "$writes writes of 4 KiB, $reads read back and crc32c-verified"
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
fi

errs=$(srp_transport_errors "$n0")
if [ -z "$errs" ]; then
	record "srp session ipv4" pass "no transport errors or reconnects"
else
	echo "$errs"
	record "srp session ipv4" fail "$(srp_errors_summary "$errs")"
fi

# ------------------------------------------------------------------ logout, login again
step "logout"
CHECK_DETAIL="disks removed" check "srp logout" srp_logout
if daemon_alive; then record "srptarget after logout" pass "still running"; else record "srptarget after logout" fail "exited"; fi

step "second login and logout"
if login "srp login again" "$RXE_IP4:$PORT"; then
	CHECK_DETAIL="GOOD" check "TEST UNIT READY again" sg_turs "$DEV"
	CHECK_DETAIL="disks removed" check "srp logout again" srp_logout
fi

if [ "$IPV6_LOGIN" = 1 ]; then
	step "ib_srp login to [$RXE_IP6]:$PORT"
	if login "srp login ipv6" "[$RXE_IP6]:$PORT"; then
		CHECK_DETAIL="GOOD" check "TEST UNIT READY ipv6" sg_turs "$DEV"
		CHECK_DETAIL="disks removed" check "srp logout ipv6" srp_logout
	fi
fi

# ------------------------------------------------------------------ shutdown
step "srptarget shutdown (SIGTERM)"
if daemon_alive; then
	kill -TERM "$PID"
	if wait_for 15 eval '! daemon_alive'; then
		wait "$PID"
		drc=$?
		if [ $drc = 0 ]; then
			record "srptarget SIGTERM" pass "exited 0"
		else
			record "srptarget SIGTERM" fail "exit status $drc"
		fi
	else
		record "srptarget SIGTERM" fail "still running 15 s after SIGTERM"
		kill -KILL "$PID"
	fi
	if cm_listening "$PORT"; then
		record "RDMA/CM port released" fail "port $PORT still listening"
	else
		record "RDMA/CM port released" pass "port $PORT"
	fi
else
	record "srptarget SIGTERM" fail "not running before SIGTERM"
fi
daemon_log

step "kernel log"
problems=$(kernel_log_problems)
if [ -z "$problems" ]; then
	record "kernel log" pass "no warnings, oopses or hung tasks"
else
	echo "$problems"
	record "kernel log" fail "$(echo "$problems" | head -1)"
fi
finish
