package scsi

// READ and WRITE (SBC-3). The data moves straight between the transport's
// buffers and the backstore: READ reads into c.DataIn, WRITE writes from c.DataOut.

// readCDB is READ, any of its CDB lengths. READ(6) has a 21-bit LBA, and a TRANSFER LENGTH of 0
// means 256 blocks; its byte 1 bits 7:5 (the LUN of SCSI-2) are reserved. In READ(10/12/16)
// RDPROTECT must be zero (no protection information); DPO and FUA are accepted: every read goes
// to the backstore anyway. The rest of byte 1 is decodeReadWrite's.
func readCDB(lu *LogicalUnit, c *Command) {
	b, f := decodeRW(c.CDB)
	if c.failOn(f) {
		return
	}
	lu.readBlocks(c, b.lba, b.blocks, b.lengthOff)
}

// writeCDB is WRITE, any of its CDB lengths; WRITE(6) is laid out as READ(6). In
// WRITE(10/12/16) WRPROTECT must be zero; FUA forces the data to stable storage; DPO is
// accepted.
func writeCDB(lu *LogicalUnit, c *Command) {
	b, f := decodeRW(c.CDB)
	if c.failOn(f) {
		return
	}
	lu.writeBlocks(c, b.lba, b.blocks, writeFUABit(c.CDB), b.lengthOff)
}

// writeFUABit reports whether the CDB of a WRITE sets FUA; WRITE(6) has none (its byte 1 bit 3
// is part of the LBA).
func writeFUABit(cdb []byte) bool { return cdb[0] != opWrite6 && cdb[1]&cdbFUA != 0 }

// decode6 reads the LBA and the transfer length of READ(6) and WRITE(6); byte 1 bits 7:5 are
// reserved.
func decode6(cdb []byte) (lba uint64, n uint32, f fault) {
	if f := (cdbField{1, 0xE0}).checkZero(cdb); f != 0 {
		return 0, 0, f
	}
	lba = uint64(cdb[1]&0x1F)<<16 | uint64(cdb[2])<<8 | uint64(cdb[3])
	n = uint32(cdb[4])
	if n == 0 {
		n = 256
	}
	return lba, n, 0
}

// readWriteByte1Zero are the fields of byte 1 of READ/WRITE(10/12) that must be zero: the
// protection field (the logical unit has no protection information: PROTECT is 0 in INQUIRY)
// and bit 2 (RARC of SBC-4, rebuild assist, is not supported). Bits 1 (FUA_NV) and 0 are
// obsolete and ignored (ignoredReadWrite). In READ/WRITE(16) bit 0, SBC-4's DLD2, must be zero
// too: command duration limits are not supported, and its companions DLD1 and DLD0
// in the GROUP NUMBER byte are refused with the rest of groupReserved.
var readWriteByte1Zero = newByte1Fields(
	[]cdbField{{1, cdbProtectMask}, {1, 0x04}},
	[]cdbField{{1, cdbProtectMask}, {1, 0x04}, {1, 0x01}},
)

// decodeReadWrite decodes READ/WRITE(10/12/16): the fields of byte 1 that must be zero, then
// what every block CDB has (decodeBlockCDB).
func decodeReadWrite(cdb []byte) (blockCDB, fault) {
	if f := readWriteByte1Zero.check(cdb); f != 0 {
		return blockCDB{}, f
	}
	return decodeBlockCDB(cdb)
}

// checkTransfer does what every command that moves data for n blocks from lba does before
// touching the medium: it refuses moving more bytes than the advertised maximum (pointing at the
// transfer length field at lengthOff) and an LBA range outside the medium.
func (lu *LogicalUnit) checkTransfer(lba, n, bytes uint64, lengthOff int) fault {
	if lu.transferTooLong(bytes) {
		return cdbFieldFault(lengthOff, -1)
	}
	if !lu.lbaInRange(lba, n) {
		return faultOf(ReasonLBAOutOfRange)
	}
	return 0
}

// checkDataOut refuses a data-out buffer that does not hold exactly the bytes the CDB asks for:
// such a command is refused whole, as LIO does, with INVALID FIELD IN COMMAND INFORMATION UNIT,
// rather than writing or comparing part of it, or garbage.
func checkDataOut(dataOut []byte, bytes uint64) fault {
	if uint64(len(dataOut)) != bytes {
		return faultOf(ReasonInvalidFieldInCommandIU)
	}
	return 0
}

// readBlocks reads n blocks from lba into c.DataIn. When the buffer is shorter than the transfer
// it gets the whole blocks that fit, and the transport reports the overflow (TransferLength stays
// the full transfer).
func (lu *LogicalUnit) readBlocks(c *Command, lba uint64, n uint32, lengthOff int) {
	fit := lu.readPrep(c, lba, n, lengthOff)
	if fit == 0 {
		return
	}
	lu.readDone(c, lba, fit, lu.bs.ReadAt(c.DataIn[:fit], lu.byteOffset(lba)))
}

// readPrep is what a read does before the backstore: the checks, and the bytes to read, 0 when
// there is nothing to read (c is complete).
func (lu *LogicalUnit) readPrep(c *Command, lba uint64, n uint32, lengthOff int) uint64 {
	bytes := lu.blockBytes(uint64(n))
	c.TransferLength = clampInt(bytes)
	if c.failOn(lu.checkTransfer(lba, uint64(n), bytes, lengthOff)) {
		return 0
	}
	return min(bytes, uint64(len(c.DataIn))) &^ uint64(lu.blockSize-1)
}

// readDone ends a read of fit bytes from lba with the backstore's answer.
func (lu *LogicalUnit) readDone(c *Command, lba, fit uint64, err error) {
	if err != nil {
		c.ioError(err, true, lba)
		return
	}
	c.DataInLength = int(fit)
}

// writeBlocks writes n blocks from c.DataOut at lba. The data-out buffer must hold exactly the
// transfer (checkDataOut).
func (lu *LogicalUnit) writeBlocks(c *Command, lba uint64, n uint32, fua bool, lengthOff int) {
	if !lu.writePrep(c, lba, n, lengthOff) {
		return
	}
	var slot int
	if lu.nonBlocking {
		slot = lu.ranges.lockShort(lba, uint64(n))
	} else {
		slot = lu.ranges.lock(lba, uint64(n), false)
	}
	err := lu.bs.WriteAt(c.DataOut, lu.byteOffset(lba), lu.writeFUA(fua))
	lu.ranges.unlock(slot)
	lu.writeDone(c, lba, err)
}

// writePrep is what a write does before the backstore: the checks. It reports whether there
// is something to write (false: c is complete).
func (lu *LogicalUnit) writePrep(c *Command, lba uint64, n uint32, lengthOff int) bool {
	return lu.dataOutPrep(c, lba, n, lu.blockBytes(uint64(n)), lengthOff)
}

// dataOutPrep is the checks of a command that takes bytes of data-out for the n blocks from lba
// (a write, or a verify that compares): the transfer (checkTransfer) and the data-out buffer
// (checkDataOut). It reports whether there is something to do (false: c is complete).
func (lu *LogicalUnit) dataOutPrep(c *Command, lba uint64, n uint32, bytes uint64, lengthOff int) bool {
	c.TransferLength = clampInt(bytes)
	if c.failOn(lu.checkTransfer(lba, uint64(n), bytes, lengthOff)) {
		return false
	}
	if c.failOn(checkDataOut(c.DataOut, bytes)) {
		return false
	}
	return n != 0
}

// writeDone ends a write at lba with the backstore's answer.
func (lu *LogicalUnit) writeDone(c *Command, lba uint64, err error) {
	if err != nil {
		c.ioError(err, false, lba)
	}
}

// decodeRW decodes READ or WRITE, any of their CDB lengths.
func decodeRW(cdb []byte) (blockCDB, fault) {
	if cdb[0] == opRead6 || cdb[0] == opWrite6 {
		lba, n, f := decode6(cdb)
		return blockCDB{lba: lba, blocks: n, lengthOff: 4}, f
	}
	return decodeReadWrite(cdb)
}
