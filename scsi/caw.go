package scsi

import (
	"encoding/binary"
	"errors"

	"github.com/srptarget/srptarget/backstore"
)

// COMPARE AND WRITE (SBC-3).

// maxCompareAndWriteLength is the largest NUMBER OF LOGICAL BLOCKS this device server takes; the
// field and MAXIMUM COMPARE AND WRITE LENGTH in VPD page 0xB0 are one byte. The comparison runs
// through scratch buffers, so a long one costs no more memory than a short one. (VMware's atomic
// test and set, the main user, sends one block.)
const maxCompareAndWriteLength = 255

// maxCompareAndWriteBlocks is MAXIMUM COMPARE AND WRITE LENGTH (VPD page 0xB0 byte 5). The
// data-out of n blocks is 2n blocks, which must fit the maximum transfer; when not even one block
// fits the command is not usable and the limit is 0.
func (lu *LogicalUnit) maxCompareAndWriteBlocks() uint8 {
	n := uint64(maxCompareAndWriteLength)
	if cw := lu.storeCompareAndWrite(); cw != nil {
		n = min(n, uint64(cw.CompareAndWriteMax())/uint64(lu.blockSize))
	}
	if m := lu.cfg.MaxTransferBytes; m != 0 {
		n = min(n, uint64(m)/(2*uint64(lu.blockSize)))
	}
	return uint8(n)
}

// storeCompareAndWrite returns the store's own compare-and-write, or nil when it has none: the
// logical unit then compares under its range lock.
func (lu *LogicalUnit) storeCompareAndWrite() backstore.CompareAndWriter {
	if cw, ok := lu.bs.(backstore.CompareAndWriter); ok && cw.CompareAndWriteMax() > 0 {
		return cw
	}
	return nil
}

// compareAndWriteZero are the fields of COMPARE AND WRITE that must be zero, in the order they
// are checked: WRPROTECT, the reserved bits 2 and 0 of byte 1, the reserved bytes 10-12 and the
// reserved bits of the GROUP NUMBER byte.
var compareAndWriteZero = []cdbField{{1, cdbProtectMask}, {1, 0x04}, {1, 0x01},
	{10, 0xFF}, {11, 0xFF}, {12, 0xFF}, {cdb16GroupOff, groupReserved}}

// compareAndWrite is COMPARE AND WRITE. The data-out buffer holds 2n blocks: the first n are
// compared with the medium, and when they are equal the second n are written in their place.
// The LBA range is locked exclusively for the whole operation, so that no write of another
// command lands between the compare and the write; a miscompare reports the offset of the first
// differing byte in INFORMATION and writes nothing.
//
// Byte 1: WRPROTECT must be zero, DPO accepted, FUA forces the write, bit 2 and bit 0 are
// reserved, bit 1 (FUA_NV) is obsolete and ignored. Bytes 10-12 are reserved. A NUMBER OF
// LOGICAL BLOCKS of zero is not an error and does nothing.
func compareAndWrite(lu *LogicalUnit, c *Command) {
	w, ok := lu.compareAndWritePrep(c)
	if !ok {
		return
	}
	slot := lu.ranges.lock(w.lba, w.n, true)
	defer lu.ranges.unlock(slot)
	if cw := lu.storeCompareAndWrite(); cw != nil {
		// The store compares and writes as one operation, atomic against its other clients
		// too (the other gateways of an RBD image), which the range lock does not see.
		half := len(c.DataOut) / 2
		mismatch, err := cw.CompareAndWrite(c.DataOut[:half], c.DataOut[half:], lu.byteOffset(w.lba))
		switch {
		case errors.Is(err, backstore.ErrMiscompare):
			c.miscompare(uint64(mismatch))
		case err != nil:
			c.ioError(err, false, w.lba)
		}
		return
	}
	if lu.walkSync(c, &w); c.Status != StatusGood {
		return
	}
	lu.compareAndWriteDone(c, w.lba, lu.bs.WriteAt(lu.compareAndWriteData(c), lu.byteOffset(w.lba), lu.compareAndWriteFUA(c)))
}

// compareAndWritePrep checks a COMPARE AND WRITE and describes the walk that compares the
// first half of the data-out with the medium; false: c is complete (failed, or nothing to do).
func (lu *LogicalUnit) compareAndWritePrep(c *Command) (verifyWalk, bool) {
	const nolbOff = 13
	cdb := c.CDB
	if c.failOn(checkZeroFields(cdb, compareAndWriteZero)) {
		return verifyWalk{}, false
	}
	lba := binary.BigEndian.Uint64(cdb[2:])
	n := uint64(cdb[nolbOff])
	half := lu.blockBytes(n)
	c.TransferLength = int(2 * half)
	if n > uint64(lu.maxCompareAndWriteBlocks()) {
		c.invalidCDBField(nolbOff, -1)
		return verifyWalk{}, false
	}
	if !lu.lbaInRange(lba, n) {
		c.fail(ReasonLBAOutOfRange)
		return verifyWalk{}, false
	}
	if uint64(len(c.DataOut)) != 2*half {
		c.fail(ReasonInvalidFieldInCommandIU)
		return verifyWalk{}, false
	}
	if n == 0 {
		return verifyWalk{}, false
	}
	return verifyWalk{lba: lba, n: n, mode: bytchkCompare, data: c.DataOut[:half]}, true
}

// compareAndWriteData is the second half of the data-out: what is written when the first
// half compared equal.
func (lu *LogicalUnit) compareAndWriteData(c *Command) []byte { return c.DataOut[len(c.DataOut)/2:] }

// compareAndWriteFUA is the fua of the write.
func (lu *LogicalUnit) compareAndWriteFUA(c *Command) bool {
	return lu.writeFUA(c.CDB[1]&cdbFUA != 0)
}

// compareAndWriteDone takes the answer to the write.
func (lu *LogicalUnit) compareAndWriteDone(c *Command, lba uint64, err error) {
	if err != nil {
		c.ioError(err, false, lba)
	}
}
