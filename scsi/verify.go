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
	w, ok := lu.verifyPrep(c)
	if !ok {
		return
	}
	lu.walkSync(c, &w)
}

// verifyPrep checks a VERIFY and describes its walk; false: c is complete (failed, or nothing
// to verify).
func (lu *LogicalUnit) verifyPrep(c *Command) (verifyWalk, bool) {
	if c.failOn(verifyByte1Zero.check(c.CDB)) {
		return verifyWalk{}, false
	}
	bytchk := c.CDB[1] >> 1 & 0x3
	if bytchk == 2 {
		c.invalidCDBField(1, 2)
		return verifyWalk{}, false
	}
	b, f := decodeBlockCDB(c.CDB)
	if c.failOn(f) {
		return verifyWalk{}, false
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
	if !lu.dataOutPrep(c, b.lba, b.blocks, out, b.lengthOff) {
		return verifyWalk{}, false
	}
	return blockWalk(b, bytchk, c.DataOut), true
}

// blockWalk is the walk of VERIFY or WRITE AND VERIFY over the blocks of b, in mode, comparing
// with data; it probes the backstore and may be aborted between chunks.
func blockWalk(b blockCDB, mode byte, data []byte) verifyWalk {
	return verifyWalk{lba: b.lba, n: uint64(b.blocks), mode: mode, data: data, probe: true, abortable: true}
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
	w, ok := lu.writeAndVerifyPrep(c)
	if !ok {
		return
	}
	slot := lu.ranges.lock(w.lba, w.n, false)
	defer lu.ranges.unlock(slot)
	if lu.writeAndVerifyWritten(c, &w, lu.bs.WriteAt(c.DataOut, lu.byteOffset(w.lba), true)) {
		lu.walkSync(c, &w)
	}
}

// writeAndVerifyPrep checks a WRITE AND VERIFY and describes the walk that follows its write;
// false: c is complete (failed, or nothing to write).
func (lu *LogicalUnit) writeAndVerifyPrep(c *Command) (verifyWalk, bool) {
	if c.failOn(writeAndVerifyByte1Zero.check(c.CDB)) {
		return verifyWalk{}, false
	}
	compare := c.CDB[1]&0x02 != 0
	b, f := decodeBlockCDB(c.CDB)
	if c.failOn(f) {
		return verifyWalk{}, false
	}
	if !lu.writePrep(c, b.lba, b.blocks, b.lengthOff) {
		return verifyWalk{}, false
	}
	mode := byte(bytchkMedium)
	if compare {
		mode = bytchkCompare
	}
	return blockWalk(b, mode, c.DataOut), true
}

// writeAndVerifyWritten takes the answer to WRITE AND VERIFY's write (the data forced to stable
// storage) and reports whether the verification follows.
func (lu *LogicalUnit) writeAndVerifyWritten(c *Command, w *verifyWalk, err error) bool {
	if err != nil {
		c.ioError(err, false, w.lba)
		return false
	}
	return true
}

// verifyWalk reads n blocks from lba through a scratch buffer, a chunk at a time, and
// depending on mode compares them with data (bytchkCompare: data holds the whole range;
// bytchkOneBlock: data is one block). A chunk that cannot be read ends the command with MEDIUM
// ERROR and, with probe, the LBA of the first of its blocks that fails when read alone in
// INFORMATION (the chunk's first LBA without probe, or when each block reads alone); a
// difference ends it with MISCOMPARE DURING VERIFY OPERATION and the offset of the first
// differing byte. With abortable a command aborted meanwhile stops at the next chunk.
//
// The walk is a state machine (walkNext, walkRead) so that the synchronous path (walkSync) and
// the asynchronous one (async.go) take the same steps and answer alike.
type verifyWalk struct {
	lba, n    uint64
	mode      byte
	data      []byte
	probe     bool
	abortable bool

	scratch *[scratchSize]byte
	done    uint64 // blocks verified
	k       uint64 // blocks of the chunk being read
	probing bool   // reading the chunk's blocks one by one after it failed
	j       uint64 // the block being probed
	err     error  // the chunk's error
}

// walkNext returns the next read the walk wants, into the scratch buffer, and the LBA it
// starts at; ok is false when the walk is over.
func (lu *LogicalUnit) walkNext(c *Command, w *verifyWalk) (p []byte, lba uint64, ok bool) {
	bs := uint64(lu.blockSize)
	if w.probing {
		return w.scratch[:bs], w.lba + w.done + w.j, true
	}
	if w.done >= w.n || (w.abortable && c.aborted.Load()) {
		return nil, 0, false
	}
	w.k = min(w.n-w.done, uint64(scratchSize)>>lu.blockShift)
	return w.scratch[:w.k*bs], w.lba + w.done, true
}

// walkRead takes the answer to the read walkNext asked for and reports whether the walk is
// over: c has failed, or every block is verified.
func (lu *LogicalUnit) walkRead(c *Command, w *verifyWalk, err error) (over bool) {
	bs := uint64(lu.blockSize)
	cur := w.lba + w.done
	if w.probing {
		if err != nil {
			c.ioError(w.err, true, cur+w.j)
			return true
		}
		if w.j++; w.j == w.k {
			c.ioError(w.err, true, cur)
			return true
		}
		return false
	}
	if err != nil {
		if !w.probe {
			c.ioError(err, true, cur)
			return true
		}
		w.probing, w.j, w.err = true, 0, err
		return false
	}
	p := w.scratch[:w.k*bs]
	switch w.mode {
	case bytchkCompare:
		if i := firstDifference(p, w.data[w.done*bs:(w.done+w.k)*bs]); i >= 0 {
			c.miscompare(w.done*bs + uint64(i))
			return true
		}
	case bytchkOneBlock:
		for j := uint64(0); j < w.k; j++ {
			if i := firstDifference(p[j*bs:(j+1)*bs], w.data); i >= 0 {
				c.miscompare((w.done+j)*bs + uint64(i))
				return true
			}
		}
	}
	w.done += w.k
	return w.done >= w.n
}

// walkSync walks w to its end with the backstore's blocking reads.
func (lu *LogicalUnit) walkSync(c *Command, w *verifyWalk) {
	w.scratch = getScratch()
	defer func() { putScratch(w.scratch); w.scratch = nil }()
	for {
		p, lba, ok := lu.walkNext(c, w)
		if !ok || lu.walkRead(c, w, lu.bs.ReadAt(p, lu.byteOffset(lba))) {
			return
		}
	}
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
