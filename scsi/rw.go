package scsi

// READ and WRITE (SBC-3). The data moves straight between the transport's
// buffers and the backstore: READ reads into c.DataIn, WRITE writes from c.DataOut.

// read6 is READ(6): a 21-bit LBA, and a TRANSFER LENGTH of 0 means 256 blocks. Byte 1 bits 7:5
// (the LUN of SCSI-2) are reserved.
func read6(lu *LogicalUnit, c *Command) {
	lba, n, ok := c.decode6()
	if !ok {
		return
	}
	lu.readBlocks(c, lba, n, 4)
}

// read10, read12 and read16 are READ(10/12/16). RDPROTECT must be zero (no protection
// information); DPO and FUA are accepted: every read goes to the backstore anyway.
func read10(lu *LogicalUnit, c *Command) { lu.readN(c) }
func read12(lu *LogicalUnit, c *Command) { lu.readN(c) }
func read16(lu *LogicalUnit, c *Command) { lu.readN(c) }

func (lu *LogicalUnit) readN(c *Command) {
	if c.checkReadWriteByte1() {
		return
	}
	b, ok := c.decodeBlockCDB()
	if !ok {
		return
	}
	lu.readBlocks(c, b.lba, b.blocks, b.lengthOff)
}

// write6 is WRITE(6), laid out as READ(6).
func write6(lu *LogicalUnit, c *Command) {
	lba, n, ok := c.decode6()
	if !ok {
		return
	}
	lu.writeBlocks(c, lba, n, false, 4)
}

// write10, write12 and write16 are WRITE(10/12/16). WRPROTECT must be zero; FUA forces the data
// to stable storage; DPO is accepted.
func write10(lu *LogicalUnit, c *Command) { lu.writeN(c) }
func write12(lu *LogicalUnit, c *Command) { lu.writeN(c) }
func write16(lu *LogicalUnit, c *Command) { lu.writeN(c) }

func (lu *LogicalUnit) writeN(c *Command) {
	if c.checkReadWriteByte1() {
		return
	}
	b, ok := c.decodeBlockCDB()
	if !ok {
		return
	}
	lu.writeBlocks(c, b.lba, b.blocks, c.CDB[1]&cdbFUA != 0, b.lengthOff)
}

// decode6 reads the LBA and the transfer length of READ(6) and WRITE(6).
func (c *Command) decode6() (lba uint64, n uint32, ok bool) {
	cdb := c.CDB
	if c.cdbBitsSet(1, 0xE0) {
		return 0, 0, false
	}
	lba = uint64(cdb[1]&0x1F)<<16 | uint64(cdb[2])<<8 | uint64(cdb[3])
	n = uint32(cdb[4])
	if n == 0 {
		n = 256
	}
	return lba, n, true
}

// checkReadWriteByte1 checks byte 1 of READ/WRITE(10/12/16): the protection field must be zero
// (the logical unit has no protection information: PROTECT is 0 in INQUIRY) and bit 2 is
// reserved (RARC of SBC-4, rebuild assist, is not supported). Bit 1 (FUA_NV) is obsolete and
// ignored, and so is bit 0 (obsolete in the 10- and 12-byte CDBs; in the 16-byte ones SBC-4's
// DLD2, which an initiator only sets for a device that reports command duration limits). It
// reports whether it failed the command.
func (c *Command) checkReadWriteByte1() bool {
	return c.cdbBitsSet(1, cdbProtectMask) || c.cdbBitsSet(1, 0x04)
}

// checkTransfer does what every command that moves n blocks does before touching the medium:
// it sets TransferLength, refuses a transfer longer than the advertised maximum (pointing at the
// transfer length field at lengthOff) and an LBA range outside the medium. It returns the
// transfer in bytes; ok is false when it failed the command.
func (lu *LogicalUnit) checkTransfer(c *Command, lba uint64, n uint32, lengthOff int) (bytes uint64, ok bool) {
	bytes = lu.blockBytes(uint64(n))
	c.TransferLength = clampInt(bytes)
	if lu.transferTooLong(bytes) {
		c.invalidCDBField(lengthOff, -1)
		return bytes, false
	}
	if !lu.lbaInRange(lba, uint64(n)) {
		c.fail(ReasonLBAOutOfRange)
		return bytes, false
	}
	return bytes, true
}

// readBlocks reads n blocks from lba into c.DataIn. When the buffer is shorter than the transfer
// it gets the whole blocks that fit, and the transport reports the overflow (TransferLength stays
// the full transfer).
func (lu *LogicalUnit) readBlocks(c *Command, lba uint64, n uint32, lengthOff int) {
	bytes, ok := lu.checkTransfer(c, lba, n, lengthOff)
	if !ok {
		return
	}
	fit := min(bytes, uint64(len(c.DataIn))) &^ uint64(lu.blockSize-1)
	if fit == 0 {
		return
	}
	if err := lu.bs.ReadAt(c.DataIn[:fit], lu.byteOffset(lba)); err != nil {
		c.ioError(err, true, lba)
		return
	}
	c.DataInLength = int(fit)
}

// writeBlocks writes n blocks from c.DataOut at lba. The data-out buffer must hold exactly the
// transfer: a write whose data does not match its CDB is refused whole, as LIO does, with
// INVALID FIELD IN COMMAND INFORMATION UNIT, rather than writing part of it or garbage.
func (lu *LogicalUnit) writeBlocks(c *Command, lba uint64, n uint32, fua bool, lengthOff int) {
	bytes, ok := lu.checkTransfer(c, lba, n, lengthOff)
	if !ok {
		return
	}
	if uint64(len(c.DataOut)) != bytes {
		c.fail(ReasonInvalidFieldInCommandIU)
		return
	}
	if n == 0 {
		return
	}
	slot := lu.ranges.lock(lba, uint64(n), false)
	err := lu.bs.WriteAt(c.DataOut, lu.byteOffset(lba), lu.writeFUA(fua))
	lu.ranges.unlock(slot)
	if err != nil {
		c.ioError(err, false, lba)
	}
}
