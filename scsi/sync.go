package scsi

import "encoding/binary"

// SYNCHRONIZE CACHE(10/16) (SBC-3).
//
// Byte 1: bits 7:3 reserved, bit 2 SYNC_NV (obsolete, ignored), bit 1 IMMED (accepted: the
// command answers once the flush is done, which IMMED allows), bit 0 obsolete (ignored) in
// SYNCHRONIZE CACHE(10) and reserved in SYNCHRONIZE CACHE(16) (SBC-4 5.31). The range is
// checked like any other; a NUMBER OF LOGICAL BLOCKS of zero means "to the last block". The
// backstore flushes everything, which covers any range.

func synchronizeCache10(lu *LogicalUnit, c *Command) { lu.synchronizeCache(c) }
func synchronizeCache16(lu *LogicalUnit, c *Command) { lu.synchronizeCache(c) }

// synchronizeCache10Zero and synchronizeCache16Zero are the fields that must be zero: the
// reserved bits 7:3 of byte 1 (and bit 0 in the 16-byte CDB) and the reserved bits of the GROUP
// NUMBER byte.
var (
	synchronizeCache10Zero = []cdbField{{1, 0xF8}, {cdb10GroupOff, groupReserved}}
	synchronizeCache16Zero = []cdbField{{1, 0xF8}, {1, 0x01}, {cdb16GroupOff, groupReserved}}
)

func (lu *LogicalUnit) synchronizeCache(c *Command) {
	if lu.synchronizeCachePrep(c) {
		lu.flushDone(c, lu.bs.Flush())
	}
}

// synchronizeCachePrep checks a SYNCHRONIZE CACHE; false: c is complete (failed).
func (lu *LogicalUnit) synchronizeCachePrep(c *Command) bool {
	lba, n, zero := decodeSynchronizeCache(c.CDB)
	if c.failOn(checkZeroFields(c.CDB, zero)) {
		return false
	}
	if !lu.lbaInRange(lba, n) {
		c.fail(ReasonLBAOutOfRange)
		return false
	}
	return true
}

// flushDone takes the backstore's answer to the flush.
func (lu *LogicalUnit) flushDone(c *Command, err error) {
	if err != nil {
		c.flushError(err)
	}
}

// decodeSynchronizeCache reads the LBA and the NUMBER OF LOGICAL BLOCKS of SYNCHRONIZE
// CACHE(10/16), and which fields must be zero.
func decodeSynchronizeCache(cdb []byte) (lba, n uint64, zero []cdbField) {
	if cdb[0] == opSynchronizeCache {
		return uint64(binary.BigEndian.Uint32(cdb[2:])), uint64(binary.BigEndian.Uint16(cdb[cdb10LengthOff:])), synchronizeCache10Zero
	}
	return binary.BigEndian.Uint64(cdb[2:]), uint64(binary.BigEndian.Uint32(cdb[cdb16LengthOff:])), synchronizeCache16Zero
}

// flushError reports a failed flush: a WRITE ERROR (or what the errno says more precisely)
// without INFORMATION, since a flush has no block to name.
func (c *Command) flushError(err error) {
	c.fail(reasonForIOError(err, false))
}
