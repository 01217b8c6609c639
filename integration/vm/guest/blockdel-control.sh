#!/bin/bash
# blockdel-control.sh - a control for stress.sh's devdel scenario, without SRP or
# RDMA: fio with verify_backlog on a scsi_debug disk that is deleted under I/O,
# once through the block device (libaio, O_DIRECT) and once through its SCSI
# generic device (the sg engine).
#
#   integration/vm/run-vm.sh integration/vm/guest/blockdel-control.sh
#
# Through the block device fio reports "bad header offset X, wanted Y" although
# the disk never returned wrong data: del_gendisk sets the capacity to 0, direct
# reads past it return 0 bytes and fio verifies the stale contents of its buffer
# (writes fail with ENOSPC). Through /dev/sgN the same commands fail with an
# error. Both checks record what they saw; the first is expected to count verify
# errors (timing decides how many: 12 in one run, 0 in another) and the second none.
# shellcheck source=lib.sh
. /lab/lib.sh

modprobe sd_mod && modprobe sg || fail "modprobe sd_mod sg"
for engine in libaio sg; do
	step "scsi_debug disk deleted under fio ($engine)"
	modprobe scsi_debug dev_size_mb=64 delay=1 || fail "modprobe scsi_debug"
	wait_for 20 eval 'ls -d /sys/bus/pseudo/drivers/scsi_debug/adapter*/host*/target*/*/block/* >/dev/null 2>&1'
	sd=$(basename "$(ls -d /sys/bus/pseudo/drivers/scsi_debug/adapter*/host*/target*/*/block/* | head -1)")
	sgd=$(basename "$(ls -d "/sys/block/$sd/device/scsi_generic/"* | head -1)")
	if [ "$engine" = sg ]; then f=/dev/$sgd opts=(); else f=/dev/$sd opts=(--direct=1); fi
	fio --name=inflight --filename="$f" --ioengine="$engine" "${opts[@]}" --rw=randwrite --bs=16k \
		--iodepth=16 --size=16M --offset=32M --verify=crc32c --verify_fatal=1 --verify_backlog=64 \
		--time_based --runtime=30 --eta=never >"/tmp/fio-$engine.txt" 2>&1 &
	p=$!
	sleep 4
	run sh -c "echo 1 > /sys/block/$sd/device/delete"
	wait $p
	rc=$?
	sed 's/^/fio| /' "/tmp/fio-$engine.txt" | grep -iE 'verify|bad|error|issued' | head -8
	verr=$(grep -ciE 'bad header|bad magic|verify failed' "/tmp/fio-$engine.txt")
	ioerr=$(grep -ciE 'io_u error' "/tmp/fio-$engine.txt")
	nospc=$(grep -ci 'No space left' "/tmp/fio-$engine.txt")
	record "fio through $f ($engine), disk deleted" pass "$verr verify errors, $ioerr I/O errors ($nospc ENOSPC), fio exit $rc"
	rmmod scsi_debug
done
finish
