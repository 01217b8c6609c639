package scsi

import "encoding/binary"

// lastLBA is the address of the last logical block.
func (lu *LogicalUnit) lastLBA() uint64 {
	if b := lu.Blocks(); b > 0 {
		return b - 1
	}
	return 0
}

// checkCapacityLBA applies the SBC-3 rule shared by both READ CAPACITY commands: the LOGICAL
// BLOCK ADDRESS field is obsolete and must be zero unless the (equally obsolete) PMI bit is set.
// With PMI set the device server reports the last LBA anyway: there is no substantial delay
// anywhere on this medium.
func checkCapacityLBA(lba uint64, lbaOff int, pmi bool) fault {
	if !pmi && lba != 0 {
		return cdbFieldFault(lbaOff, -1)
	}
	return 0
}

// readCapacity10 handles READ CAPACITY(10) (SBC-3 5.15): the last LBA, or FFFFFFFFh when it
// does not fit (the initiator then uses READ CAPACITY(16)), and the block length.
func readCapacity10(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageReadCapacity10)) {
		return
	}
	lba := uint64(binary.BigEndian.Uint32(c.CDB[2:6]))
	if c.failOn(checkCapacityLBA(lba, 2, c.CDB[8]&0x01 != 0)) {
		return
	}
	var buf [8]byte
	binary.BigEndian.PutUint32(buf[0:], uint32(min(lu.lastLBA(), 0xFFFFFFFF)))
	binary.BigEndian.PutUint32(buf[4:], lu.blockSize)
	// READ CAPACITY(10) has no allocation length: it always returns 8 bytes.
	c.putDataIn(buf[:], len(buf))
}

// readCapacity16 handles READ CAPACITY(16) (SBC-3 5.16).
func readCapacity16(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageReadCapacity16)) {
		return
	}
	lba := binary.BigEndian.Uint64(c.CDB[2:10])
	if c.failOn(checkCapacityLBA(lba, 2, c.CDB[14]&0x01 != 0)) {
		return
	}
	alloc := int(binary.BigEndian.Uint32(c.CDB[10:14]))
	var buf [32]byte
	binary.BigEndian.PutUint64(buf[0:], lu.lastLBA())
	binary.BigEndian.PutUint32(buf[8:], lu.blockSize)
	// Byte 12: P_TYPE and PROT_EN are 0 (no protection information).
	// Byte 13: P_I_EXPONENT 0, LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT.
	buf[13] = byte(lu.physShift) & 0x0F
	// Byte 14: LBPME, LBPRZ; bytes 14-15: LOWEST ALIGNED LOGICAL BLOCK ADDRESS 0.
	if lu.supportsUnmap() {
		buf[14] |= 0x80
		if lu.unmappedReadsZero() {
			buf[14] |= 0x40
		}
	}
	c.putDataIn(buf[:], alloc)
}
