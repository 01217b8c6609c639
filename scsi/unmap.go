package scsi

import "encoding/binary"

// UNMAP (SBC-3) and the provisioning limits that VPD page 0xB0 advertises.

// UNMAP parameter list layout (SBC-3): an 8-byte header, then 16-byte block descriptors.
const (
	unmapHeaderLen     = 8
	unmapDescriptorLen = 16
)

// Limits of one UNMAP and one WRITE SAME. Linux sends one UNMAP descriptor per command and splits
// its discards and zeroing at the advertised maximums; other initiators send up to a few hundred
// descriptors.
const (
	// unmapDescriptorLimit is MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT: 256 descriptors make a
	// parameter list of 4 KiB + 8 bytes.
	unmapDescriptorLimit = 256
	// unmapByteLimit bounds the blocks of one UNMAP or WRITE SAME when the backstore has no
	// bound of its own: large enough that a big volume takes few commands, small enough that
	// one command finishes well inside the initiator's timeout.
	unmapByteLimit = 1 << 30
	// unmapBlockLimit bounds MAXIMUM UNMAP LBA COUNT in blocks, whatever the block size: common
	// tools (sg_unmap, blkdiscard through sd) expect at most 1 Mi blocks per command.
	unmapBlockLimit = 1 << 20
)

// supportsUnmap reports whether the logical unit implements UNMAP and WRITE SAME with UNMAP
// (logical block provisioning management: LBPME in READ CAPACITY(16), LBPU/LBPWS/LBPWS10 in VPD
// page 0xB2). Without thin provisioning UNMAP is an unsupported operation code.
func (lu *LogicalUnit) supportsUnmap() bool { return lu.cfg.ThinProvisioning }

// maxUnmapDescriptors is MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT (VPD page 0xB0 bytes 24-27): the
// most block descriptors UNMAP accepts, 0 when UNMAP is not supported.
func (lu *LogicalUnit) maxUnmapDescriptors() uint32 {
	if !lu.supportsUnmap() {
		return 0
	}
	return unmapDescriptorLimit
}

// maxUnmapBlocks is MAXIMUM UNMAP LBA COUNT (VPD page 0xB0 bytes 20-23): the most blocks all the
// descriptors of one UNMAP may cover together (the backstore's zeroing bound, at most
// unmapBlockLimit), 0 when UNMAP is not supported.
func (lu *LogicalUnit) maxUnmapBlocks() uint32 {
	if !lu.supportsUnmap() {
		return 0
	}
	return uint32(min(lu.zeroingLimitBlocks(), unmapBlockLimit))
}

// zeroingLimitBlocks is the most blocks one UNMAP or WRITE SAME covers: unmapByteLimit, or the
// backstore's own bound on one unmap or zeroing call (a block device's discard_max_bytes), so
// that a descriptor of the maximum size is one backstore call.
func (lu *LogicalUnit) zeroingLimitBlocks() uint64 {
	limit := int64(unmapByteLimit)
	if m := lu.bs.Capabilities().MaxUnmapBytes; m > 0 {
		limit = m
	}
	return max(uint64(limit)>>lu.blockShift, 1)
}

// unmapZero are the fields of the UNMAP CDB that must be zero, in the order they are checked:
// the reserved bits 7:1 of byte 1, ANCHOR (ANC_SUP is 0), the reserved bytes 2-5 and the
// reserved bits of the GROUP NUMBER byte.
var unmapZero = []cdbField{{1, 0xFE}, {1, 0x01}, {2, 0xFF}, {3, 0xFF}, {4, 0xFF}, {5, 0xFF},
	{cdb10GroupOff, groupReserved}}

// unmap is UNMAP. Byte 1 bit 0 is ANCHOR (anchored LBAs are not supported: ANC_SUP is 0), bits
// 7:1 and bytes 2-5 are reserved, byte 6 holds the GROUP NUMBER, bytes 7-8 the PARAMETER LIST
// LENGTH.
//
// The parameter list is checked whole before anything is unmapped, so that a bad descriptor
// leaves the medium untouched:
//   - a PARAMETER LIST LENGTH of zero is a no-op; 1 to 7 is PARAMETER LIST LENGTH ERROR;
//   - a data-out buffer shorter than the PARAMETER LIST LENGTH is refused (INVALID FIELD IN
//     CDB on that field), as LIO refuses a control command whose data-out falls short;
//   - UNMAP BLOCK DESCRIPTOR DATA LENGTH reaching past the parameter list, or an UNMAP DATA
//     LENGTH too small to hold the descriptors it announces, is INVALID FIELD IN PARAMETER LIST
//     pointing at the field; a trailing partial descriptor is ignored, as SBC-3 says;
//   - more descriptors, or more blocks in total, than VPD page 0xB0 advertises is INVALID FIELD
//     IN PARAMETER LIST (pointing at the descriptor data length, or at the NUMBER OF LOGICAL
//     BLOCKS of the descriptor that went over);
//   - a descriptor outside the medium is LOGICAL BLOCK ADDRESS OUT OF RANGE: SBC-4 5.31 names
//     the case where the LBA plus the NUMBER OF LOGICAL BLOCKS exceeds the capacity, so a
//     descriptor of zero blocks at the capacity (LBA = number of blocks) is not one.
//
// Only whole physical blocks are deallocated: the logical blocks of a descriptor that share a
// physical block with blocks outside it keep their data, which SBC-4 5.31 allows ("the logical
// block provisioning state for each specified LBA ... may remain unchanged") and a 512e disk
// does. UNMAP never promised zeroes (Linux zeroes with WRITE SAME, which writes what it cannot
// unmap: writeSame).
func unmap(lu *LogicalUnit, c *Command) {
	if !lu.supportsUnmap() {
		c.invalidOpcode()
		return
	}
	cdb := c.CDB
	if c.failOn(checkZeroFields(cdb, unmapZero)) {
		return
	}
	paramLen := int(binary.BigEndian.Uint16(cdb[cdb10LengthOff:]))
	c.TransferLength = paramLen
	if paramLen == 0 {
		return
	}
	if paramLen < unmapHeaderLen {
		c.fail(ReasonParameterListLengthError)
		return
	}
	if len(c.DataOut) < paramLen {
		c.invalidCDBField(cdb10LengthOff, -1)
		return
	}
	p := c.DataOut[:paramLen]
	dataLen := int(binary.BigEndian.Uint16(p[0:]))
	descLen := int(binary.BigEndian.Uint16(p[2:]))
	if descLen > paramLen-unmapHeaderLen {
		c.invalidParamField(2, -1)
		return
	}
	if dataLen < unmapHeaderLen-2+descLen {
		c.invalidParamField(0, -1)
		return
	}
	count := descLen / unmapDescriptorLen
	if uint32(count) > lu.maxUnmapDescriptors() {
		c.invalidParamField(2, -1)
		return
	}

	// First pass: check every descriptor and find the span they cover.
	maxBlocks := uint64(lu.maxUnmapBlocks())
	var total uint64
	spanStart, spanEnd := ^uint64(0), uint64(0)
	for i := 0; i < count; i++ {
		d := p[unmapHeaderLen+i*unmapDescriptorLen:]
		lba := binary.BigEndian.Uint64(d[0:])
		n := uint64(binary.BigEndian.Uint32(d[8:]))
		total += n
		if total > maxBlocks {
			c.invalidParamField(unmapHeaderLen+i*unmapDescriptorLen+8, -1)
			return
		}
		if lba > lu.Blocks() || n > lu.Blocks()-lba {
			c.fail(ReasonLBAOutOfRange)
			return
		}
		if n > 0 {
			spanStart, spanEnd = min(spanStart, lba), max(spanEnd, lba+n)
		}
	}
	if total == 0 {
		return
	}

	// Second pass: unmap, holding the whole span against COMPARE AND WRITE (one range, so that
	// the command never waits while holding part of what it needs).
	slot := lu.ranges.lock(spanStart, spanEnd-spanStart, false)
	defer lu.ranges.unlock(slot)
	for i := 0; i < count; i++ {
		d := p[unmapHeaderLen+i*unmapDescriptorLen:]
		lba := binary.BigEndian.Uint64(d[0:])
		n := uint64(binary.BigEndian.Uint32(d[8:]))
		first, end := lu.physicalInside(lba, n)
		if first == end {
			continue
		}
		if failedAt, err := lu.zeroBlocks(first, end-first, true); err != nil {
			c.ioError(err, false, failedAt)
			return
		}
	}
}

// physicalInside returns the whole physical blocks inside the n logical blocks from lba, as the
// logical blocks [first, end); first == end when there is none.
func (lu *LogicalUnit) physicalInside(lba, n uint64) (first, end uint64) {
	mask := lu.blocksPerPhysical() - 1
	first = (lba + mask) &^ mask
	end = (lba + n) &^ mask
	if first >= end {
		return lba, lba
	}
	return first, end
}

// deallocate makes the n blocks from lba read back as zeroes, deallocating the whole physical
// blocks among them and writing zeroes to the logical blocks of the physical blocks at either
// end that the range covers only in part (WRITE SAME with UNMAP, SBC-4 5.50: a block that is
// not unmapped is written). On failure it returns the first LBA of the piece that failed.
func (lu *LogicalUnit) deallocate(lba, n uint64) (uint64, error) {
	first, end := lu.physicalInside(lba, n)
	if first == end {
		return lu.zeroBlocks(lba, n, false)
	}
	if first > lba {
		if at, err := lu.zeroBlocks(lba, first-lba, false); err != nil {
			return at, err
		}
	}
	if at, err := lu.zeroBlocks(first, end-first, true); err != nil {
		return at, err
	}
	if end < lba+n {
		return lu.zeroBlocks(end, lba+n-end, false)
	}
	return 0, nil
}

// zeroBlocks deallocates (unmap true) or zeroes the n blocks from lba, in pieces no larger than
// the backstore takes in one call. On failure it returns the first LBA of the piece that failed.
func (lu *LogicalUnit) zeroBlocks(lba, n uint64, unmap bool) (uint64, error) {
	piece := n
	if m := lu.bs.Capabilities().MaxUnmapBytes; m > 0 {
		piece = max(uint64(m)>>lu.blockShift, 1)
	}
	for n > 0 {
		k := min(n, piece)
		off, length := lu.byteOffset(lba), int64(lu.blockBytes(k))
		var err error
		if unmap {
			err = lu.bs.Unmap(off, length)
		} else {
			err = lu.bs.WriteZeroes(off, length)
		}
		if err != nil {
			return lba, err
		}
		lba += k
		n -= k
	}
	return 0, nil
}
