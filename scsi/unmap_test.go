package scsi

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// capsStore overrides a backstore's capabilities, to test how the SCSI layer follows them.
type capsStore struct {
	backstore.Backstore
	caps backstore.Capabilities
}

func (s *capsStore) Capabilities() backstore.Capabilities { return s.caps }

// unmapList builds an UNMAP parameter list with consistent header lengths from (LBA, blocks)
// pairs.
func unmapList(descs ...[2]uint64) []byte {
	p := make([]byte, 8+16*len(descs))
	binary.BigEndian.PutUint16(p[0:], uint16(len(p)-2))
	binary.BigEndian.PutUint16(p[2:], uint16(16*len(descs)))
	for i, d := range descs {
		binary.BigEndian.PutUint64(p[8+16*i:], d[0])
		binary.BigEndian.PutUint32(p[8+16*i+8:], uint32(d[1]))
	}
	return p
}

// unmapCDB is UNMAP with the given PARAMETER LIST LENGTH.
func unmapCDB(paramLen uint16) []byte {
	return []byte{0x42, 0, 0, 0, 0, 0, 0, byte(paramLen >> 8), byte(paramLen), 0}
}

// TestUnmapDeallocates checks a good UNMAP: the described blocks read back as zeroes, the others
// keep their data, and what the backstore was asked to do.
func TestUnmapDeallocates(t *testing.T) {
	forBlockSizes(t, func(t *testing.T, bs int) {
		_, m, rec := newRecordingLU(t, 256, uint32(bs), func(c *Config) { c.ThinProvisioning = true })
		all := testutil.Pattern(256*bs, 5)
		writeMedium(t, rec, 0, all)
		rec.take()

		// Linux's list: one descriptor, UNMAP DATA LENGTH 22, BLOCK DESCRIPTOR DATA LENGTH 16.
		list := []byte{
			0x00, 0x16, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
		}
		c := exec(m, unmapCDB(24), list, 0)
		checkGood(t, c)
		require.Equal(t, 24, c.TransferLength)
		require.Equal(t, []ioRecord{{op: "unmap", off: int64(16 * bs), len: int64(8 * bs)}}, rec.take())

		// Three descriptors, one of them empty, and a trailing partial descriptor that SBC-3
		// says to ignore (BLOCK DESCRIPTOR DATA LENGTH 3 × 16 + 4).
		list = unmapList([2]uint64{100, 1}, [2]uint64{0, 0}, [2]uint64{250, 6})
		list = append(list, 0, 0, 0, 0)
		binary.BigEndian.PutUint16(list[0:], uint16(len(list)-2))
		binary.BigEndian.PutUint16(list[2:], 52)
		c = exec(m, unmapCDB(uint16(len(list))), list, 0)
		checkGood(t, c)
		require.Equal(t, []ioRecord{
			{op: "unmap", off: int64(100 * bs), len: int64(bs)},
			{op: "unmap", off: int64(250 * bs), len: int64(6 * bs)},
		}, rec.take())

		want := append([]byte(nil), all...)
		clear(want[16*bs : 24*bs])
		clear(want[100*bs : 101*bs])
		clear(want[250*bs:])
		require.Equal(t, want, readMedium(t, rec, 0, 256*bs))
	})
}

// TestUnmapFreesMemory checks that unmapping whole 1 MiB chunks of the memory backstore gives the
// RAM back, so thin provisioning is real.
func TestUnmapFreesMemory(t *testing.T) {
	_, m, mem := newMemLU(t, 4096, 512, func(c *Config) { c.ThinProvisioning = true })
	checkGood(t, exec(m, cdb16(0x8A, 0, 0, 4096), fill(4096*512, 1), 0))
	require.Equal(t, int64(2<<20), mem.Allocated())
	list := unmapList([2]uint64{2048, 2048})
	checkGood(t, exec(m, unmapCDB(uint16(len(list))), list, 0))
	require.Equal(t, int64(1<<20), mem.Allocated())
}

// TestUnmapErrors checks every way an UNMAP is refused, with exact sense data, and that a refused
// UNMAP leaves the medium untouched (a good descriptor before a bad one is not unmapped either).
func TestUnmapErrors(t *testing.T) {
	tooMany := make([]byte, 8+257*16)
	binary.BigEndian.PutUint16(tooMany[0:], uint16(len(tooMany)-2))
	binary.BigEndian.PutUint16(tooMany[2:], 257*16)
	exact := make([]byte, 8+256*16)
	binary.BigEndian.PutUint16(exact[0:], uint16(len(exact)-2))
	binary.BigEndian.PutUint16(exact[2:], 256*16)

	tests := []struct {
		name     string
		paramLen int
		list     []byte
		want     senseWant
	}{
		{"parameter list length 1", 1, []byte{0}, paramListLength},
		{"parameter list length 7", 7, make([]byte, 7), paramListLength},
		{"data-out shorter than the list", 24, make([]byte, 16), invalidCDB(7, -1)},
		{"descriptor length past the list", 24,
			[]byte{0x00, 0x16, 0x00, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0},
			invalidParam(2, -1)},
		{"data length short of the descriptors", 24,
			[]byte{0x00, 0x15, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0},
			invalidParam(0, -1)},
		{"data length zero", 24,
			[]byte{0x00, 0x00, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0},
			invalidParam(0, -1)},
		{"257 descriptors", len(tooMany), tooMany, invalidParam(2, -1)},
		{"too many blocks in one descriptor", 24,
			// 0x100001 blocks: one more than MAXIMUM UNMAP LBA COUNT, 1 Mi blocks.
			[]byte{0x00, 0x16, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0x00, 0x01, 0, 0, 0, 0},
			invalidParam(16, -1)},
		{"too many blocks in total", 40,
			[]byte{0x00, 0x26, 0x00, 0x20, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x0F, 0xFF, 0xFF, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x02, 0, 0, 0, 0},
			invalidParam(32, -1)},
		{"descriptor past the end", 40,
			[]byte{0x00, 0x26, 0x00, 0x20, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x01, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0x3F, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x02, 0, 0, 0, 0},
			lbaOutOfRange},
		{"descriptor LBA wraps", 24,
			[]byte{0x00, 0x16, 0x00, 0x10, 0, 0, 0, 0,
				0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x02, 0, 0, 0, 0},
			lbaOutOfRange},
		{"empty descriptor past the end", 24,
			// LBA 0x400001, one past the capacity (0x400000 blocks); at the capacity
			// itself an empty descriptor is good (TestUnmapNoOps).
			[]byte{0x00, 0x16, 0x00, 0x10, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0x40, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0},
			lbaOutOfRange},
		{"descriptor at the capacity with blocks", 24,
			[]byte{0x00, 0x16, 0x00, 0x10, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0, 0, 0, 0},
			lbaOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 4 Mi blocks of 512 bytes (sparse): more than one UNMAP may cover.
			_, m, rec := newRecordingLU(t, 1<<22, 512, func(c *Config) { c.ThinProvisioning = true })
			c := exec(m, unmapCDB(uint16(tt.paramLen)), tt.list, 0)
			checkSense(t, c, tt.want)
			require.Equal(t, tt.paramLen, c.TransferLength)
			require.Empty(t, rec.take())
		})
	}

	// 256 descriptors (all empty) is the limit, not beyond it.
	_, m, _ := newRecordingLU(t, 1024, 512, func(c *Config) { c.ThinProvisioning = true })
	checkGood(t, exec(m, unmapCDB(uint16(len(exact))), exact, 0))
}

// TestUnmapNoOps checks the UNMAPs that do nothing and are GOOD: a PARAMETER LIST LENGTH of zero,
// a header alone, and descriptors of zero blocks; and that a data-out buffer longer than the
// PARAMETER LIST LENGTH is read only as far as the latter.
func TestUnmapNoOps(t *testing.T) {
	_, m, rec := newRecordingLU(t, 64, 512, func(c *Config) { c.ThinProvisioning = true })
	checkGood(t, exec(m, unmapCDB(0), nil, 0))
	checkGood(t, exec(m, unmapCDB(0), make([]byte, 24), 0))
	checkGood(t, exec(m, unmapCDB(8), []byte{0x00, 0x06, 0x00, 0x00, 0, 0, 0, 0}, 0))
	checkGood(t, exec(m, unmapCDB(24), unmapList([2]uint64{5, 0}), 0))
	// A descriptor of zero blocks at LBA 64, the
	// capacity, is in range (SBC-4: only LBA + NUMBER OF LOGICAL BLOCKS beyond the capacity is
	// an error), next to one that unmaps nothing either.
	checkGood(t, exec(m, unmapCDB(40), unmapList([2]uint64{64, 0}, [2]uint64{63, 0}), 0))
	// A list of 24 bytes of which only the header is in the parameter list length.
	checkGood(t, exec(m, unmapCDB(8), []byte{0x00, 0x06, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}, 0))
	require.Empty(t, rec.take())
}

// TestUnmapNotSupported checks that without thin provisioning UNMAP is an unsupported operation
// code, and WRITE SAME with UNMAP an invalid field, and that the limits advertised are zero.
func TestUnmapNotSupported(t *testing.T) {
	lu, m, rec := newRecordingLU(t, 64, 512, nil)
	checkSense(t, exec(m, unmapCDB(24), unmapList([2]uint64{1, 1}), 0), invalidOpcode)
	checkSense(t, exec(m, cdb16(0x93, 0x08, 1, 1), make([]byte, 512), 0), invalidCDB(1, 3))
	checkSense(t, exec(m, cdb10(0x41, 0x08, 1, 1), make([]byte, 512), 0), invalidCDB(1, 3))
	require.Empty(t, rec.take())
	require.Zero(t, lu.maxUnmapBlocks())
	require.Zero(t, lu.maxUnmapDescriptors())
	require.False(t, lu.supportsUnmap())
}

// TestUnmapLimits checks the limits that VPD page 0xB0 advertises for UNMAP and WRITE SAME: 1 GiB
// and 256 descriptors by default, lowered to the backstore's own bound on one call.
func TestUnmapLimits(t *testing.T) {
	thin := func(c *Config) { c.ThinProvisioning = true }
	lu, _, _ := newMemLU(t, 64, 512, thin)
	require.Equal(t, uint32(0x100000), lu.maxUnmapBlocks(), "1 Mi blocks, although 1 GiB is 2 Mi")
	require.Equal(t, uint32(256), lu.maxUnmapDescriptors())
	require.Equal(t, uint64(0x200000), lu.maxWriteSameBlocks(), "1 GiB: no transfer limit")
	require.True(t, lu.supportsUnmap())

	lu, _, _ = newMemLU(t, 64, 4096, thin)
	require.Equal(t, uint32(0x40000), lu.maxUnmapBlocks())
	require.Equal(t, uint64(0x40000), lu.maxWriteSameBlocks())

	// MAXIMUM WRITE SAME LENGTH stays within MAXIMUM TRANSFER LENGTH, and a WRITE SAME one
	// block longer is refused.
	lu, m, _ := newMemLU(t, 64, 512, func(c *Config) { c.ThinProvisioning = true; c.MaxTransferBytes = 16 << 10 })
	require.Equal(t, uint64(32), lu.maxWriteSameBlocks())
	require.Equal(t, uint32(0x100000), lu.maxUnmapBlocks(), "UNMAP moves no data: the transfer limit does not bound it")
	checkGood(t, exec(m, cdb16(0x93, 0, 0, 32), make([]byte, 512), 0))
	checkSense(t, exec(m, cdb16(0x93, 0, 0, 33), make([]byte, 512), 0), invalidCDB(10, -1))

	mem, err := backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	caps := &capsStore{Backstore: mem, caps: backstore.Capabilities{Unmap: true, UnmapZeroes: true, MaxUnmapBytes: 64 << 10}}
	lu, m = newLUOver(t, caps, thin)
	require.Equal(t, uint32(128), lu.maxUnmapBlocks())
	require.Equal(t, uint64(128), lu.maxWriteSameBlocks())
	list := unmapList([2]uint64{0, 64}, [2]uint64{0, 65})
	checkSense(t, exec(m, unmapCDB(uint16(len(list))), list, 0), invalidParam(32, -1))
	list = unmapList([2]uint64{0, 64}, [2]uint64{0, 64})
	checkGood(t, exec(m, unmapCDB(uint16(len(list))), list, 0))
}
