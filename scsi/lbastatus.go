package scsi

import (
	"encoding/binary"

	"github.com/srptarget/srptarget/backstore"
)

// GET LBA STATUS (SBC-3 5.7): the logical block provisioning status of the blocks from an LBA.

// saGetLBAStatus is the SERVICE ACTION IN(16) service action of GET LBA STATUS.
const saGetLBAStatus = 0x12

// usageGetLBAStatus: SERVICE ACTION, STARTING LOGICAL BLOCK ADDRESS (2-9), ALLOCATION LENGTH
// (10-13). Byte 14, the REPORT TYPE of SBC-4, is reserved here as in SBC-3: every block is
// reported, which is report type 0, and a device server that does not act on the field says so
// with RTP 0, the same answer.
var usageGetLBAStatus = []byte{opServiceActionIn16, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}

// GET LBA STATUS parameter data: an 8-byte header (PARAMETER DATA LENGTH, then reserved
// bytes), then LBA status descriptors of 16 bytes: the first LBA (8), NUMBER OF LOGICAL BLOCKS
// (4), PROVISIONING STATUS (byte 12, low four bits), reserved.
const (
	lbaStatusHeaderLen     = 8
	lbaStatusDescriptorLen = 16
	// lbaStatusMaxDescriptors bounds one answer: the initiator asks again from where it
	// stopped, and the scan of a long alternation of holes and data stays short.
	lbaStatusMaxDescriptors = 64
)

// Provisioning status values of an LBA status descriptor (SBC-3 table 41).
const (
	provisioningMapped      = 0x0
	provisioningDeallocated = 0x1
)

// getLBAStatus reports, from the STARTING LOGICAL BLOCK ADDRESS on, runs of blocks that are
// mapped or deallocated: as many descriptors as the allocation length holds (at least the one
// SBC-3 requires, for the starting LBA; at most lbaStatusMaxDescriptors), each run as long as
// the backstore knows it to be and at most FFFFFFFFh blocks, the largest NUMBER OF LOGICAL
// BLOCKS. PARAMETER DATA LENGTH describes the descriptors returned.
//
// The answer comes from the backstore's map (backstore.Mapper): holes of a file, chunks of the
// memory store. A logical unit without logical block provisioning management is fully
// provisioned, so every block is mapped, whatever its file looks like; so is every block of a
// store that keeps no map (a block device).
func getLBAStatus(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageGetLBAStatus)) {
		return
	}
	lba := binary.BigEndian.Uint64(c.CDB[2:10])
	alloc := int(binary.BigEndian.Uint32(c.CDB[10:14]))
	blocks := lu.Blocks()
	if lba >= blocks {
		c.fail(ReasonLBAOutOfRange)
		return
	}
	var mapper backstore.Mapper
	if lu.supportsUnmap() {
		mapper, _ = lu.bs.(backstore.Mapper)
	}
	want := min(max((alloc-lbaStatusHeaderLen)/lbaStatusDescriptorLen, 1), lbaStatusMaxDescriptors)
	var buf [lbaStatusHeaderLen + lbaStatusMaxDescriptors*lbaStatusDescriptorLen]byte
	n := 0
	for n < want && lba < blocks {
		run := min(blocks-lba, 0xFFFFFFFF)
		mapped := true
		if mapper != nil {
			m, end, err := mapper.Mapping(lu.byteOffset(lba), int64(lu.blockBytes(run)))
			if err != nil {
				c.ioError(err, true, lba)
				return
			}
			mapped, run = m, uint64(end-lu.byteOffset(lba))>>lu.blockShift
		}
		d := buf[lbaStatusHeaderLen+n*lbaStatusDescriptorLen:]
		binary.BigEndian.PutUint64(d[0:], lba)
		binary.BigEndian.PutUint32(d[8:], uint32(run))
		d[12] = provisioningMapped
		if !mapped {
			d[12] = provisioningDeallocated
		}
		lba += run
		n++
	}
	size := lbaStatusHeaderLen + n*lbaStatusDescriptorLen
	binary.BigEndian.PutUint32(buf[0:], uint32(size-4))
	c.putDataIn(buf[:size], alloc)
}
