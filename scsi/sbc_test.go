package scsi

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// This file holds the helpers the SBC tests share (expected sense data written out by hand, test
// backstores) and the tests of the commands that have no file of their own: VERIFY, SYNCHRONIZE
// CACHE, START STOP UNIT, and the CDB field checks of every block command.

// senseWant is the fixed-format sense data a test expects, with the numbers from SPC-4 Annex D
// written out rather than taken from the package's reason table.
type senseWant struct {
	key, asc, ascq byte
	// fp is the SENSE KEY SPECIFIC field pointer, -1 when SKSV must be 0; bit is the bit pointer,
	// -1 when BPV must be 0; cd is the C/D bit (the pointer is into the CDB).
	fp, bit int
	cd      bool
	// info, when hasInfo, is the INFORMATION field, which must then be valid.
	info    uint64
	hasInfo bool
}

func invalidCDB(fp, bit int) senseWant { return senseWant{0x5, 0x24, 0x00, fp, bit, true, 0, false} }
func invalidParam(fp, bit int) senseWant {
	return senseWant{0x5, 0x26, 0x00, fp, bit, false, 0, false}
}

var (
	lbaOutOfRange    = senseWant{0x5, 0x21, 0x00, -1, -1, false, 0, false}
	invalidIU        = senseWant{0x5, 0x0E, 0x03, -1, -1, false, 0, false}
	paramListLength  = senseWant{0x5, 0x1A, 0x00, -1, -1, false, 0, false}
	invalidOpcode    = senseWant{0x5, 0x20, 0x00, -1, -1, false, 0, false}
	writeProtected   = senseWant{0x7, 0x27, 0x00, -1, -1, false, 0, false}
	writeErrorNoInfo = senseWant{0x3, 0x0C, 0x00, -1, -1, false, 0, false}
)

func miscompareAt(off uint64) senseWant { return senseWant{0xE, 0x1D, 0x00, -1, -1, false, off, true} }
func readErrorAt(lba uint64) senseWant  { return senseWant{0x3, 0x11, 0x00, -1, -1, false, lba, true} }
func writeErrorAt(lba uint64) senseWant { return senseWant{0x3, 0x0C, 0x00, -1, -1, false, lba, true} }
func spaceAllocationFailedAt(lba uint64) senseWant {
	return senseWant{0x7, 0x27, 0x07, -1, -1, false, lba, true}
}

// checkSense checks that c ended in CHECK CONDITION with the fixed-format sense data w describes,
// byte by byte (SPC-4 4.5.3: response code 70h, key in byte 2, INFORMATION in bytes 3-6 with
// VALID, additional length 10, ASC/ASCQ in bytes 12-13, SKSV/C-D/BPV/bit pointer and the field
// pointer in bytes 15-17).
func checkSense(t testing.TB, c *Command, w senseWant) {
	t.Helper()
	require.Equal(t, StatusCheckCondition, c.Status, "status")
	s := c.SenseData()
	require.Len(t, s, 18, "fixed format sense % x", s)
	require.Equal(t, byte(0x70), s[0]&0x7F, "response code")
	require.Equal(t, byte(10), s[7], "additional sense length")
	require.Equal(t, []byte{w.key, w.asc, w.ascq}, []byte{s[2] & 0x0F, s[12], s[13]},
		"sense key, ASC, ASCQ (sense % x)", s)
	if w.hasInfo {
		require.Equal(t, byte(0x80), s[0]&0x80, "VALID")
		require.Equal(t, w.info, uint64(binary.BigEndian.Uint32(s[3:7])), "INFORMATION")
	} else {
		require.Zero(t, s[0]&0x80, "VALID")
	}
	if w.fp < 0 {
		require.Zero(t, s[15]&0x80, "SKSV (sense % x)", s)
		return
	}
	sks := byte(0x80)
	if w.cd {
		sks |= 0x40
	}
	if w.bit >= 0 {
		sks |= 0x08 | byte(w.bit)
	}
	require.Equal(t, []byte{sks, byte(w.fp >> 8), byte(w.fp)}, s[15:18], "sense key specific (sense % x)", s)
}

// checkGood checks that c completed with GOOD status.
func checkGood(t testing.TB, c *Command) {
	t.Helper()
	require.Equal(t, StatusGood, c.Status, "status (sense % x)", c.SenseData())
	require.Zero(t, c.SenseLength)
}

// newLUOver makes a logical unit over bs with the write cache on; mod may change the
// configuration. It returns the logical unit and a map with it at LUN 0, whose power-on unit
// attention testNexus and otherNexus have consumed.
func newLUOver(t testing.TB, bs backstore.Backstore, mod func(*Config)) (*LogicalUnit, *LUNMap) {
	t.Helper()
	lu := openLU(t, Config{Backstore: bs, Serial: "a1b2c3d4-0002", WriteCache: true}, mod)
	m := newTestMap(t, lu)
	clearPowerOnUA(t, m, testNexus)
	clearPowerOnUA(t, m, otherNexus)
	return lu, m
}

// newMemLU makes a logical unit over a memory backstore of blocks × blockSize bytes (see
// newLUOver) and returns the backstore too.
func newMemLU(t testing.TB, blocks int64, blockSize uint32, mod func(*Config)) (*LogicalUnit, *LUNMap, *backstore.Memory) {
	t.Helper()
	mem, err := backstore.NewMemory(blocks*int64(blockSize), blockSize)
	require.NoError(t, err)
	lu, m := newLUOver(t, mem, mod)
	return lu, m, mem
}

// exec runs cdb on LUN 0 of m from testNexus.
func exec(m *LUNMap, cdb []byte, dataOut []byte, inLen int) *Command {
	return run(m, testNexus, 0, cdb, dataOut, inLen)
}

// fill returns n bytes of b.
func fill(n int, b byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = b
	}
	return p
}

// readMedium reads length bytes at off straight from the backstore.
func readMedium(t testing.TB, bs backstore.Backstore, off int64, length int) []byte {
	t.Helper()
	p := make([]byte, length)
	require.NoError(t, bs.ReadAt(p, off))
	return p
}

// writeMedium writes p at off straight to the backstore.
func writeMedium(t testing.TB, bs backstore.Backstore, off int64, p []byte) {
	t.Helper()
	require.NoError(t, bs.WriteAt(p, off, false))
}

// cdb10 builds a 10-byte block CDB: byte 1, a 4-byte LBA, the group byte, a 2-byte length.
func cdb10(op, b1 byte, lba uint32, n uint16) []byte {
	c := []byte{op, b1, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], n)
	return c
}

// cdb12 builds a 12-byte block CDB.
func cdb12(op, b1 byte, lba uint32, n uint32) []byte {
	c := make([]byte, 12)
	c[0], c[1] = op, b1
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint32(c[6:], n)
	return c
}

// cdb16 builds a 16-byte block CDB: byte 1, an 8-byte LBA, a 4-byte length, the group byte.
func cdb16(op, b1 byte, lba uint64, n uint32) []byte {
	c := make([]byte, 16)
	c[0], c[1] = op, b1
	binary.BigEndian.PutUint64(c[2:], lba)
	binary.BigEndian.PutUint32(c[10:], n)
	return c
}

// ioRecord is one call a recordingStore saw.
type ioRecord struct {
	op       string // "read", "write", "atomic", "flush", "unmap", "zeroes"
	off, len int64
	fua      bool
}

// recordingStore wraps a backstore and records every call, so that tests can see what reached
// the store (FUA, write-through, unmap versus zeroing, nothing at all).
type recordingStore struct {
	backstore.Backstore
	mu  sync.Mutex
	ops []ioRecord
}

func (r *recordingStore) add(rec ioRecord) {
	r.mu.Lock()
	r.ops = append(r.ops, rec)
	r.mu.Unlock()
}

func (r *recordingStore) ReadAt(p []byte, off int64) error {
	r.add(ioRecord{op: "read", off: off, len: int64(len(p))})
	return r.Backstore.ReadAt(p, off)
}

func (r *recordingStore) WriteAt(p []byte, off int64, fua bool) error {
	r.add(ioRecord{op: "write", off: off, len: int64(len(p)), fua: fua})
	return r.Backstore.WriteAt(p, off, fua)
}

// AtomicLimits and WriteAtomicAt forward the wrapped store's atomic writes, if it makes any.
func (r *recordingStore) AtomicLimits() backstore.AtomicLimits {
	if aw, ok := r.Backstore.(backstore.AtomicWriter); ok {
		return aw.AtomicLimits()
	}
	return backstore.AtomicLimits{}
}

func (r *recordingStore) WriteAtomicAt(p []byte, off int64, fua bool) error {
	r.add(ioRecord{op: "atomic", off: off, len: int64(len(p)), fua: fua})
	return r.Backstore.(backstore.AtomicWriter).WriteAtomicAt(p, off, fua)
}

func (r *recordingStore) Flush() error {
	r.add(ioRecord{op: "flush"})
	return r.Backstore.Flush()
}

func (r *recordingStore) Unmap(off, length int64) error {
	r.add(ioRecord{op: "unmap", off: off, len: length})
	return r.Backstore.Unmap(off, length)
}

func (r *recordingStore) WriteZeroes(off, length int64) error {
	r.add(ioRecord{op: "zeroes", off: off, len: length})
	return r.Backstore.WriteZeroes(off, length)
}

// take returns the calls recorded so far and forgets them.
func (r *recordingStore) take() []ioRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	return ops
}

// newRecordingLU makes a logical unit over a recording memory backstore.
func newRecordingLU(t testing.TB, blocks int64, blockSize uint32, mod func(*Config)) (*LogicalUnit, *LUNMap, *recordingStore) {
	t.Helper()
	mem, err := backstore.NewMemory(blocks*int64(blockSize), blockSize)
	require.NoError(t, err)
	rec := &recordingStore{Backstore: mem}
	lu, m := newLUOver(t, rec, mod)
	rec.take() // the TEST UNIT READYs of newLUOver touch nothing, but start clean anyway
	return lu, m, rec
}

// TestSBCCDBFieldChecks sends every block command with one bad field at a time and checks the
// exact sense data: INVALID FIELD IN CDB pointing at the field (byte and first bit), and that
// nothing reached the backstore. The logical unit has 1024 blocks of 512 bytes and thin
// provisioning.
func TestSBCCDBFieldChecks(t *testing.T) {
	blk := make([]byte, 512)
	tests := []struct {
		name    string
		cdb     []byte
		dataOut []byte
		want    senseWant
	}{
		// READ(6)/WRITE(6): byte 1 bits 7:5 reserved.
		{"READ(6) reserved byte 1", []byte{0x08, 0x20, 0x00, 0x00, 0x01, 0x00}, nil, invalidCDB(1, 7)},
		{"WRITE(6) reserved byte 1", []byte{0x0A, 0x80, 0x00, 0x00, 0x01, 0x00}, blk, invalidCDB(1, 7)},

		// READ/WRITE(10/12/16): protection field, reserved bit 2, reserved group bits.
		{"READ(10) RDPROTECT 001b", []byte{0x28, 0x20, 0, 0, 0, 0, 0, 0, 1, 0}, nil, invalidCDB(1, 7)},
		{"READ(10) RDPROTECT 010b", []byte{0x28, 0x40, 0, 0, 0, 0, 0, 0, 1, 0}, nil, invalidCDB(1, 7)},
		{"READ(10) reserved bit 2", []byte{0x28, 0x04, 0, 0, 0, 0, 0, 0, 1, 0}, nil, invalidCDB(1, 2)},
		{"READ(10) group reserved", []byte{0x28, 0x00, 0, 0, 0, 0, 0x40, 0, 1, 0}, nil, invalidCDB(6, 7)},
		{"READ(12) RDPROTECT", []byte{0xA8, 0xE0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, nil, invalidCDB(1, 7)},
		{"READ(12) group reserved", []byte{0xA8, 0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0}, nil, invalidCDB(10, 7)},
		{"READ(16) RDPROTECT", []byte{0x88, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, nil, invalidCDB(1, 7)},
		{"READ(16) reserved bit 2", []byte{0x88, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, nil, invalidCDB(1, 2)},
		{"READ(16) group reserved", []byte{0x88, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xC0, 0}, nil, invalidCDB(14, 7)},
		{"WRITE(10) WRPROTECT", []byte{0x2A, 0x20, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 7)},
		{"WRITE(10) reserved bit 2", []byte{0x2A, 0x04, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 2)},
		{"WRITE(12) WRPROTECT", []byte{0xAA, 0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, blk, invalidCDB(1, 7)},
		{"WRITE(16) WRPROTECT", []byte{0x8A, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, blk, invalidCDB(1, 7)},
		{"WRITE(16) group reserved", []byte{0x8A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x40, 0}, blk, invalidCDB(14, 7)},

		// VERIFY(10/16): VRPROTECT, reserved bit 3, BYTCHK 10b.
		{"VERIFY(10) VRPROTECT", []byte{0x2F, 0x20, 0, 0, 0, 0, 0, 0, 1, 0}, nil, invalidCDB(1, 7)},
		{"VERIFY(10) reserved bit 3", []byte{0x2F, 0x08, 0, 0, 0, 0, 0, 0, 1, 0}, nil, invalidCDB(1, 3)},
		{"VERIFY(10) BYTCHK 10b", []byte{0x2F, 0x04, 0, 0, 0, 0, 0, 0, 1, 0}, nil, invalidCDB(1, 2)},
		{"VERIFY(16) BYTCHK 10b", []byte{0x8F, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, nil, invalidCDB(1, 2)},
		{"VERIFY(16) group reserved", []byte{0x8F, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0}, nil, invalidCDB(14, 7)},

		// WRITE AND VERIFY(10/16): WRPROTECT, reserved bits 3 and 2.
		{"WRITE AND VERIFY(10) WRPROTECT", []byte{0x2E, 0x40, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 7)},
		{"WRITE AND VERIFY(10) bit 3", []byte{0x2E, 0x08, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 3)},
		{"WRITE AND VERIFY(16) bit 2", []byte{0x8E, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, blk, invalidCDB(1, 2)},

		// SYNCHRONIZE CACHE(10/16): byte 1 bits 7:3 reserved, group bits.
		{"SYNCHRONIZE CACHE(10) reserved", []byte{0x35, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}, nil, invalidCDB(1, 7)},
		{"SYNCHRONIZE CACHE(10) group reserved", []byte{0x35, 0x00, 0, 0, 0, 0, 0x80, 0, 0, 0}, nil, invalidCDB(6, 7)},
		{"SYNCHRONIZE CACHE(16) reserved", []byte{0x91, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, invalidCDB(1, 7)},

		// WRITE SAME(10/16): WRPROTECT, ANCHOR, PBDATA, LBDATA (zero blocks: TestWriteSameToTheEnd).
		{"WRITE SAME(10) WRPROTECT", []byte{0x41, 0x20, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 7)},
		{"WRITE SAME(10) ANCHOR", []byte{0x41, 0x10, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 4)},
		{"WRITE SAME(10) PBDATA", []byte{0x41, 0x04, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 2)},
		{"WRITE SAME(10) LBDATA", []byte{0x41, 0x02, 0, 0, 0, 0, 0, 0, 1, 0}, blk, invalidCDB(1, 1)},
		{"WRITE SAME(16) ANCHOR", []byte{0x93, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, blk, invalidCDB(1, 4)},
		{"WRITE SAME(16) group reserved", []byte{0x93, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x40, 0}, blk, invalidCDB(14, 7)},

		// COMPARE AND WRITE: WRPROTECT, reserved bits 2 and 0, reserved bytes 10-12, too long.
		{"COMPARE AND WRITE WRPROTECT", []byte{0x89, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, make([]byte, 1024), invalidCDB(1, 7)},
		{"COMPARE AND WRITE bit 2", []byte{0x89, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, make([]byte, 1024), invalidCDB(1, 2)},
		{"COMPARE AND WRITE bit 0", []byte{0x89, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, make([]byte, 1024), invalidCDB(1, 0)},
		{"COMPARE AND WRITE byte 11", []byte{0x89, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 1, 0, 0}, make([]byte, 1024), invalidCDB(11, 7)},

		// UNMAP: ANCHOR, reserved bits and bytes.
		{"UNMAP ANCHOR", []byte{0x42, 0x01, 0, 0, 0, 0, 0, 0, 24, 0}, make([]byte, 24), invalidCDB(1, 0)},
		{"UNMAP reserved byte 1", []byte{0x42, 0x02, 0, 0, 0, 0, 0, 0, 24, 0}, make([]byte, 24), invalidCDB(1, 7)},
		{"UNMAP reserved byte 4", []byte{0x42, 0x00, 0, 0, 0x10, 0, 0, 0, 24, 0}, make([]byte, 24), invalidCDB(4, 7)},
		{"UNMAP group reserved", []byte{0x42, 0x00, 0, 0, 0, 0, 0x80, 0, 24, 0}, make([]byte, 24), invalidCDB(6, 7)},

		// START STOP UNIT.
		{"START STOP UNIT reserved byte 1", []byte{0x1B, 0x02, 0, 0, 0x01, 0}, nil, invalidCDB(1, 7)},
		{"START STOP UNIT reserved byte 2", []byte{0x1B, 0x00, 0x01, 0, 0x01, 0}, nil, invalidCDB(2, 7)},
		{"START STOP UNIT reserved byte 3", []byte{0x1B, 0x00, 0, 0x10, 0x01, 0}, nil, invalidCDB(3, 7)},
		{"START STOP UNIT POWER CONDITION", []byte{0x1B, 0x00, 0, 0, 0x11, 0}, nil, invalidCDB(4, 7)},
		{"START STOP UNIT POWER CONDITION MODIFIER", []byte{0x1B, 0x00, 0, 0x01, 0x01, 0}, nil, invalidCDB(3, 3)},
		{"START STOP UNIT reserved bit 3", []byte{0x1B, 0x00, 0, 0, 0x09, 0}, nil, invalidCDB(4, 3)},
		{"START STOP UNIT LOEJ", []byte{0x1B, 0x00, 0, 0, 0x02, 0}, nil, invalidCDB(4, 1)},
		{"START STOP UNIT LOEJ START", []byte{0x1B, 0x00, 0, 0, 0x03, 0}, nil, invalidCDB(4, 1)},

		// The framework's NACA check covers the block commands too.
		{"READ(10) NACA", []byte{0x28, 0x00, 0, 0, 0, 0, 0, 0, 1, 0x04}, nil, invalidCDB(9, 2)},
		{"WRITE(16) NACA", []byte{0x8A, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0x04}, blk, invalidCDB(15, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, m, rec := newRecordingLU(t, 1024, 512, func(c *Config) { c.ThinProvisioning = true })
			c := exec(m, tt.cdb, tt.dataOut, 4096)
			checkSense(t, c, tt.want)
			require.Zero(t, c.DataInLength)
			require.Empty(t, rec.take(), "the backstore must not be touched")
		})
	}
}

// TestSBCUsageData checks a few CDB USAGE DATA entries byte by byte against the layouts of SBC-3
// (the framework checks only their length and first byte).
func TestSBCUsageData(t *testing.T) {
	tests := []struct {
		opcode byte
		want   []byte
	}{
		{0x28, []byte{0x28, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F, 0xFF, 0xFF, 0x07}},
		{0x2A, []byte{0x2A, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F, 0xFF, 0xFF, 0x07}},
		{0x88, []byte{0x88, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F, 0x07}},
		{0x08, []byte{0x08, 0x1F, 0xFF, 0xFF, 0xFF, 0x07}},
		{0x35, []byte{0x35, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F, 0xFF, 0xFF, 0x07}},
		{0x42, []byte{0x42, 0x01, 0x00, 0x00, 0x00, 0x00, 0x3F, 0xFF, 0xFF, 0x07}},
		{0x41, []byte{0x41, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F, 0xFF, 0xFF, 0x07}},
		{0x93, []byte{0x93, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x3F, 0x07}},
		{0x89, []byte{0x89, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0xFF, 0x3F, 0x07}},
		{0x1B, []byte{0x1B, 0x01, 0x00, 0x0F, 0xF7, 0x07}},
	}
	for _, tt := range tests {
		op := lookupByOpcode(tt.opcode, 0, false)
		require.NotNil(t, op, "opcode %#02x", tt.opcode)
		require.Equal(t, tt.want, op.usage, op.name)
		require.Equal(t, len(tt.want), op.cdbLength, op.name)
	}
	// Every command that changes the medium is refused on a read-only mapping.
	for _, opcode := range []byte{0x0A, 0x2A, 0xAA, 0x8A, 0x2E, 0x8E, 0x41, 0x93, 0x42, 0x89} {
		require.NotZero(t, lookupByOpcode(opcode, 0, false).flags&opWritesMedium, "opcode %#02x", opcode)
	}
	for _, opcode := range []byte{0x08, 0x28, 0xA8, 0x88, 0x2F, 0x8F, 0x35, 0x91, 0x1B} {
		require.Zero(t, lookupByOpcode(opcode, 0, false).flags&opWritesMedium, "opcode %#02x", opcode)
	}
}

// TestWriteCommandsWriteProtected checks that every command that changes the medium gets DATA
// PROTECT / WRITE PROTECTED on a read-only logical unit and on a read-only mapping, and leaves
// the medium alone, while reads still work.
func TestWriteCommandsWriteProtected(t *testing.T) {
	blk := fill(512, 0xAB)
	cmds := []struct {
		name    string
		cdb     []byte
		dataOut []byte
	}{
		{"WRITE(6)", []byte{0x0A, 0, 0, 1, 1, 0}, blk},
		{"WRITE(10)", cdb10(0x2A, 0, 1, 1), blk},
		{"WRITE(12)", cdb12(0xAA, 0, 1, 1), blk},
		{"WRITE(16)", cdb16(0x8A, 0, 1, 1), blk},
		{"WRITE AND VERIFY(10)", cdb10(0x2E, 0, 1, 1), blk},
		{"WRITE SAME(16)", cdb16(0x93, 0, 1, 1), blk},
		{"COMPARE AND WRITE", []byte{0x89, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}, make([]byte, 1024)},
		{"UNMAP", cdb10(0x42, 0, 0, 24), []byte{0, 22, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}},
	}
	for _, readOnlyMapping := range []bool{false, true} {
		mem, err := backstore.NewMemory(64*512, 512)
		require.NoError(t, err)
		lu, err := NewLogicalUnit(Config{Backstore: mem, Serial: "ro", ReadOnly: !readOnlyMapping, ThinProvisioning: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = lu.Close() })
		m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu, ReadOnly: readOnlyMapping}})
		require.NoError(t, err)
		clearPowerOnUA(t, m, testNexus)
		for _, cmd := range cmds {
			c := exec(m, cmd.cdb, cmd.dataOut, 0)
			checkSense(t, c, writeProtected)
		}
		require.Equal(t, make([]byte, 512), readMedium(t, mem, 512, 512))
		c := exec(m, cdb10(0x28, 0, 1, 1), nil, 512)
		checkGood(t, c)
	}
}

// TestVerify covers VERIFY(10/16) with BYTCHK 00b (medium check), 01b (compare the range with
// the data-out buffer) and 11b (one block compared with every block).
func TestVerify(t *testing.T) {
	forBlockSizes(t, func(t *testing.T, bs int) {
		_, m, mem := newMemLU(t, 600, uint32(bs), nil)
		data := testutil.Pattern(300*bs, 3) // longer than one scratch buffer at 4096
		writeMedium(t, mem, int64(10*bs), data)
		rep := fill(bs, 0x5A)
		for i := 0; i < 5; i++ {
			writeMedium(t, mem, int64((400+i)*bs), rep)
		}

		// BYTCHK 0: the range reads; nothing is transferred.
		c := exec(m, cdb10(0x2F, 0x00, 10, 300), nil, 0)
		checkGood(t, c)
		require.Zero(t, c.TransferLength)
		c = exec(m, cdb16(0x8F, 0x10, 0, 600), nil, 0) // DPO, whole medium
		checkGood(t, c)

		// BYTCHK 1: equal data is GOOD; a difference reports its offset.
		c = exec(m, cdb10(0x2F, 0x02, 10, 300), data, 0)
		checkGood(t, c)
		require.Equal(t, 300*bs, c.TransferLength)
		bad := append([]byte(nil), data...)
		off := 200*bs + 77 // in the second scratch chunk at 4096
		bad[off] ^= 0xFF
		c = exec(m, cdb16(0x8F, 0x02, 10, 300), bad, 0)
		checkSense(t, c, miscompareAt(uint64(off)))

		// BYTCHK 3: one block against every block of the range.
		c = exec(m, cdb10(0x2F, 0x06, 400, 5), rep, 0)
		checkGood(t, c)
		require.Equal(t, bs, c.TransferLength)
		writeMedium(t, mem, int64(403*bs+9), []byte{0x00})
		c = exec(m, cdb16(0x8F, 0x06, 400, 5), rep, 0)
		checkSense(t, c, miscompareAt(uint64(3*bs+9)))

		// Zero blocks: nothing to do, no data-out expected, whatever BYTCHK says.
		for _, b1 := range []byte{0x00, 0x02, 0x06} {
			c = exec(m, cdb10(0x2F, b1, 599, 0), nil, 0)
			checkGood(t, c)
			require.Zero(t, c.TransferLength)
		}

		// Errors: the range, and a data-out buffer that does not match.
		checkSense(t, exec(m, cdb10(0x2F, 0x00, 599, 2), nil, 0), lbaOutOfRange)
		checkSense(t, exec(m, cdb10(0x2F, 0x00, 600, 0), nil, 0), lbaOutOfRange)
		checkSense(t, exec(m, cdb16(0x8F, 0x00, 1<<63, 1), nil, 0), lbaOutOfRange)
		checkSense(t, exec(m, cdb10(0x2F, 0x02, 10, 2), data[:bs], 0), invalidIU)
		checkSense(t, exec(m, cdb10(0x2F, 0x06, 10, 2), data[:2*bs], 0), invalidIU)
		checkSense(t, exec(m, cdb10(0x2F, 0x00, 10, 1), data[:bs], 0), invalidIU)
	})
}

// TestVerifyMaxTransfer checks that a VERIFY whose data-out is longer than the maximum transfer
// is refused, while a medium verification of the same range, which moves no data, is not.
func TestVerifyMaxTransfer(t *testing.T) {
	_, m, _ := newMemLU(t, 64, 512, func(c *Config) { c.MaxTransferBytes = 4096 })
	checkSense(t, exec(m, cdb10(0x2F, 0x02, 0, 9), make([]byte, 9*512), 0), invalidCDB(7, -1))
	checkSense(t, exec(m, cdb16(0x8F, 0x02, 0, 9), make([]byte, 9*512), 0), invalidCDB(10, -1))
	checkGood(t, exec(m, cdb10(0x2F, 0x02, 0, 8), make([]byte, 8*512), 0))
	checkGood(t, exec(m, cdb10(0x2F, 0x00, 0, 64), nil, 0))
}

// TestWriteAndVerify checks WRITE AND VERIFY(10/16): the data lands on the medium, always with
// FUA, and is read back (and compared with BYTCHK 1).
func TestWriteAndVerify(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		_, m, rec := newRecordingLU(t, 64, uint32(bs), nil)
		data := testutil.Pattern(3*bs, 9)
		c := exec(m, cdb10(0x2E, 0x00, 5, 3), data, 0)
		checkGood(t, c)
		require.Equal(t, 3*bs, c.TransferLength)
		require.Equal(t, []ioRecord{
			{op: "write", off: int64(5 * bs), len: int64(3 * bs), fua: true},
			{op: "read", off: int64(5 * bs), len: int64(3 * bs)},
		}, rec.take())
		require.Equal(t, data, readMedium(t, rec, int64(5*bs), 3*bs))
		rec.take()

		data2 := testutil.Pattern(2*bs, 10)
		c = exec(m, cdb16(0x8E, 0x12, 60, 2), data2, 0) // DPO, BYTCHK 1
		checkGood(t, c)
		require.Equal(t, data2, readMedium(t, rec, int64(60*bs), 2*bs))
		rec.take()

		checkSense(t, exec(m, cdb10(0x2E, 0x00, 63, 2), make([]byte, 2*bs), 0), lbaOutOfRange)
		checkSense(t, exec(m, cdb10(0x2E, 0x02, 0, 2), make([]byte, bs), 0), invalidIU)
		require.Empty(t, rec.take())
		checkGood(t, exec(m, cdb10(0x2E, 0x02, 0, 0), nil, 0))
	}
}

// TestSynchronizeCache checks the range checks of SYNCHRONIZE CACHE(10/16) and that a good one
// flushes the backstore, IMMED or not.
func TestSynchronizeCache(t *testing.T) {
	_, m, rec := newRecordingLU(t, 100, 512, nil)
	good := [][]byte{
		{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0},                            // whole medium
		{0x35, 0x02, 0, 0, 0, 0x10, 0, 0, 0x54, 0},                   // IMMED, LBA 16, 84 blocks: to the end
		{0x35, 0x04, 0, 0, 0, 0x63, 0, 0, 0, 0},                      // SYNC_NV (ignored), last LBA, to the end
		{0x91, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x64, 0, 0},    // 100 blocks from 0
		{0x91, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x32, 0, 0, 0, 0, 0x3F, 0}, // IMMED, from 50 to the end, group 3Fh
		{0x35, 0x00, 0, 0, 0, 0x05, 0x1F, 0, 0x01, 0},                // group 1Fh
		{0x35, 0x01, 0, 0, 0, 0, 0, 0, 0x01, 0},                      // obsolete bit 0 (ignored)
	}
	for _, cdb := range good {
		c := exec(m, cdb, nil, 0)
		checkGood(t, c)
		require.Equal(t, []ioRecord{{op: "flush"}}, rec.take(), "% x", cdb)
	}
	bad := [][]byte{
		{0x35, 0, 0, 0, 0, 0x64, 0, 0, 0, 0},                                           // LBA 100 = capacity
		{0x35, 0, 0, 0, 0, 0x63, 0, 0, 0x02, 0},                                        // 99 + 2
		{0x91, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0x02, 0, 0}, // wraps
		{0x91, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x65, 0, 0},                         // 101 blocks
	}
	for _, cdb := range bad {
		checkSense(t, exec(m, cdb, nil, 0), lbaOutOfRange)
		require.Empty(t, rec.take())
	}
}

// TestStartStopUnit checks START STOP UNIT: START=1 does nothing, START=0 flushes unless
// NO_FLUSH, and the unit stays ready either way.
func TestStartStopUnit(t *testing.T) {
	_, m, rec := newRecordingLU(t, 16, 512, nil)
	for _, tt := range []struct {
		cdb   []byte
		flush bool
	}{
		{[]byte{0x1B, 0x00, 0, 0, 0x01, 0}, false}, // START
		{[]byte{0x1B, 0x01, 0, 0, 0x01, 0}, false}, // IMMED START
		{[]byte{0x1B, 0x00, 0, 0, 0x00, 0}, true},  // STOP
		{[]byte{0x1B, 0x01, 0, 0, 0x04, 0}, false}, // IMMED STOP NO_FLUSH
		{[]byte{0x1B, 0x00, 0, 0, 0x05, 0}, false}, // START NO_FLUSH
	} {
		checkGood(t, exec(m, tt.cdb, nil, 0))
		var want []ioRecord
		if tt.flush {
			want = []ioRecord{{op: "flush"}}
		}
		require.Equal(t, want, rec.take(), "% x", tt.cdb)
		checkGood(t, exec(m, make([]byte, 6), nil, 0)) // TEST UNIT READY: still ready
		checkGood(t, exec(m, cdb10(0x28, 0, 0, 1), nil, 512))
		rec.take()
	}
}
