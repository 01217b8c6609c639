package scsi

import "encoding/binary"

// ORWRITE(16) (SBC-4 5.19): each block of the medium becomes the bitwise OR of what it held and
// the block sent, as one uninterrupted read-modify-write: the range is held exclusive in the
// range lock (rangelock.go), so that no overlapping write lands between the read and the write.

const opOrWrite16 = 0x8B

// usageOrWrite16: ORPROTECT (evaluated, refused: no protection information), DPO, FUA, the
// LOGICAL BLOCK ADDRESS, the TRANSFER LENGTH and the GROUP NUMBER. Byte 1 bits 2 and 0 are
// reserved, bit 1 (FUA_NV) obsolete and ignored.
var usageOrWrite16 = blockUsage(opOrWrite16, 0xF8, 16)

// orWriteChecked is usageOrWrite16 with the ignored FUA_NV: the bits checkCDBUsage lets through.
var orWriteChecked = func() []byte {
	u := append([]byte(nil), usageOrWrite16...)
	u[1] |= 0x02
	return u
}()

var orWriteCommands = []opInfo{
	{name: "ORWRITE(16)", opcode: opOrWrite16, cdbLength: 16, usage: usageOrWrite16,
		ignored: []cdbField{{1, 0x02}}, flags: opWritesMedium, run: orWrite16},
}

// orWrite16 handles ORWRITE(16): ORPROTECT must be zero; then the checks of WRITE (the transfer
// limit, the LBA range, a data-out buffer holding the transfer exactly). The blocks are read,
// ORed and written back a scratch buffer at a time, with FUA when the CDB or a disabled write
// cache asks for it.
func orWrite16(lu *LogicalUnit, c *Command) {
	cdb := c.CDB
	if c.failOn(checkCDBUsage(cdb, orWriteChecked)) {
		return
	}
	if c.failOn(cdbField{1, cdbProtectMask}.checkZero(cdb)) {
		return
	}
	lba := binary.BigEndian.Uint64(cdb[2:])
	n := binary.BigEndian.Uint32(cdb[cdb16LengthOff:])
	if !lu.writePrep(c, lba, n, cdb16LengthOff) {
		return
	}
	bytes := lu.blockBytes(uint64(n))
	fua := lu.writeFUA(cdb[1]&cdbFUA != 0)
	slot := lu.ranges.lock(lba, uint64(n), true)
	defer lu.ranges.unlock(slot)
	scratch := getScratch()
	defer putScratch(scratch)
	for done := uint64(0); done < bytes; {
		k := min(uint64(scratchSize), bytes-done)
		buf := scratch[:k]
		off := lu.byteOffset(lba) + int64(done)
		at := lba + done>>lu.blockShift
		if err := lu.bs.ReadAt(buf, off); err != nil {
			c.ioError(err, true, at)
			return
		}
		for i, b := range c.DataOut[done : done+k] {
			buf[i] |= b
		}
		if err := lu.bs.WriteAt(buf, off, fua); err != nil {
			c.ioError(err, false, at)
			return
		}
		done += k
	}
}
