package scsi

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// SBC-3 operation codes handled in this package.
const (
	opRead6              = 0x08
	opWrite6             = 0x0A
	opStartStopUnit      = 0x1B
	opRead10             = 0x28
	opWrite10            = 0x2A
	opWriteAndVerify10   = 0x2E
	opVerify10           = 0x2F
	opPreFetch10         = 0x34
	opSynchronizeCache   = 0x35
	opReadDefectData10   = 0x37
	opWriteSame10        = 0x41
	opUnmap              = 0x42
	opRead16             = 0x88
	opCompareAndWrite    = 0x89
	opWrite16            = 0x8A
	opWriteAndVerify16   = 0x8E
	opVerify16           = 0x8F
	opPreFetch16         = 0x90
	opSynchronizeCache16 = 0x91
	opWriteSame16        = 0x93
	opRead12             = 0xA8
	opWrite12            = 0xAA
	opWriteAndVerify12   = 0xAE
	opVerify12           = 0xAF
	opReadDefectData12   = 0xB7
)

// sbcCommands are the block commands (SBC-3) of a direct-access logical unit.
//
// The CDB USAGE DATA marks every field the device server acts on or checks for a value it does not
// support (RDPROTECT, ANCHOR...), and the GROUP NUMBER, which it accepts and ignores. Bits that are
// reserved, and obsolete bits that are ignored (FUA_NV, SYNC_NV, RELADR: the ignored lists below),
// read as zero; the handlers refuse every other bit the usage data leaves out, which
// TestCDBReservedBits checks bit by bit. The CONTROL byte reads 07h everywhere (NACA, and the
// obsolete FLAG and LINK), as in spcCommands.
var sbcCommands = []opInfo{
	rw6Op("READ(6)", opRead6, opPRReads|opUntracked, readCDB),
	blockOp("READ(10)", opRead10, 0xF8, opPRReads|opUntracked, ignoredReadWrite, readCDB),
	blockOp("READ(12)", opRead12, 0xF8, opPRReads|opUntracked, ignoredReadWrite, readCDB),
	blockOp("READ(16)", opRead16, 0xF8, opPRReads|opUntracked, ignoredReadWrite16, readCDB),
	rw6Op("WRITE(6)", opWrite6, opWritesMedium|opUntracked, writeCDB),
	blockOp("WRITE(10)", opWrite10, 0xF8, opWritesMedium|opUntracked, ignoredReadWrite, writeCDB),
	blockOp("WRITE(12)", opWrite12, 0xF8, opWritesMedium|opUntracked, ignoredReadWrite, writeCDB),
	blockOp("WRITE(16)", opWrite16, 0xF8, opWritesMedium|opUntracked, ignoredReadWrite16, writeCDB),
	blockOp("WRITE AND VERIFY(10)", opWriteAndVerify10, 0xF2, opWritesMedium, ignoredVerify, writeAndVerify10),
	blockOp("WRITE AND VERIFY(12)", opWriteAndVerify12, 0xF2, opWritesMedium, ignoredVerify, writeAndVerify12),
	blockOp("WRITE AND VERIFY(16)", opWriteAndVerify16, 0xF2, opWritesMedium, nil, writeAndVerify16),
	blockOp("VERIFY(10)", opVerify10, 0xF6, opPRReads, ignoredVerify, verify10),
	blockOp("VERIFY(12)", opVerify12, 0xF6, opPRReads, ignoredVerify, verify12),
	blockOp("VERIFY(16)", opVerify16, 0xF6, opPRReads, nil, verify16),
	blockOp("SYNCHRONIZE CACHE(10)", opSynchronizeCache, 0x02, 0, ignoredSynchronizeCache10, synchronizeCache10),
	blockOp("SYNCHRONIZE CACHE(16)", opSynchronizeCache16, 0x02, 0, ignoredSynchronizeCache16, synchronizeCache16),
	{name: "UNMAP", opcode: opUnmap, cdbLength: 10,
		usage: []byte{opUnmap, 0x01, 0x00, 0x00, 0x00, 0x00, 0x3F, 0xFF, 0xFF, 0x07},
		flags: opWritesMedium, run: unmap},
	blockOp("WRITE SAME(10)", opWriteSame10, 0xFE, opWritesMedium, ignoredWriteSame10, writeSame10),
	blockOp("WRITE SAME(16)", opWriteSame16, 0xFF, opWritesMedium, nil, writeSame16),
	{name: "COMPARE AND WRITE", opcode: opCompareAndWrite, cdbLength: 16,
		usage: []byte{opCompareAndWrite, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0xFF, 0x3F, 0x07},
		flags: opWritesMedium, ignored: ignoredCompareAndWrite, run: compareAndWrite},
	{name: "START STOP UNIT", opcode: opStartStopUnit, cdbLength: 6,
		usage: []byte{opStartStopUnit, 0x01, 0x00, 0x0F, 0xF7, 0x07},
		flags: opPRByCDB, run: startStopUnit},
	// PRE-FETCH, READ DEFECT DATA and GET LBA STATUS read what the medium holds or how it is
	// laid out: under a persistent reservation they are treated as reads (opPRReads), a
	// non-holder may run them under write exclusive and not under exclusive access.
	{name: "PRE-FETCH(10)", opcode: opPreFetch10, cdbLength: 10,
		usage: usagePreFetch10, flags: opPRReads, run: preFetch10},
	{name: "PRE-FETCH(16)", opcode: opPreFetch16, cdbLength: 16,
		usage: usagePreFetch16, flags: opPRReads, run: preFetch16},
	{name: "READ DEFECT DATA(10)", opcode: opReadDefectData10, cdbLength: 10,
		usage: usageReadDefectData10, flags: opPRReads, run: readDefectData10},
	{name: "READ DEFECT DATA(12)", opcode: opReadDefectData12, cdbLength: 12,
		usage: usageReadDefectData12, flags: opPRReads, run: readDefectData12},
	{name: "GET LBA STATUS", opcode: opServiceActionIn16, serviceAction: saGetLBAStatus, hasSA: true,
		cdbLength: 16, usage: usageGetLBAStatus, flags: opPRReads, run: getLBAStatus},
}

// rw6Op describes READ(6) or WRITE(6): byte 1 bits 4:0 and bytes 2-3 are the LOGICAL BLOCK
// ADDRESS, byte 4 the TRANSFER LENGTH (decode6).
func rw6Op(name string, opcode byte, flags opFlags, run handler) opInfo {
	return opInfo{name: name, opcode: opcode, cdbLength: 6, usage: []byte{opcode, 0x1F, 0xFF, 0xFF, 0xFF, 0x07},
		flags: flags, run: run}
}

// blockOp describes a block command whose 10-, 12- or 16-byte CDB is laid out as READ's: byte 1
// (whose evaluated bits byte1 marks), the LOGICAL BLOCK ADDRESS, the length and the GROUP NUMBER
// (blockUsage).
func blockOp(name string, opcode, byte1 byte, flags opFlags, ignored []cdbField, run handler) opInfo {
	n := cdbLengthOf(opcode)
	return opInfo{name: name, opcode: opcode, cdbLength: n, usage: blockUsage(opcode, byte1, n),
		ignored: ignored, flags: flags, run: run}
}

// blockUsage is the CDB usage data of a block CDB laid out as READ(10/12/16): byte1 for byte 1,
// every bit of the LOGICAL BLOCK ADDRESS and of the length, the six bits of the GROUP NUMBER
// (groupReserved are reserved) and 07h for the CONTROL byte.
func blockUsage(opcode, byte1 byte, cdbLength int) []byte {
	u := bytes.Repeat([]byte{0xFF}, cdbLength)
	u[0], u[1] = opcode, byte1
	switch cdbLength {
	case 10:
		u[cdb10GroupOff] = ^byte(groupReserved)
	case 12:
		u[cdb12GroupOff] = ^byte(groupReserved)
	default:
		u[cdb16GroupOff] = ^byte(groupReserved)
	}
	u[cdbLength-1] = controlNACA | 0x03 // NACA, FLAG, LINK
	return u
}

// The obsolete bits of byte 1 that the block commands ignore (opInfo.ignored); every other bit
// their CDB usage data leaves out is refused. Section numbers are SBC-4's.
var (
	// READ(10) and READ(12) (5.13, 5.14), WRITE(10) and WRITE(12) (5.37, 5.38): bits 1
	// (FUA_NV of SBC-3) and 0 (RELADR of SBC-1) are obsolete.
	ignoredReadWrite = []cdbField{{1, 0x03}}
	// READ(16) and WRITE(16) (5.15, 5.39): bit 1 is obsolete; bit 0 is DLD2 (refused).
	ignoredReadWrite16 = []cdbField{{1, 0x02}}
	// VERIFY(10) and VERIFY(12) (5.33, 5.34), WRITE AND VERIFY(10) and WRITE AND VERIFY(12)
	// (5.41, 5.42): bit 0 is obsolete. It is reserved, and refused, in the 16-byte CDBs.
	ignoredVerify = []cdbField{{1, 0x01}}
	// SYNCHRONIZE CACHE(10) (5.30): bits 2 (SYNC_NV) and 0 are obsolete.
	ignoredSynchronizeCache10 = []cdbField{{1, 0x05}}
	// SYNCHRONIZE CACHE(16) (5.31): bit 2 (SYNC_NV) is obsolete; bit 0 is reserved (refused).
	ignoredSynchronizeCache16 = []cdbField{{1, 0x04}}
	// WRITE SAME(10) (5.49): bit 0 is obsolete. The obsolete PBDATA and LBDATA are refused,
	// since an initiator that sets them asks for block contents this device server does not
	// write; the usage data marks them.
	ignoredWriteSame10 = []cdbField{{1, 0x01}}
	// COMPARE AND WRITE (5.3): FUA_NV (bit 1) asks to bypass a non-volatile cache, of which
	// there is none besides the backstore, which FUA already reaches.
	ignoredCompareAndWrite = []cdbField{{1, 0x02}}
)

// Bits of byte 1 shared by the READ, WRITE, VERIFY and COMPARE AND WRITE CDBs (SBC-3).
const (
	cdbProtectMask = 0xE0 // RDPROTECT, WRPROTECT, VRPROTECT
	cdbDPO         = 0x10
	cdbFUA         = 0x08
)

// Field offsets of the 10-, 12- and 16-byte block CDBs: LOGICAL BLOCK ADDRESS at byte 2 (4 or 8
// bytes), then the TRANSFER LENGTH (or VERIFICATION LENGTH, NUMBER OF LOGICAL BLOCKS) and the
// GROUP NUMBER byte.
const (
	cdb10LengthOff = 7
	cdb10GroupOff  = 6
	cdb12LengthOff = 6
	cdb12GroupOff  = 10
	cdb16LengthOff = 10
	cdb16GroupOff  = 14
)

// groupReserved are the bits of the GROUP NUMBER byte above the six-bit group number of SBC-4
// (SBC-3 had five bits; Linux always sends zero). None of them is defined for the commands this
// package supports: the command duration limit bits of READ(16)/WRITE(16) are only sent to a
// device that reports support for them.
const groupReserved = 0xC0

// cdbField names bits of one byte of a CDB: a field that must be zero (a reserved field, one
// reserved bit or a run of them, or a field whose only supported value is zero, as RDPROTECT with
// no protection information), or obsolete bits the device server ignores (opInfo.ignored).
type cdbField struct {
	off  int  // byte of the CDB
	mask byte // the bits of the field
}

// check returns INVALID FIELD IN CDB when the field is not zero in cdb, with the bit pointer on
// its first, left-most, bit as SPC-4 4.5.2.4.2 asks for a field in error; the zero fault when it
// is zero.
func (z cdbField) checkZero(cdb []byte) fault {
	if cdb[z.off]&z.mask == 0 {
		return 0
	}
	return cdbFieldFault(z.off, bits.Len8(z.mask)-1)
}

// checkZeroFields returns the fault of the first of fields that is not zero in cdb, in the
// order given, or the zero fault.
func checkZeroFields(cdb []byte, fields []cdbField) fault {
	for _, z := range fields {
		if f := z.checkZero(cdb); f != 0 {
			return f
		}
	}
	return 0
}

// byte1Fields are the fields of byte 1 that must be zero in the 10- and 12-byte CDBs of a command
// (short) and in its 16-byte CDB (long), where bit 0 is reserved rather than obsolete.
type byte1Fields struct {
	short, long []cdbField
	// shortMask and longMask are all the bits of short and long: one test on the I/O path
	// when they are all zero, the list walked only to say which field is not.
	shortMask, longMask byte
}

// newByte1Fields makes the byte1Fields of short and long (all on byte 1).
func newByte1Fields(short, long []cdbField) *byte1Fields {
	b := &byte1Fields{short: short, long: long}
	for _, z := range short {
		b.shortMask |= z.mask
	}
	for _, z := range long {
		b.longMask |= z.mask
	}
	return b
}

// check checks cdb against the list for its length.
func (b *byte1Fields) check(cdb []byte) fault {
	fields, mask := b.short, b.shortMask
	if cdbLengthOf(cdb[0]) == 16 {
		fields, mask = b.long, b.longMask
	}
	if cdb[1]&mask == 0 {
		return 0
	}
	return checkZeroFields(cdb, fields)
}

// blockCDB is the part of a 10-, 12- or 16-byte block CDB that all of them share.
type blockCDB struct {
	lba       uint64
	blocks    uint32
	lengthOff int // where the TRANSFER LENGTH field starts, for the field pointer
}

// decodeBlockCDB reads the LBA and the transfer length of a 10-, 12- or 16-byte block CDB and
// checks the reserved bits of its GROUP NUMBER byte.
func decodeBlockCDB(cdb []byte) (b blockCDB, f fault) {
	var groupOff int
	switch cdbLengthOf(cdb[0]) {
	case 10:
		b.lba = uint64(binary.BigEndian.Uint32(cdb[2:]))
		b.blocks = uint32(binary.BigEndian.Uint16(cdb[cdb10LengthOff:]))
		b.lengthOff, groupOff = cdb10LengthOff, cdb10GroupOff
	case 12:
		b.lba = uint64(binary.BigEndian.Uint32(cdb[2:]))
		b.blocks = binary.BigEndian.Uint32(cdb[cdb12LengthOff:])
		b.lengthOff, groupOff = cdb12LengthOff, cdb12GroupOff
	default:
		b.lba = binary.BigEndian.Uint64(cdb[2:])
		b.blocks = binary.BigEndian.Uint32(cdb[cdb16LengthOff:])
		b.lengthOff, groupOff = cdb16LengthOff, cdb16GroupOff
	}
	return b, cdbField{groupOff, groupReserved}.checkZero(cdb)
}

// cdbLengthOf is the CDB length that the group code of an operation code implies (SPC-4 4.2.5.1);
// the block commands of this file use groups 0 (6 bytes), 1 and 2 (10), 4 (16) and 5 (12).
func cdbLengthOf(opcode byte) int {
	switch opcode >> 5 {
	case 0:
		return 6
	case 1, 2:
		return 10
	case 4:
		return 16
	case 5:
		return 12
	}
	return 0
}

// lbaInRange reports whether the n blocks from lba lie inside the medium. An LBA past the last
// one is out of range even when n is zero: SBC-3 checks the LOGICAL BLOCK ADDRESS field on its
// own and then the LBA plus the length.
func (lu *LogicalUnit) lbaInRange(lba, n uint64) bool {
	blocks := lu.Blocks()
	return lba < blocks && n <= blocks-lba
}

// byteOffset is the backstore offset of lba; lba has passed lbaInRange.
func (lu *LogicalUnit) byteOffset(lba uint64) int64 { return int64(lba << lu.blockShift) }

// blockBytes is n blocks in bytes; n is at most 2^32, so it cannot overflow.
func (lu *LogicalUnit) blockBytes(n uint64) uint64 { return n << lu.blockShift }

// transferTooLong reports whether moving n bytes breaks the MAXIMUM TRANSFER LENGTH that VPD page
// 0xB0 advertises (Config.MaxTransferBytes).
func (lu *LogicalUnit) transferTooLong(n uint64) bool {
	m := lu.cfg.MaxTransferBytes
	return m != 0 && n > uint64(m)
}

// writeFUA is the fua argument of a backstore write: the CDB's FUA bit, or always when the write
// cache is disabled (WCE=0: every write completes on stable storage).
func (lu *LogicalUnit) writeFUA(fuaBit bool) bool {
	return fuaBit || !lu.writeCacheEnabled()
}

// clampInt converts a byte count to int for TransferLength without wrapping on 32-bit platforms.
func clampInt(n uint64) int {
	const maxInt = int(^uint(0) >> 1)
	if n > uint64(maxInt) {
		return maxInt
	}
	return int(n)
}
