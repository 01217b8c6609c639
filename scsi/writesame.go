package scsi

import (
	"bytes"
	"encoding/binary"
)

// WRITE SAME(10/16) (SBC-3).

// maxWriteSameBlocks is MAXIMUM WRITE SAME LENGTH (VPD page 0xB0 bytes 36-43): the most blocks one
// WRITE SAME may cover, the same bound as one backstore zeroing call (Linux zeroes and discards
// through WRITE SAME in pieces of this size), and no more than MAXIMUM TRANSFER LENGTH: hosts
// that check a WRITE SAME read the range back with one READ, which must be allowed (LIO
// reports 65535 blocks). WSNZ is 0 in VPD page 0xB0: a NUMBER OF LOGICAL BLOCKS of zero means
// "to the end of the medium" (SBC-4 5.50), within this same bound.
func (lu *LogicalUnit) maxWriteSameBlocks() uint64 {
	n := lu.zeroingLimitBlocks()
	if m := lu.cfg.MaxTransferBytes; m != 0 {
		n = min(n, max(uint64(m)>>lu.blockShift, 1))
	}
	return n
}

// zeroBlock is compared with the data-out block to find writes of zeroes.
var zeroBlock [4096]byte

// WRITE SAME byte 1 bits.
const (
	wsAnchor = 0x10
	wsUnmap  = 0x08
	wsPBData = 0x04 // obsolete in SBC-3, not supported
	wsLBData = 0x02 // obsolete in SBC-3, not supported
	wsNDOB   = 0x01 // WRITE SAME(16) only: no data-out buffer, the block is zeroes
)

// writeSame10Zero and writeSame16Zero are the fields of WRITE SAME that must be zero, in the order
// they are checked: WRPROTECT, ANCHOR, PBDATA, LBDATA and the reserved bits of the GROUP NUMBER
// byte.
var (
	writeSame10Zero = []cdbField{{1, cdbProtectMask}, {1, wsAnchor}, {1, wsPBData}, {1, wsLBData},
		{cdb10GroupOff, groupReserved}}
	writeSame16Zero = []cdbField{{1, cdbProtectMask}, {1, wsAnchor}, {1, wsPBData}, {1, wsLBData},
		{cdb16GroupOff, groupReserved}}
)

// writeSame10 is WRITE SAME(10): byte 1 bit 0 is obsolete and ignored; there is no NDOB.
func writeSame10(lu *LogicalUnit, c *Command) {
	cdb := c.CDB
	lu.writeSame(c, uint64(binary.BigEndian.Uint32(cdb[2:])),
		uint64(binary.BigEndian.Uint16(cdb[cdb10LengthOff:])), false, cdb10LengthOff, writeSame10Zero)
}

// writeSame16 is WRITE SAME(16), with NDOB.
func writeSame16(lu *LogicalUnit, c *Command) {
	cdb := c.CDB
	lu.writeSame(c, binary.BigEndian.Uint64(cdb[2:]),
		uint64(binary.BigEndian.Uint32(cdb[cdb16LengthOff:])), cdb[1]&wsNDOB != 0, cdb16LengthOff, writeSame16Zero)
}

// writeSame writes one block of data-out (or zeroes, with NDOB) to the n blocks from lba, or to
// every block from lba to the end of the medium when n is zero.
//
// WRPROTECT must be zero, ANCHOR is not supported (ANC_SUP 0), PBDATA and LBDATA are obsolete
// and refused. The UNMAP bit needs logical block provisioning (else INVALID FIELD IN CDB, as LBPWS
// is 0). A block of zeroes with UNMAP on a backstore whose unmapped blocks read as zeroes (LBPRZ)
// is unmapped where it covers whole physical blocks and written where it covers part of one
// (deallocate); any other block of zeroes is zeroed by the backstore, which allocates nothing for
// it where it can; a block with data is replicated through a scratch buffer and written out in
// chunks. Either way the blocks read back as the data-out block, which is what SBC-3 requires
// whether or not the device server unmaps. With the write cache disabled the result is flushed
// before the command completes.
func (lu *LogicalUnit) writeSame(c *Command, lba, n uint64, ndob bool, lengthOff int, zeroFields []cdbField) {
	cdb := c.CDB
	if c.failOn(checkZeroFields(cdb, zeroFields)) {
		return
	}
	unmapBit := cdb[1]&wsUnmap != 0
	if unmapBit && !lu.supportsUnmap() {
		c.invalidCDBField(1, 3)
		return
	}
	var out uint64
	if !ndob {
		out = uint64(lu.blockSize)
	}
	c.TransferLength = int(out)
	if n == 0 {
		// NUMBER OF LOGICAL BLOCKS zero, with WSNZ 0: from lba to the last logical block
		// (SBC-4 5.50), an LBA past the last one being out of range as always; the
		// blocks that makes count against MAXIMUM WRITE SAME LENGTH as if the CDB had
		// named them.
		if blocks := lu.Blocks(); lba < blocks {
			n = blocks - lba
		} else {
			c.fail(ReasonLBAOutOfRange)
			return
		}
	}
	if n > lu.maxWriteSameBlocks() {
		c.invalidCDBField(lengthOff, -1)
		return
	}
	if !lu.lbaInRange(lba, n) {
		c.fail(ReasonLBAOutOfRange)
		return
	}
	if uint64(len(c.DataOut)) != out {
		c.fail(ReasonInvalidFieldInCommandIU)
		return
	}

	slot := lu.ranges.lock(lba, n, false)
	defer lu.ranges.unlock(slot)
	zero := ndob || bytes.Equal(c.DataOut, zeroBlock[:len(c.DataOut)])
	if !zero {
		lu.writePattern(c, lba, n, c.DataOut)
		return
	}
	var failedAt uint64
	var err error
	if unmapBit && lu.bs.Capabilities().UnmapZeroes {
		failedAt, err = lu.deallocate(lba, n)
	} else {
		failedAt, err = lu.zeroBlocks(lba, n, false)
	}
	if err != nil {
		c.ioError(err, false, failedAt)
		return
	}
	if !lu.writeCacheEnabled() {
		if err := lu.bs.Flush(); err != nil {
			c.ioError(err, false, lba)
		}
	}
}

// writePattern writes block to each of the n blocks from lba, a scratch buffer full of copies at
// a time. A command aborted meanwhile stops at the next chunk.
func (lu *LogicalUnit) writePattern(c *Command, lba, n uint64, block []byte) {
	scratch := getScratch()
	defer putScratch(scratch)
	bs := uint64(lu.blockSize)
	chunk := min(n, uint64(scratchSize)>>lu.blockShift)
	buf := scratch[:chunk*bs]
	for i := uint64(0); i < chunk; i++ {
		copy(buf[i*bs:], block)
	}
	fua := lu.writeFUA(false)
	for done := uint64(0); done < n; {
		if c.aborted.Load() {
			return
		}
		k := min(n-done, chunk)
		if err := lu.bs.WriteAt(buf[:k*bs], lu.byteOffset(lba+done), fua); err != nil {
			c.ioError(err, false, lba+done)
			return
		}
		done += k
	}
}
