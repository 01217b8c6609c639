package scsi

import (
	"encoding/binary"

	"github.com/srptarget/srptarget/backstore"
)

// WRITE ATOMIC(16) (SBC-4 5.48) and the atomic write limits of the Block Limits VPD page
// (SBC-4 6.6.4). Linux (6.11 and later) sends it for pwritev2(RWF_ATOMIC) when the page
// advertises a MAXIMUM ATOMIC TRANSFER LENGTH; databases then drop their double writes. It is
// advertised only where the backstore guarantees an untorn write across a crash and to
// concurrent readers (backstore.AtomicWriter): memory, and files and block devices whose
// kernel says it makes RWF_ATOMIC writes.

const opWriteAtomic16 = 0x9C

// usageWriteAtomic16: WRPROTECT (evaluated, refused), DPO, FUA, the LOGICAL BLOCK ADDRESS, the
// ATOMIC BOUNDARY (evaluated, refused: no boundaries), the TRANSFER LENGTH and the GROUP
// NUMBER; byte 1 bits 2:0 are reserved.
var usageWriteAtomic16 = []byte{opWriteAtomic16, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
	0xFF, 0xFF, 0xFF, 0xFF, ^byte(groupReserved), 0x07}

var atomicCommands = []opInfo{
	{name: "WRITE ATOMIC(16)", opcode: opWriteAtomic16, cdbLength: 16, usage: usageWriteAtomic16,
		flags: opWritesMedium, run: writeAtomic16},
}

// atomicLimits are the atomic write limits in logical blocks, as the Block Limits VPD page
// reports them; max 0 when the logical unit makes no atomic writes.
type atomicLimits struct {
	max, alignment, granularity uint32
}

// atomicLimitsOf maps what the backstore can do to the Block Limits fields, within MAXIMUM
// TRANSFER LENGTH:
//   - any length up to a maximum at any block (memory): MAXIMUM ATOMIC TRANSFER LENGTH, with
//     ATOMIC ALIGNMENT and ATOMIC TRANSFER LENGTH GRANULARITY 0 (no requirement);
//   - the power-of-two lengths at offsets that are multiples of the length that RWF_ATOMIC takes:
//     SCSI cannot say "a power of two", so one size S, the largest such length the store and the
//     transfer limit allow, is the maximum, the granularity and the alignment: every write
//     those fields admit is one the kernel makes atomic.
//
// Boundaries (MAXIMUM ATOMIC TRANSFER LENGTH WITH ATOMIC BOUNDARY, MAXIMUM ATOMIC BOUNDARY
// SIZE) stay 0: the ATOMIC BOUNDARY field must be zero.
func atomicLimitsOf(l backstore.AtomicLimits, blockShift uint, maxTransfer uint32) atomicLimits {
	limit := l.MaxBytes
	if maxTransfer != 0 {
		limit = min(limit, int64(maxTransfer))
	}
	blocks := uint32(min(limit>>blockShift, 0xFFFF)) // TRANSFER LENGTH has 16 bits
	if !l.PowerOfTwo {
		return atomicLimits{max: blocks}
	}
	s := uint32(1)
	for s*2 <= blocks {
		s *= 2
	}
	if blocks == 0 || int64(s)<<blockShift < l.MinBytes {
		return atomicLimits{}
	}
	return atomicLimits{max: s, alignment: s, granularity: s}
}

// supportsAtomic reports whether the logical unit runs WRITE ATOMIC(16): without atomic writes
// it is an unsupported operation code, as UNMAP is without thin provisioning.
func (lu *LogicalUnit) supportsAtomic() bool { return lu.atomic.max != 0 }

// writeAtomic16 handles WRITE ATOMIC(16) (SBC-4 5.48). In this order:
//   - WRPROTECT must be zero, and the reserved bits;
//   - an LBA range outside the medium is LOGICAL BLOCK ADDRESS OUT OF RANGE (a TRANSFER LENGTH
//     of zero writes nothing, but its LBA must still be on the medium);
//   - a non-zero ATOMIC BOUNDARY, more blocks than MAXIMUM ATOMIC TRANSFER LENGTH, an LBA that
//     is not a multiple of ATOMIC ALIGNMENT and a length that is not a multiple of ATOMIC
//     TRANSFER LENGTH GRANULARITY are INVALID FIELD IN CDB on the field;
//   - the data-out buffer must hold the transfer (checkDataOut).
//
// The write holds its LBA range exclusive (rangelock.go): no overlapping write runs meanwhile,
// so that no other command leaves part of its data over part of this one's. FUA, and a write
// cache that is off, make it durable before it completes, as WRITE.
func writeAtomic16(lu *LogicalUnit, c *Command) {
	if !lu.supportsAtomic() {
		c.invalidOpcode()
		return
	}
	cdb := c.CDB
	if c.failOn(checkCDBUsage(cdb, usageWriteAtomic16)) {
		return
	}
	if c.failOn(cdbField{1, cdbProtectMask}.checkZero(cdb)) {
		return
	}
	lba := binary.BigEndian.Uint64(cdb[2:])
	boundary := binary.BigEndian.Uint16(cdb[10:])
	n := uint64(binary.BigEndian.Uint16(cdb[12:]))
	bytes := lu.blockBytes(n)
	c.TransferLength = clampInt(bytes)
	a := lu.atomic
	switch {
	case !lu.lbaInRange(lba, n):
		c.fail(ReasonLBAOutOfRange)
		return
	case boundary != 0:
		c.invalidCDBField(10, -1)
		return
	case n > uint64(a.max) || a.granularity > 1 && n%uint64(a.granularity) != 0:
		c.invalidCDBField(12, -1)
		return
	case a.alignment > 1 && lba%uint64(a.alignment) != 0:
		c.invalidCDBField(2, -1)
		return
	}
	if c.failOn(checkDataOut(c.DataOut, bytes)) || n == 0 {
		return
	}
	slot := lu.ranges.lock(lba, n, true)
	err := lu.atomicWriter.WriteAtomicAt(c.DataOut, lu.byteOffset(lba), lu.writeFUA(cdb[1]&cdbFUA != 0))
	lu.ranges.unlock(slot)
	if err != nil {
		c.ioError(err, false, lba)
	}
}
