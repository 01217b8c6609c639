#!/bin/bash
# sbc.sh - the SBC-4 and SPC-4 commands of issue 35 seen from the Linux initiator through
# ib_srp and sg3_utils (integration/vm/sbc.sh runs it):
#   - an unsupported service action is INVALID FIELD IN CDB on the SERVICE ACTION field
#     (sg_raw PERSISTENT RESERVE IN with service action 4), an unsupported operation code
#     INVALID COMMAND OPERATION CODE;
#   - WRITE SAME with NUMBER OF LOGICAL BLOCKS 0 (sg_write_same --num=0) writes to the end
#     of the medium; Block Limits says WSNZ 0;
#   - physical_block_size 4096 on 512-byte blocks: sg_readcap --long shows the exponent, the
#     kernel's queue limits follow, UNMAP of an unaligned range deallocates the whole physical
#     blocks only, WRITE SAME with UNMAP zeroes the rest;
#   - EXTENDED COPY: INQUIRY 3PC, sg_vpd -p tpc, sg_copy_results, sg_xcopy from LUN 0 to LUN 1
#     compared, COPY STATUS;
#   - WRITE ATOMIC(16): the Block Limits fields of a memory LUN, the guest kernel's queue limit
#     (absent before Linux 6.11), sg_raw writes and reads back;
#   - SANITIZE: sg_sanitize --overwrite (31 passes, IMMED) watched with TEST UNIT READY and
#     sg_requests --progress, the pattern read back; sg_sanitize --block, zeroes and
#     GET LBA STATUS;
#   - sg_opcodes lists the new commands with their usage data.
#
# Arguments (k=v): bin=/usr/local/bin/srptarget port=5555

# Functions below are called through check and wait_for:
# shellcheck disable=SC2317
# shellcheck source=lib.sh
. /lab/lib.sh

BIN=$(arg bin /usr/local/bin/srptarget)
PORT=$(arg port 5555)
CONFIG=/etc/srptarget-sbc.yaml
ID_EXT=0002c90300a0b0c1
DLOG=/tmp/srptarget-sbc.log
PID=
MIB=64
BLOCKS=$((MIB * 2048)) # 512-byte blocks

disks_up() { [ "$(srp_disks | wc -l)" -ge "$1" ]; }

# raw DEV ARGS...: sg_raw with its status and sense lines on one line, "exit N" first.
raw() {
	local rc
	sg_raw -v "$@" >/tmp/raw.txt 2>&1
	rc=$?
	echo "exit $rc: $(grep -iE 'status|sense|field|byte|info' /tmp/raw.txt | tr '\n' ' ' | sed 's/  */ /g')"
}

# blocks DEV LBA N OUT: N 512-byte blocks from LBA into OUT, bypassing the page cache (in
# requests of up to 1 MiB: one command per block takes minutes under TCG).
blocks() { dd if="$1" of="$4" bs=1M skip=$(($2 * 512)) count=$(($3 * 512)) iflag=direct,skip_bytes,count_bytes status=none; }

# sg_of sdX: the SCSI generic node (/dev/sgN) of a disk; sg_xcopy issues its commands there.
sg_of() { echo "/dev/$(ls "/sys/block/$1/device/scsi_generic")"; }

# same_as_file NAME A B: record whether files A and B are equal.
same_as_file() {
	if cmp -s "$2" "$3"; then record "$1" pass "$(stat -c %s "$2") bytes equal"; else record "$1" fail "$(cmp "$2" "$3" 2>&1 | head -1)"; fi
}

step "soft-RoCE"
setup_rxe || fail "soft-RoCE setup failed"

cat >"$CONFIG" <<EOF
target:
  id_ext: "$ID_EXT"
listeners:
  - address: $RXE_IP4
    port: $PORT
luns:
  - lun: 0
    backstore: memory
    size: ${MIB}MiB
  - lun: 1
    backstore: memory
    size: ${MIB}MiB
    physical_block_size: 4096
  - lun: 2
    backstore: memory
    size: 32MiB
acls:
  - initiators: ["*"]
    luns: [0, 1, 2]
EOF
cat "$CONFIG"

step "srptarget serve"
echo "SRPTVM\$ $BIN serve --config $CONFIG"
"$BIN" serve --config "$CONFIG" >>"$DLOG" 2>&1 &
PID=$!
wait_for 30 listening || fail "srptarget is not listening: $(tail -5 "$DLOG")"
record "daemon listening" pass "pid $PID"

step "login"
# cmd_sg_entries=255 and max_sect=4096: SG_IO through /dev/sg maps its buffer into as many
# segments as the host takes (ib_srp's default of 12 holds less than libiscsi's 1 MiB READ16),
# and up to 2 MiB per command (the default is 512 KiB).
modprobe sd_mod && modprobe sg && run modprobe ib_srp cmd_sg_entries=255 || fail "modprobe ib_srp"
srp_login "id_ext=$ID_EXT,ioc_guid=$ID_EXT,dest=$RXE_IP4:$PORT,max_sect=4096" || fail "add_target failed"
wait_for 60 disks_up 3 || fail "the three disks did not appear: $(srp_disks)"
sleep 1
D0=/dev/$(srp_disk_for_lun 0) || fail "no disk for LUN 0"
D1=/dev/$(srp_disk_for_lun 1) || fail "no disk for LUN 1"
D2=/dev/$(srp_disk_for_lun 2) || fail "no disk for LUN 2"
S1=${D1#/dev/}
record "three LUNs" pass "LUN 0 $D0, LUN 1 $D1, LUN 2 $D2"
sg_turs "$D0" >/dev/null 2>&1
sg_turs "$D1" >/dev/null 2>&1
sg_turs "$D2" >/dev/null 2>&1

step "unsupported service action and operation code"
# PERSISTENT RESERVE IN, service action 04h (reserved), allocation length 16.
out=$(raw -r 16 "$D0" 5e 04 00 00 00 00 00 00 10 00)
echo "$out"
if grep -qi 'invalid field in cdb' <<<"$out" && grep -qiE 'byte 1 bit 4|field pointer.*1' /tmp/raw.txt; then
	record "PR IN service action 4: INVALID FIELD IN CDB at byte 1 bit 4" pass "$out"
else
	record "PR IN service action 4: INVALID FIELD IN CDB at byte 1 bit 4" fail "$out | $(tr '\n' ' ' </tmp/raw.txt | cut -c1-300)"
fi
# SERVICE ACTION IN(16) with service action 1Fh.
out=$(raw -r 32 "$D0" 9e 1f 00 00 00 00 00 00 00 00 00 00 00 20 00 00)
if grep -qi 'invalid field in cdb' <<<"$out"; then
	record "SERVICE ACTION IN(16) SA 1Fh: INVALID FIELD IN CDB" pass "$out"
else
	record "SERVICE ACTION IN(16) SA 1Fh: INVALID FIELD IN CDB" fail "$out"
fi
# LOG SENSE is not implemented at all.
out=$(raw -r 16 "$D0" 4d 00 00 00 00 00 00 00 10 00)
if grep -qi 'invalid command operation code' <<<"$out"; then
	record "LOG SENSE: INVALID COMMAND OPERATION CODE" pass "$out"
else
	record "LOG SENSE: INVALID COMMAND OPERATION CODE" fail "$out"
fi
# sg_persist reads the capabilities and keys as before.
check "sg_persist --report-capabilities" sg_persist -n -i -c "$D0"

step "WRITE SAME to the end of the medium"
run sg_vpd -p bl "$D0" | tee /tmp/bl.txt
wsnz=$(sed -n 's/.*(WSNZ): *//p' /tmp/bl.txt | head -1)
check_eq "Block Limits WSNZ" 0 "$wsnz"
mws=$(sed -n 's/.*Maximum write same length: *\([0-9x]*\).*/\1/p' /tmp/bl.txt | head -1)
echo "maximum write same length: $mws blocks"
head -c 512 /dev/urandom >/tmp/ws-block
dd if=/dev/urandom of=/tmp/ws-before bs=512 count=256 status=none
dd if=/tmp/ws-before of="$D0" bs=128K seek=$(((BLOCKS - 256) * 512)) oflag=direct,seek_bytes status=none
LBA=$((BLOCKS - 200))
check "sg_write_same --num=0 --lba=$LBA" sg_write_same --16 --lba=$LBA --num=0 --in=/tmp/ws-block "$D0"
blocks "$D0" $((BLOCKS - 256)) 256 /tmp/ws-after
for _ in $(seq 200); do cat /tmp/ws-block; done >/tmp/ws-tail
head -c $((56 * 512)) /tmp/ws-before >/tmp/ws-want
cat /tmp/ws-tail >>/tmp/ws-want
same_as_file "WRITE SAME --num=0: LBA $LBA to the last block written, the 56 before kept" /tmp/ws-want /tmp/ws-after
# From LBA 0 the rest of the medium is more than MAXIMUM WRITE SAME LENGTH.
out=$(sg_write_same --16 --lba=0 --num=0 --in=/tmp/ws-block "$D0" 2>&1)
rc=$?
if [ $rc != 0 ] && grep -qi 'invalid field in cdb\|illegal request' <<<"$out"; then
	record "WRITE SAME --num=0 from LBA 0 over MAXIMUM WRITE SAME LENGTH refused" pass "exit $rc: $(tr '\n' ' ' <<<"$out" | cut -c1-200)"
else
	record "WRITE SAME --num=0 from LBA 0 over MAXIMUM WRITE SAME LENGTH refused" fail "exit $rc: $out"
fi

step "4 KiB physical blocks on 512-byte blocks"
run sg_readcap --long "$D1" | tee /tmp/rc.txt
if grep -q 'Logical blocks per physical block exponent=3 \[so physical block length=4096 bytes\]' /tmp/rc.txt; then
	record "sg_readcap --long: exponent 3" pass "$(grep -m1 'physical block exponent' /tmp/rc.txt | sed 's/^ *//')"
else
	record "sg_readcap --long: exponent 3" fail "$(tr '\n' ' ' </tmp/rc.txt | cut -c1-300)"
fi
check_eq "LUN 1 queue/logical_block_size" 512 "$(cat /sys/block/"$S1"/queue/logical_block_size)"
check_eq "LUN 1 queue/physical_block_size" 4096 "$(cat /sys/block/"$S1"/queue/physical_block_size)"
check_eq "LUN 1 queue/minimum_io_size" 4096 "$(cat /sys/block/"$S1"/queue/minimum_io_size)"
check_eq "LUN 1 queue/discard_granularity" 4096 "$(cat /sys/block/"$S1"/queue/discard_granularity)"
check_eq "LUN 0 queue/physical_block_size" 512 "$(cat /sys/block/"${D0#/dev/}"/queue/physical_block_size)"
run sg_vpd -p bl "$D1" | grep -iE 'granularity|alignment'
# UNMAP of LBA 3, 20 blocks: only the physical block of LBAs 8-15 is deallocated.
dd if=/dev/urandom of=/tmp/pb-before bs=512 count=32 status=none
dd if=/tmp/pb-before of="$D1" bs=16K oflag=direct status=none
check "sg_unmap --lba=3 --num=20" sg_unmap --force --lba=3 --num=20 "$D1"
blocks "$D1" 0 32 /tmp/pb-after
{ head -c $((8 * 512)) /tmp/pb-before; head -c $((8 * 512)) /dev/zero; tail -c $((16 * 512)) /tmp/pb-before; } >/tmp/pb-want
same_as_file "UNMAP 3+20: LBAs 8-15 deallocated, 3-7 and 16-22 kept" /tmp/pb-want /tmp/pb-after
run sg_get_lba_status --lba=0 --maxlen=4 "$D1"
# WRITE SAME with UNMAP and a block of zeroes over the same range: all 20 read as zeroes.
dd if=/tmp/pb-before of="$D1" bs=16K oflag=direct status=none
check "sg_write_same --unmap --lba=3 --num=20" sg_write_same --16 --unmap --lba=3 --num=20 --in=/dev/zero "$D1"
blocks "$D1" 0 32 /tmp/pb-after
{ head -c $((3 * 512)) /tmp/pb-before; head -c $((20 * 512)) /dev/zero; tail -c $((9 * 512)) /tmp/pb-before; } >/tmp/pb-want
same_as_file "WRITE SAME UNMAP 3+20: all 20 zero, 0-2 and 23-31 kept" /tmp/pb-want /tmp/pb-after

step "EXTENDED COPY between LUN 0 and LUN 1"
sg_inq "$D0" | tee /tmp/inq.txt | grep -i '3PC'
if grep -qE '3PC=1' /tmp/inq.txt; then record "INQUIRY 3PC" pass "$(grep -o '3PC=1' /tmp/inq.txt)"; else record "INQUIRY 3PC" fail "$(grep -i 3pc /tmp/inq.txt)"; fi
run sg_vpd -p tpc "$D0" | tee /tmp/tpc.txt
if grep -q 'block -> block' /tmp/tpc.txt && grep -q 'Identification Descriptor' /tmp/tpc.txt && grep -qi 'Extended copy(LID1)' /tmp/tpc.txt; then
	record "sg_vpd -p tpc" pass "$(grep -iE 'maximum (cscd|segment)' /tmp/tpc.txt | tr '\n' ' ' | sed 's/  */ /g')"
else
	record "sg_vpd -p tpc" fail "$(tr '\n' ' ' </tmp/tpc.txt | cut -c1-300)"
fi
run sg_copy_results --params "$D0" | tee /tmp/cr.txt
check_eq "sg_copy_results --params: maximum target descriptor count" 8 "$(sed -n 's/.*Maximum target descriptor count: *//p' /tmp/cr.txt)"
check_eq "sg_copy_results --params: maximum segment length" "16777216 bytes" "$(sed -n 's/.*Maximum segment length: *//p' /tmp/cr.txt)"
# 8 MiB of random data at LBA 0 of LUN 0, copied to LBA 4096 of LUN 1 in 4 MiB EXTENDED COPYs.
dd if=/dev/urandom of=/tmp/xc-src bs=1M count=8 status=none
dd if=/tmp/xc-src of="$D0" bs=1M oflag=direct status=none
before_ios=$(disk_ios "${D0#/dev/}")
G0=$(sg_of "${D0#/dev/}")
G1=$(sg_of "${D1#/dev/}")
run sg_xcopy if="$G0" of="$G1" bs=512 count=16384 seek=4096 bpt=8192 >/tmp/xc.txt 2>&1
rc=$?
cat /tmp/xc.txt
if [ $rc = 0 ]; then
	record "sg_xcopy LUN 0 -> LUN 1" pass "$G0 -> $G1: $(tail -1 /tmp/xc.txt)"
else
	record "sg_xcopy LUN 0 -> LUN 1" fail "$(tr '\n' ' ' </tmp/xc.txt | cut -c1-300)"
fi
blocks "$D1" 4096 16384 /tmp/xc-dst
same_as_file "EXTENDED COPY: LUN 1 blocks 4096.. equal LUN 0's 8 MiB" /tmp/xc-src /tmp/xc-dst
# No data crossed the fabric for the copy: the initiator's disk counted no 8 MiB of reads.
echo "reads and writes on ${D0#/dev/} during the copy: $(($(disk_ios "${D0#/dev/}") - before_ios))"
# COPY STATUS of the last copy (sg_xcopy's LIST IDENTIFIER 1, LIST ID USAGE 10b), from the LUN
# sg_xcopy sent it to (the destination, without --on_src).
run sg_copy_results --status --list_id=1 "$G1" | tee /tmp/cs.txt
if grep -q 'Operation completed without errors' /tmp/cs.txt && grep -q 'Transfer count: 4194304' /tmp/cs.txt; then
	record "sg_copy_results --status" pass "$(tr '\n' ' ' </tmp/cs.txt | sed 's/  */ /g' | cut -c1-200)"
else
	record "sg_copy_results --status" fail "$(tr '\n' ' ' </tmp/cs.txt | cut -c1-300)"
fi
# RECEIVE COPY RESULTS with RECEIVE DATA (01h), which this copy manager does not have.
out=$(raw -r 16 "$D0" 84 01 00 00 00 00 00 00 00 00 00 00 00 10 00 00)
if grep -qi 'invalid field in cdb' <<<"$out" && grep -q 'byte 1 bit 4' /tmp/raw.txt; then
	record "RECEIVE COPY RESULTS service action 01h: INVALID FIELD IN CDB" pass "$out"
else
	record "RECEIVE COPY RESULTS service action 01h: INVALID FIELD IN CDB" fail "$out"
fi

step "WRITE ATOMIC(16)"
run sg_vpd -p bl "$D0" | grep -iE 'atomic' | tee /tmp/atomic-bl.txt
mat=$(sed -n 's/.*Maximum atomic transfer length: *\([0-9]*\).*/\1/p' /tmp/atomic-bl.txt | head -1)
# RAM's atomic writes reach as far as MAXIMUM TRANSFER LENGTH (limits.max_transfer_size, 8 MiB).
check_eq "Block Limits MAXIMUM ATOMIC TRANSFER LENGTH (memory LUN)" 16384 "$mat"
# The guest kernel: Linux 6.11 and later turn the Block Limits fields into queue limits and send
# WRITE ATOMIC(16) for pwritev2(RWF_ATOMIC); Debian 12's 6.1 has neither.
q=/sys/block/${D0#/dev/}/queue/atomic_write_max_bytes
if [ -e "$q" ]; then
	check_eq "queue/atomic_write_max_bytes" $((16384 * 512)) "$(cat "$q")"
else
	record "queue/atomic_write_max_bytes" pass "absent: guest kernel $(uname -r) predates atomic writes (Linux 6.11); WRITE ATOMIC(16) checked with sg_raw"
fi
# 32 KiB: SG_IO maps the buffer's pages as they are, and ib_srp takes 12 of them per command by
# default (cmd_sg_entries); a larger buffer fails with EINVAL before reaching the target.
head -c 32768 /dev/urandom >/tmp/atomic-data
out=$(raw -s 32768 -i /tmp/atomic-data "$D0" 9c 00 00 00 00 00 00 00 10 00 00 00 00 40 00 00)
if grep -q '^exit 0:' <<<"$out"; then record "sg_raw WRITE ATOMIC(16) of 64 blocks at LBA 4096" pass "$out"; else record "sg_raw WRITE ATOMIC(16) of 64 blocks at LBA 4096" fail "$out $(tr '\n' ' ' </tmp/raw.txt | cut -c1-200)"; fi
blocks "$D0" 4096 64 /tmp/atomic-back
same_as_file "WRITE ATOMIC(16): the blocks read back" /tmp/atomic-data /tmp/atomic-back
out=$(raw -s 512 -i /tmp/atomic-data "$D0" 9c 00 00 00 00 00 00 00 10 00 00 01 00 01 00 00)
if grep -qi 'invalid field in cdb' <<<"$out"; then record "WRITE ATOMIC(16) with an ATOMIC BOUNDARY refused" pass "$out"; else record "WRITE ATOMIC(16) with an ATOMIC BOUNDARY refused" fail "$out"; fi

step "sg_opcodes lists the new commands"
run sg_opcodes "$D0" | tee /tmp/opc.txt
for op in 'Orwrite\(16\)' 'Sanitize.*overwrite' 'Sanitize.*block erase' 'Write atomic\(16\)' 'Extended copy\(LID1\)' 'Receive copy status\(LID1\)' 'Receive copy operating parameters'; do
	if grep -qiE "$op" /tmp/opc.txt; then record "sg_opcodes: $op" pass "$(grep -iE -m1 "$op" /tmp/opc.txt | sed 's/^ *//')"; else record "sg_opcodes: $op" fail "not listed"; fi
done
run sg_opcodes --opcode=0x83,0 "$D0" | tee /tmp/opc1.txt
if grep -qi 'usage data' /tmp/opc1.txt || grep -q '83 1f 00' /tmp/opc1.txt; then
	record "sg_opcodes --opcode=0x83,0: usage data" pass "$(grep -iA1 'usage data' /tmp/opc1.txt | tr '\n' ' ' | sed 's/  */ /g')"
else
	record "sg_opcodes --opcode=0x83,0: usage data" fail "$(tr '\n' ' ' </tmp/opc1.txt | cut -c1-300)"
fi

step "SANITIZE"
# OVERWRITE with 31 passes over LUN 1 (64 MiB each) takes seconds under TCG: time to watch it.
head -c 512 /dev/urandom >/tmp/san-pattern
run sg_sanitize --overwrite --pattern=/tmp/san-pattern --count=31 --early --quick "$D1"
rc=$?
if [ $rc = 0 ]; then record "sg_sanitize --overwrite --count=31 --early" pass "GOOD at once (IMMED)"; else record "sg_sanitize --overwrite --count=31 --early" fail "exit $rc"; fi
out=$(raw "$D1" 00 00 00 00 00 00)
echo "$out"
if grep -qi 'sanitize in progress' <<<"$out"; then
	record "TEST UNIT READY while sanitizing: NOT READY, SANITIZE IN PROGRESS" pass "$out"
else
	record "TEST UNIT READY while sanitizing: NOT READY, SANITIZE IN PROGRESS" fail "$out"
fi
run sg_requests --progress "$D1" | tee /tmp/prog1.txt
run sg_requests --progress "$D1" | tee /tmp/prog2.txt
p1=$(sed -n 's/.*Progress indication: *\([0-9.]*\)%.*/\1/p' /tmp/prog1.txt | head -1)
p2=$(sed -n 's/.*Progress indication: *\([0-9.]*\)%.*/\1/p' /tmp/prog2.txt | head -1)
# The second may come after the end (the 31 passes take seconds under a busy TCG host, less
# under an idle one): then REQUEST SENSE has no progress and the unit is ready.
if [ -n "$p1" ] && [ -n "$p2" ] && awk -v a="$p1" -v b="$p2" 'BEGIN { exit !(b >= a) }'; then
	record "sg_requests --progress while sanitizing" pass "$p1% then $p2%"
elif [ -n "$p1" ] && [ -z "$p2" ] && sg_turs "$D1" >/dev/null 2>&1; then
	record "sg_requests --progress while sanitizing" pass "$p1%, then done"
else
	record "sg_requests --progress while sanitizing" fail "'$p1' then '$p2': $(tr '\n' ' ' </tmp/prog1.txt /tmp/prog2.txt | cut -c1-200)"
fi
inq_ok=$(sg_inq "$D1" >/dev/null 2>&1 && echo yes || echo no)
check_eq "INQUIRY while sanitizing" yes "$inq_ok"
wait_for 600 sg_turs "$D1" || fail "the sanitize did not end"
for _ in $(seq 128); do cat /tmp/san-pattern; done >/tmp/san-want
blocks "$D1" 100000 128 /tmp/san-got
same_as_file "SANITIZE OVERWRITE: blocks hold the pattern" /tmp/san-want /tmp/san-got
# BLOCK ERASE: every block deallocated, reading zeroes.
run sg_sanitize --block --quick --early "$D1"
check_eq "sg_sanitize --block --early" 0 $?
wait_for 120 sg_turs "$D1" || fail "the block erase did not end"
head -c $((128 * 512)) /dev/zero >/tmp/san-zero
blocks "$D1" 100000 128 /tmp/san-got
same_as_file "SANITIZE BLOCK ERASE: blocks read zeroes" /tmp/san-zero /tmp/san-got
run sg_get_lba_status --lba=0 "$D1" | tee /tmp/lbas.txt
if grep -qiE 'deallocated|unmapped' /tmp/lbas.txt; then record "GET LBA STATUS after BLOCK ERASE" pass "$(tr '\n' ' ' </tmp/lbas.txt | sed 's/  */ /g' | cut -c1-200)"; else record "GET LBA STATUS after BLOCK ERASE" fail "$(tr '\n' ' ' </tmp/lbas.txt | cut -c1-200)"; fi

step "libiscsi's conformance tests (iscsi-test-cu over SG_IO) on LUN 2"
# The suites of what issue 35 added, and those around them, as a storage qualification runs
# them: destructive tests allowed (LUN 2 holds nothing else). Tests that need an iSCSI session
# (a second initiator, iSCSI resets) skip themselves over SG_IO. Left out, with the reason:
#   - SCSI.Sanitize.*Reserved: iscsi-test-cu 1.19 dereferences its iSCSI context there and
#     crashes over SG_IO (segfault in the guest's kernel log);
#   - SCSI.WriteSame10.UnmapUntilEnd: it sends a block of 0xFF with UNMAP and wants zeroes back;
#     its WRITE SAME(16) twin zeroes the block first, and SBC-4 5.49 lets the device server write
#     the block instead of unmapping, which srptarget does for a block that is not zeroes.
# RECEIVE COPY RESULTS runs before EXTENDED COPY: its first check wants no copy status for LIST
# IDENTIFIER 1, which the EXTENDED COPY suite's copies from this same I_T nexus would have left
# (each iscsi-test-cu run over iSCSI has a nexus of its own; over SG_IO they share one).
G2=$(sg_of "${D2#/dev/}")
for t in SCSI.ReceiveCopyResults SCSI.ExtendedCopy SCSI.WriteAtomic16 \
	SCSI.Sanitize.Overwrite SCSI.Sanitize.BlockErase SCSI.Sanitize.ExitFailureMode \
	SCSI.Sanitize.InvalidServiceAction SCSI.Sanitize.CryptoErase \
	'SCSI.WriteSame10.[!U]*' SCSI.WriteSame10.Unmap SCSI.WriteSame10.UnmapUnaligned SCSI.WriteSame10.UnmapVPD \
	SCSI.WriteSame16 SCSI.OrWrite SCSI.Unmap SCSI.ReadCapacity16 SCSI.ReportSupportedOpcodes SCSI.GetLBAStatus SCSI.Inquiry; do
	echo "SRPTVM\$ iscsi-test-cu --dataloss --allow-sanitize --test=$t $G2"
	out=/tmp/cu-$(tr -c 'A-Za-z0-9.' _ <<<"$t").txt
	iscsi-test-cu --dataloss --allow-sanitize --test="$t" "$G2" >"$out" 2>&1
	rc=$?
	grep -E 'FAILED|Test: |tests ' "$out" | tail -40
	tests=$(awk '$1 == "tests" { print "ran " $3 ", passed " $4 ", failed " $5; exit }' "$out")
	failed=$(awk '$1 == "tests" { print $5; exit }' "$out")
	ran=$(awk '$1 == "tests" { print $3; exit }' "$out")
	if [ "$failed" = 0 ] && [ "${ran:-0}" -gt 0 ] && [ $rc = 0 ]; then
		record "iscsi-test-cu $t" pass "$tests$(grep -c SKIPPED "$out" | sed 's/^0$//; s/^./, & skipped inside/')"
	else
		record "iscsi-test-cu $t" fail "exit $rc, ${tests:-no summary}: $(grep -m3 -E '\[FAILED\]|FAIL' "$out" | tr '\n' ' ' | cut -c1-240)"
	fi
done

step "logout"
check "logout" srp_logout
kill -TERM "$PID"
wait_for 45 eval '! daemon_alive'
if grep -qE 'ERROR|FATAL|panic' "$DLOG"; then
	record "daemon log" fail "$(grep -m1 -E 'ERROR|FATAL|panic' "$DLOG" | cut -c1-200)"
else
	record "daemon log" pass "no error lines"
fi
record_kernel_log
finish
