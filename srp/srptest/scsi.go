package srptest

import (
	"context"
	"encoding/binary"
	"fmt"
)

// SCSI operation codes of the helpers (SPC-4, SBC-3).
const (
	opTestUnitReady   = 0x00
	opInquiry         = 0x12
	opRead10          = 0x28
	opWrite10         = 0x2A
	opRead16          = 0x88
	opWrite16         = 0x8A
	opServiceActionIn = 0x9E
	saReadCapacity16  = 0x10
)

// CDBTestUnitReady builds TEST UNIT READY.
func CDBTestUnitReady() []byte { return make([]byte, 6) }

// CDBInquiry builds INQUIRY: standard data (evpd false, page 0) or a VPD page.
func CDBInquiry(evpd bool, page uint8, allocLen uint16) []byte {
	b := []byte{opInquiry, 0, page, 0, 0, 0}
	if evpd {
		b[1] = 0x01
	}
	binary.BigEndian.PutUint16(b[3:], allocLen)
	return b
}

// CDBRead10 builds READ(10).
func CDBRead10(lba uint32, blocks uint16) []byte {
	return blockCDB(opRead10, uint64(lba), uint32(blocks))
}

// CDBWrite10 builds WRITE(10).
func CDBWrite10(lba uint32, blocks uint16) []byte {
	return blockCDB(opWrite10, uint64(lba), uint32(blocks))
}

// CDBRead16 builds READ(16).
func CDBRead16(lba uint64, blocks uint32) []byte { return blockCDB(opRead16, lba, blocks) }

// CDBWrite16 builds WRITE(16).
func CDBWrite16(lba uint64, blocks uint32) []byte { return blockCDB(opWrite16, lba, blocks) }

// blockCDB builds the READ or WRITE op, of 10 bytes (op READ(10) or WRITE(10), whose LBA and
// length the callers' types keep to 32 and 16 bits) or else of 16 bytes.
func blockCDB(op byte, lba uint64, blocks uint32) []byte {
	if op == opRead10 || op == opWrite10 {
		b := make([]byte, 10)
		b[0] = op
		binary.BigEndian.PutUint32(b[2:], uint32(lba))
		binary.BigEndian.PutUint16(b[7:], uint16(blocks))
		return b
	}
	b := make([]byte, 16)
	b[0] = op
	binary.BigEndian.PutUint64(b[2:], lba)
	binary.BigEndian.PutUint32(b[10:], blocks)
	return b
}

// CDBReadCapacity16 builds READ CAPACITY(16) (SERVICE ACTION IN(16), service action 0x10).
func CDBReadCapacity16(allocLen uint32) []byte {
	b := make([]byte, 16)
	b[0] = opServiceActionIn
	b[1] = saReadCapacity16
	binary.BigEndian.PutUint32(b[10:], allocLen)
	return b
}

// TestUnitReady sends TEST UNIT READY.
func (c *Channel) TestUnitReady(ctx context.Context, lun uint16) (*Response, error) {
	return c.Do(ctx, &Request{LUN: lun, CDB: CDBTestUnitReady()})
}

// Inquiry sends INQUIRY with a data-in buffer of allocLen bytes.
func (c *Channel) Inquiry(ctx context.Context, lun uint16, evpd bool, page uint8, allocLen uint16) (*Response, error) {
	return c.Do(ctx, &Request{LUN: lun, CDB: CDBInquiry(evpd, page, allocLen), DataInLen: int(allocLen)})
}

// ReadCapacity16 sends READ CAPACITY(16) with a 32-byte buffer and decodes the last LBA and
// the logical block length when the status is GOOD.
func (c *Channel) ReadCapacity16(ctx context.Context, lun uint16) (lastLBA uint64, blockSize uint32, rsp *Response, err error) {
	rsp, err = c.Do(ctx, &Request{LUN: lun, CDB: CDBReadCapacity16(32), DataInLen: 32})
	if err != nil || !rsp.Good() {
		return 0, 0, rsp, err
	}
	if len(rsp.DataIn) < 12 {
		return 0, 0, rsp, fmt.Errorf("srptest: READ CAPACITY(16) returned %d bytes: %w", len(rsp.DataIn), ErrProtocol)
	}
	return binary.BigEndian.Uint64(rsp.DataIn), binary.BigEndian.Uint32(rsp.DataIn[8:]), rsp, nil
}

// Read10 reads blocks blocks of blockSize bytes from lba with READ(10).
func (c *Channel) Read10(ctx context.Context, lun uint16, lba uint32, blocks uint16, blockSize int) (*Response, error) {
	return c.Do(ctx, &Request{LUN: lun, CDB: CDBRead10(lba, blocks), DataInLen: int(blocks) * blockSize})
}

// Write10 writes data (a whole number of blocks of blockSize bytes) at lba with WRITE(10).
func (c *Channel) Write10(ctx context.Context, lun uint16, lba uint32, data []byte, blockSize int) (*Response, error) {
	return c.write(ctx, lun, opWrite10, uint64(lba), data, blockSize, 0xFFFF)
}

// Read16 reads blocks blocks of blockSize bytes from lba with READ(16).
func (c *Channel) Read16(ctx context.Context, lun uint16, lba uint64, blocks uint32, blockSize int) (*Response, error) {
	return c.Do(ctx, &Request{LUN: lun, CDB: CDBRead16(lba, blocks), DataInLen: int(blocks) * blockSize})
}

// Write16 writes data (a whole number of blocks of blockSize bytes) at lba with WRITE(16).
func (c *Channel) Write16(ctx context.Context, lun uint16, lba uint64, data []byte, blockSize int) (*Response, error) {
	return c.write(ctx, lun, opWrite16, lba, data, blockSize, 0xFFFFFFFF)
}

// write sends the WRITE op of data, which must be a whole number of at most maxBlocks blocks.
func (c *Channel) write(ctx context.Context, lun uint16, op byte, lba uint64, data []byte, blockSize int, maxBlocks uint64) (*Response, error) {
	if blockSize <= 0 || len(data)%blockSize != 0 || uint64(len(data)/blockSize) > maxBlocks {
		return nil, fmt.Errorf("srptest: %d bytes are not a whole number of at most %d blocks of %d bytes: %w",
			len(data), maxBlocks, blockSize, ErrConfig)
	}
	return c.Do(ctx, &Request{LUN: lun, CDB: blockCDB(op, lba, uint32(len(data)/blockSize)), DataOut: data})
}
