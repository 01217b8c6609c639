package scsi

import (
	"bytes"
	"sync"
)

// VERIFY and WRITE AND VERIFY (SBC-3).

// BYTCHK values of VERIFY (SBC-3).
const (
	bytchkMedium   = 0 // no data-out: check that the blocks can be read
	bytchkCompare  = 1 // data-out of the whole range, compared byte by byte
	bytchkOneBlock = 3 // one block of data-out, compared with every block of the range
)

// scratchSize is the size of the buffers that verification and WRITE SAME work through: a
// multiple of every supported block size, large enough for few backstore calls, small enough to
// keep in a pool.
const scratchSize = 128 << 10

// scratchPool holds the buffers that verification and WRITE SAME read into or fill, so that a
// command in the steady state allocates none. The pool holds pointers to arrays, which go into
// an interface without an allocation.
var scratchPool = sync.Pool{New: func() any { return new([scratchSize]byte) }}

func getScratch() *[scratchSize]byte  { return scratchPool.Get().(*[scratchSize]byte) }
func putScratch(b *[scratchSize]byte) { scratchPool.Put(b) }

// verify10, verify12 and verify16 are VERIFY(10/12/16). VRPROTECT must be zero, DPO is accepted, byte 1 bit 3
// is reserved and BYTCHK 10b is reserved. The VERIFICATION LENGTH may be zero (nothing to do).
// BYTCHK 11b compares one block of data-out with every block; a miscompare then reports in
// INFORMATION the offset into the range, as if the block had been sent once per block (block
// index × block size + byte), which names both the block and the byte.
func verify10(lu *LogicalUnit, c *Command) { lu.verifyN(c) }
func verify12(lu *LogicalUnit, c *Command) { lu.verifyN(c) }
func verify16(lu *LogicalUnit, c *Command) { lu.verifyN(c) }

// verifyByte1Zero are the fields of byte 1 of VERIFY(10/12) that must be zero: VRPROTECT and the
// reserved bit 3; bit 0 is obsolete and ignored (ignoredVerify). In VERIFY(16) bit 0 is reserved
// (SBC-4 5.35) and must be zero too.
var verifyByte1Zero = newByte1Fields(
	[]cdbField{{1, cdbProtectMask}, {1, 0x08}},
	[]cdbField{{1, cdbProtectMask}, {1, 0x08}, {1, 0x01}},
)

func (lu *LogicalUnit) verifyN(c *Command) {
	if c.failOn(verifyByte1Zero.check(c.CDB)) {
		return
	}
	bytchk := c.CDB[1] >> 1 & 0x3
	if bytchk == 2 {
		c.invalidCDBField(1, 2)
		return
	}
	b, f := decodeBlockCDB(c.CDB)
	if c.failOn(f) {
		return
	}
	var out uint64 // data-out bytes
	switch bytchk {
	case bytchkCompare:
		out = lu.blockBytes(uint64(b.blocks))
	case bytchkOneBlock:
		if b.blocks > 0 {
			out = uint64(lu.blockSize)
		}
	}
	c.TransferLength = clampInt(out)
	if c.failOn(lu.checkTransfer(b.lba, uint64(b.blocks), out, b.lengthOff)) {
		return
	}
	if c.failOn(checkDataOut(c.DataOut, out)) {
		return
	}
	if b.blocks == 0 {
		return
	}
	lu.verifyRange(c, b.lba, uint64(b.blocks), bytchk, c.DataOut)
}

// writeAndVerify10, writeAndVerify12 and writeAndVerify16 are WRITE AND VERIFY(10/12/16): the data is written through
// to stable storage and read back; with BYTCHK 1 what is read back is compared with the data-out
// buffer. WRPROTECT must be zero; byte 1 bit 3 is reserved (there is no FUA: the write is always
// forced), and bit 2 is reserved (the high bit of SBC-4's two-bit BYTCHK, whose values 10b and
// 11b this device server does not support).
func writeAndVerify10(lu *LogicalUnit, c *Command) { lu.writeAndVerifyN(c) }
func writeAndVerify12(lu *LogicalUnit, c *Command) { lu.writeAndVerifyN(c) }
func writeAndVerify16(lu *LogicalUnit, c *Command) { lu.writeAndVerifyN(c) }

// writeAndVerifyByte1Zero are the fields of byte 1 of WRITE AND VERIFY(10/12) that must be zero:
// WRPROTECT, the reserved bit 3 and bit 2; bit 0 is obsolete and ignored (ignoredVerify). In
// WRITE AND VERIFY(16) bit 0 is reserved (SBC-4 5.43) and must be zero too.
var writeAndVerifyByte1Zero = newByte1Fields(
	[]cdbField{{1, cdbProtectMask}, {1, 0x08}, {1, 0x04}},
	[]cdbField{{1, cdbProtectMask}, {1, 0x08}, {1, 0x04}, {1, 0x01}},
)

func (lu *LogicalUnit) writeAndVerifyN(c *Command) {
	if c.failOn(writeAndVerifyByte1Zero.check(c.CDB)) {
		return
	}
	compare := c.CDB[1]&0x02 != 0
	b, f := decodeBlockCDB(c.CDB)
	if c.failOn(f) {
		return
	}
	total := lu.blockBytes(uint64(b.blocks))
	c.TransferLength = clampInt(total)
	if c.failOn(lu.checkTransfer(b.lba, uint64(b.blocks), total, b.lengthOff)) {
		return
	}
	if c.failOn(checkDataOut(c.DataOut, total)) {
		return
	}
	if b.blocks == 0 {
		return
	}
	n := uint64(b.blocks)
	slot := lu.ranges.lock(b.lba, n, false)
	defer lu.ranges.unlock(slot)
	if err := lu.bs.WriteAt(c.DataOut, lu.byteOffset(b.lba), true); err != nil {
		c.ioError(err, false, b.lba)
		return
	}
	mode := byte(bytchkMedium)
	if compare {
		mode = bytchkCompare
	}
	lu.verifyRange(c, b.lba, n, mode, c.DataOut)
}

// verifyRange reads the n blocks from lba through a scratch buffer and, depending on mode,
// compares them with data (bytchkCompare: data holds the whole range; bytchkOneBlock: data is
// one block). A block that cannot be read ends the command with MEDIUM ERROR and that block's
// LBA in INFORMATION; a difference with MISCOMPARE DURING VERIFY OPERATION and the offset of the
// first differing byte. A command aborted meanwhile stops at the next chunk.
func (lu *LogicalUnit) verifyRange(c *Command, lba, n uint64, mode byte, data []byte) {
	scratch := getScratch()
	defer putScratch(scratch)
	chunk := uint64(scratchSize) >> lu.blockShift
	bs := uint64(lu.blockSize)
	for done := uint64(0); done < n; {
		if c.aborted.Load() {
			return
		}
		k := min(n-done, chunk)
		p := scratch[:k*bs]
		cur := lba + done
		if err := lu.bs.ReadAt(p, lu.byteOffset(cur)); err != nil {
			c.ioError(err, true, lu.firstUnreadable(p, cur, k))
			return
		}
		switch mode {
		case bytchkCompare:
			if i := firstDifference(p, data[done*bs:(done+k)*bs]); i >= 0 {
				c.miscompare(done*bs + uint64(i))
				return
			}
		case bytchkOneBlock:
			for j := uint64(0); j < k; j++ {
				if i := firstDifference(p[j*bs:(j+1)*bs], data); i >= 0 {
					c.miscompare((done+j)*bs + uint64(i))
					return
				}
			}
		}
		done += k
	}
}

// firstUnreadable finds the first of the k blocks from lba that fails to read, one block at a
// time into p, so that the sense data names the bad block rather than the start of the chunk.
// It returns lba when every block reads on the second try.
func (lu *LogicalUnit) firstUnreadable(p []byte, lba, k uint64) uint64 {
	bs := uint64(lu.blockSize)
	for j := uint64(0); j < k; j++ {
		if lu.bs.ReadAt(p[:bs], lu.byteOffset(lba+j)) != nil {
			return lba + j
		}
	}
	return lba
}

// firstDifference returns the index of the first byte where a and b (of equal length) differ,
// or -1.
func firstDifference(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// miscompare ends the command with MISCOMPARE DURING VERIFY OPERATION and the offset of the
// first differing byte in INFORMATION, as SBC-3 asks of COMPARE AND WRITE and VERIFY.
func (c *Command) miscompare(offset uint64) {
	c.failInfo(ReasonMiscompareDuringVerify, SenseInfo{Information: offset, InformationValid: true})
}
