#!/bin/bash
# rbd-e2e.sh - the kernel's ib_srp against srptarget serving a Ceph RBD image, inside the test
# VM, with the cluster in the guest too: one monitor, one OSD on memstore, no manager, no
# cephx, bound to 127.0.0.1. Host side: integration/vm/e2e-rbd.sh (make e2e-rbd), which passes
# srptarget (built with -tags rbd) and rbdctl in.
#
# Checks: the cluster comes up and the image is made; srptarget validate and serve with an rbd
# LUN; ib_srp login; sg_inq, sg_readcap (size, LBPME, LBPRZ); an online resize made with
# rbdctl reaches the initiator as CAPACITY DATA HAS CHANGED and, after a rescan, as the new
# size; ext4 (mkfs discards: UNMAP), files, remount, checksums, e2fsck; fio with crc32c
# verify (4 KiB random at QD 32, 128 KiB sequential); logout; SIGTERM (exit 0).
#
# Arguments (k=v): bin=/usr/local/bin/srptarget port=5555 image_mib=256 small_io=16M
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh
# shellcheck source=ceph-lib.sh
. /lab/ceph-lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
PORT=$(arg port 5555)
IMAGE_MIB=$(arg image_mib 256)
SMALL_IO=$(arg small_io 16M)
CONFIG=/etc/srptarget-rbd.yaml
DLOG=/tmp/srptarget-rbd.log
PID=

# ------------------------------------------------------------------ cluster
cleanup() {
	daemon_alive && kill -TERM "$PID"
	ceph_stop
	finish
}
trap cleanup EXIT

step "ceph cluster in the guest (mon + memstore OSD on 127.0.0.1)"
for b in ceph-mon ceph-osd monmaptool "$RBDCTL" "$BIN"; do
	command -v "$b" >/dev/null || fail "$b is not in the image (build-image.sh with SRPT_VM_CEPH=1, e2e-rbd.sh)"
done
ceph_start lun0 "$IMAGE_MIB"

# ------------------------------------------------------------------ srptarget
step "soft-RoCE"
setup_rxe || fail "soft-RoCE setup"
cat >"$CONFIG" <<EOF
listeners:
  - address: "::"
    port: $PORT
luns:
  - lun: 0
    backstore: rbd
    block_size: 512
    rbd:
      pool: rbd
      image: lun0
      ceph_conf: $C/ceph.conf
      rados_osd_op_timeout: 30s
acls:
  - initiators: ["0x0000000000000000*"]
    luns: [0]
EOF
cat "$CONFIG"
check "srptarget validate" "$BIN" validate --config "$CONFIG"
step "srptarget serve"
"$BIN" serve --config "$CONFIG" >"$DLOG" 2>&1 &
PID=$!
tail -n +1 -f "$DLOG" 2>/dev/null | awk '{ print "srptarget| " $0; fflush() }' &
if wait_for 60 listening; then
	record "srptarget listening" pass "pid $PID, RDMA/CM port $PORT, LUN 0: $(grep -m1 -o '"image": "[^"]*"' "$DLOG")"
else
	fail "srptarget is not listening: $(grep -m1 -E 'ERROR|error' "$DLOG")"
fi

step "ib_srp login"
n0=$(dmesg_mark)
srp_login "id_ext=$RXE_GUID,ioc_guid=$RXE_GUID,dest=$RXE_IP4:$PORT" || fail "add_target failed"
one_disk() { [ -n "$(srp_disks)" ]; }
wait_for 60 one_disk || fail "no SRP disk 60 s after add_target"
DEV=/dev/$(srp_disks | head -1)
record "srp login" pass "$DEV"
check_eq "sg_inq vendor/product" "SRPTGT/srptarget disk" "$(inq_id "$DEV")"
cap=$(sg_readcap -l "$DEV")
echo "$cap"
got=$(awk -F'[=,: ]+' '/Number of logical blocks/ {n = $NF} /Logical block length/ {l = $(NF-1)}
	/lbpme/ { for (i = 1; i <= NF; i++) { if ($i == "lbpme") p = $(i+1); if ($i == "lbprz") z = $(i+1) } }
	END { print n " x " l ", lbpme " p ", lbprz " z }' <<<"$cap")
check_eq "sg_readcap -l" "$((IMAGE_MIB * 2048)) x 512, lbpme 1, lbprz 1" "$got"

step "online resize with rbdctl"
new=$((IMAGE_MIB * 2))
run "$RBDCTL" resize rbd lun0 $((new << 20)) || record "rbd resize" fail "rbdctl resize failed"
ua_seen() { sg_turs "$DEV" 2>&1 | grep -qi 'capacity data has changed\|unit attention'; }
if wait_for 20 ua_seen; then
	record "resize: CAPACITY DATA HAS CHANGED" pass "sg_turs saw the unit attention"
else
	record "resize: CAPACITY DATA HAS CHANGED" fail "no unit attention 20 s after the resize"
fi
echo 1 >"/sys/block/${DEV#/dev/}/device/rescan"
sleep 1
check_eq "resize: new size after rescan" "$((new << 20))" "$(blockdev --getsize64 "$DEV")"

step "ext4"
fs_checks() {
	run mkfs.ext4 -q -F -E discard "$DEV" || return 1
	mkdir -p /mnt/rbd && run mount -t ext4 "$DEV" /mnt/rbd || return 1
	local i
	for i in 1 2 3 4; do dd if=/dev/urandom of=/mnt/rbd/f$i bs=1M count=4 status=none || return 1; done
	(cd /mnt/rbd && sha256sum f*) >/tmp/sums || return 1
	run umount /mnt/rbd && echo 3 >/proc/sys/vm/drop_caches && run mount -t ext4 "$DEV" /mnt/rbd || return 1
	(cd /mnt/rbd && sha256sum -c /tmp/sums) || return 1
	run umount /mnt/rbd && run e2fsck -fn "$DEV"
}
check "ext4: mkfs (discard), files, remount, sha256, e2fsck" fs_checks

step "fio"
fio_verify() {
	local name=$1 out frc
	shift
	out=/tmp/fio-$name.txt
	fio --direct=1 --ioengine=libaio --verify=crc32c --verify_fatal=1 --eta=never --group_reporting \
		--name="$name" --filename="$DEV" "$@" >"$out" 2>&1
	frc=$?
	cat "$out"
	if [ $frc = 0 ] && ! grep -qiE 'verify.*(bad|fail)|bad magic' "$out"; then
		record "fio $name" pass "$(grep -m1 -oE 'write: IOPS=[^,]*, BW=[^ ]*' "$out"); crc32c verified"
	else
		record "fio $name" fail "exit $frc: $(grep -m1 -iE 'verify|error|bad' "$out")"
	fi
}
fio_verify 4k-randwrite-qd32 --rw=randwrite --bs=4k --iodepth=32 --size="$SMALL_IO"
fio_verify 128k-seqwrite --rw=write --bs=128k --iodepth=16 --size=64M
errs=$(srp_transport_errors "$n0")
if [ -z "$errs" ]; then
	record "srp session" pass "no transport errors or reconnects"
else
	echo "$errs"
	record "srp session" fail "$(srp_errors_summary "$errs")"
fi

step "logout, SIGTERM"
check "srp logout" srp_logout
kill -TERM "$PID"
if wait_for 45 eval '! daemon_alive'; then
	wait "$PID"
	check_eq "srptarget exit status" 0 "$?"
else
	record "srptarget exit status" fail "still running 45 s after SIGTERM"
fi
if grep -q 'every backstore flushed and closed' "$DLOG"; then
	record "backstore closed" pass "flushed and closed"
else
	record "backstore closed" fail "no 'every backstore flushed and closed' in the log"
fi
