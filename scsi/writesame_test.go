package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// TestWriteSamePattern checks that a block with data is replicated over the range, also when the
// range is longer than one scratch buffer, and that the blocks around it are untouched.
func TestWriteSamePattern(t *testing.T) {
	forBlockSizes(t, func(t *testing.T, bs int) {
		_, m, mem := newMemLU(t, 1024, uint32(bs), func(c *Config) { c.ThinProvisioning = true })
		before := testutil.Pattern(1024*bs, 1)
		writeMedium(t, mem, 0, before)
		blk := testutil.Pattern(bs, 0x77)

		tests := []struct {
			cdb      []byte
			lba, n   int
			withData []byte
		}{
			{cdb10(0x41, 0x00, 3, 5), 3, 5, blk},
			{cdb16(0x93, 0x00, 100, 700), 100, 700, blk}, // several scratch buffers at 4096
			{cdb16(0x93, 0x08, 900, 2), 900, 2, blk},     // UNMAP with data: written
			{cdb10(0x41, 0x01, 1000, 24), 1000, 24, blk}, // obsolete bit 0 ignored, up to the end
		}
		want := append([]byte(nil), before...)
		for _, tt := range tests {
			c := exec(m, tt.cdb, tt.withData, 0)
			checkGood(t, c)
			require.Equal(t, bs, c.TransferLength)
			for i := 0; i < tt.n; i++ {
				copy(want[(tt.lba+i)*bs:], tt.withData)
			}
		}
		require.Equal(t, want, readMedium(t, mem, 0, 1024*bs))
	})
}

// TestWriteSameZeroes checks how a block of zeroes is written: zeroed by the backstore without
// UNMAP, unmapped with UNMAP when unmapped blocks read as zeroes, zeroed when they might not, and
// NDOB as a block of zeroes without data-out.
func TestWriteSameZeroes(t *testing.T) {
	zero := make([]byte, 512)
	tests := []struct {
		name        string
		unmapZeroes bool
		cdb         []byte
		dataOut     []byte
		want        []ioRecord
	}{
		{"WS10 zeroes", true, cdb10(0x41, 0x00, 8, 4), zero,
			[]ioRecord{{op: "zeroes", off: 8 * 512, len: 4 * 512}}},
		{"WS16 zeroes UNMAP LBPRZ", true, cdb16(0x93, 0x08, 8, 4), zero,
			[]ioRecord{{op: "unmap", off: 8 * 512, len: 4 * 512}}},
		{"WS10 zeroes UNMAP LBPRZ", true, cdb10(0x41, 0x08, 8, 4), zero,
			[]ioRecord{{op: "unmap", off: 8 * 512, len: 4 * 512}}},
		{"WS16 zeroes UNMAP without LBPRZ", false, cdb16(0x93, 0x08, 8, 4), zero,
			[]ioRecord{{op: "zeroes", off: 8 * 512, len: 4 * 512}}},
		{"WS16 NDOB", true, cdb16(0x93, 0x01, 8, 4), nil,
			[]ioRecord{{op: "zeroes", off: 8 * 512, len: 4 * 512}}},
		{"WS16 NDOB UNMAP", true, cdb16(0x93, 0x09, 8, 4), nil,
			[]ioRecord{{op: "unmap", off: 8 * 512, len: 4 * 512}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, err := backstore.NewMemory(64*512, 512)
			require.NoError(t, err)
			writeMedium(t, mem, 0, testutil.Pattern(64*512, 3))
			rec := &recordingStore{Backstore: &capsStore{Backstore: mem,
				caps: backstore.Capabilities{Unmap: true, UnmapZeroes: tt.unmapZeroes}}}
			_, m := newLUOver(t, rec, func(c *Config) { c.ThinProvisioning = true })
			rec.take()
			c := exec(m, tt.cdb, tt.dataOut, 0)
			checkGood(t, c)
			require.Equal(t, len(tt.dataOut), c.TransferLength)
			require.Equal(t, tt.want, rec.take())
			want := testutil.Pattern(64*512, 3)
			clear(want[8*512 : 12*512])
			require.Equal(t, want, readMedium(t, mem, 0, 64*512))
		})
	}
}

// TestWriteSameWriteThrough checks WRITE SAME with the write cache disabled: a pattern is written
// with FUA, zeroing and unmapping are followed by a flush.
func TestWriteSameWriteThrough(t *testing.T) {
	_, m, rec := newRecordingLU(t, 64, 512, func(c *Config) { c.ThinProvisioning = true; c.WriteCache = false })
	checkGood(t, exec(m, cdb10(0x41, 0, 1, 2), fill(512, 9), 0))
	require.Equal(t, []ioRecord{{op: "write", off: 512, len: 1024, fua: true}}, rec.take())
	checkGood(t, exec(m, cdb10(0x41, 0, 1, 2), make([]byte, 512), 0))
	require.Equal(t, []ioRecord{{op: "zeroes", off: 512, len: 1024}, {op: "flush"}}, rec.take())
	checkGood(t, exec(m, cdb16(0x93, 0x09, 1, 2), nil, 0))
	require.Equal(t, []ioRecord{{op: "unmap", off: 512, len: 1024}, {op: "flush"}}, rec.take())
}

// TestWriteSamePieces checks that MAXIMUM WRITE SAME LENGTH follows the backstore's bound on one
// zeroing call, and that zeroBlocks splits a longer range into calls of at most that bound (a
// command cannot ask for more, so the split is a second line of defence, tested directly).
func TestWriteSamePieces(t *testing.T) {
	mem, err := backstore.NewMemory(256*512, 512)
	require.NoError(t, err)
	rec := &recordingStore{Backstore: &capsStore{Backstore: mem,
		caps: backstore.Capabilities{Unmap: true, UnmapZeroes: true, MaxUnmapBytes: 32 * 512}}}
	lu, m := newLUOver(t, rec, func(c *Config) { c.ThinProvisioning = true })
	rec.take()
	checkSense(t, exec(m, cdb16(0x93, 0x01, 0, 33), nil, 0), invalidCDB(10, -1))
	checkSense(t, exec(m, cdb10(0x41, 0x00, 0, 33), make([]byte, 512), 0), invalidCDB(7, -1))
	require.Empty(t, rec.take())
	checkGood(t, exec(m, cdb10(0x41, 0x00, 0, 32), make([]byte, 512), 0))
	require.Equal(t, []ioRecord{{op: "zeroes", off: 0, len: 32 * 512}}, rec.take())

	failedAt, err := lu.zeroBlocks(10, 100, false)
	require.NoError(t, err)
	require.Zero(t, failedAt)
	require.Equal(t, []ioRecord{
		{op: "zeroes", off: 10 * 512, len: 32 * 512},
		{op: "zeroes", off: 42 * 512, len: 32 * 512},
		{op: "zeroes", off: 74 * 512, len: 32 * 512},
		{op: "zeroes", off: 106 * 512, len: 4 * 512},
	}, rec.take())
}

// TestWriteSameErrors checks the refusals that depend on more than one CDB field: the range, the
// data-out buffer, NDOB, and the maximum length.
func TestWriteSameErrors(t *testing.T) {
	_, m, rec := newRecordingLU(t, 64, 512, func(c *Config) { c.ThinProvisioning = true })
	blk := fill(512, 1)
	tests := []struct {
		name    string
		cdb     []byte
		dataOut []byte
		want    senseWant
	}{
		{"past the end", cdb10(0x41, 0, 63, 2), blk, lbaOutOfRange},
		{"LBA wraps", cdb16(0x93, 0, 0xFFFFFFFFFFFFFFFF, 2), blk, lbaOutOfRange},
		{"LBA at capacity", cdb16(0x93, 0x01, 64, 1), nil, lbaOutOfRange},
		{"no data-out", cdb10(0x41, 0, 0, 1), nil, invalidIU},
		{"short data-out", cdb10(0x41, 0, 0, 1), blk[:511], invalidIU},
		{"two blocks of data-out", cdb16(0x93, 0, 0, 2), append(blk, blk...), invalidIU},
		{"NDOB with data-out", cdb16(0x93, 0x01, 0, 1), blk, invalidIU},
		{"more than the maximum", cdb16(0x93, 0x01, 0, 0x200001), nil, invalidCDB(10, -1)},
	}
	for _, tt := range tests {
		c := exec(m, tt.cdb, tt.dataOut, 0)
		checkSense(t, c, tt.want)
		require.Empty(t, rec.take(), tt.name)
	}
}

// TestWriteSameToTheEnd checks NUMBER OF LOGICAL BLOCKS zero with WSNZ 0 (SBC-4 5.50): the blocks
// from the LBA to the last one are written, unmapped or zeroed, and the number that makes counts
// against MAXIMUM WRITE SAME LENGTH (32 blocks here, the backstore's zeroing bound): more is
// INVALID FIELD IN CDB on the NUMBER OF LOGICAL BLOCKS field; an LBA past the last is out of
// range.
func TestWriteSameToTheEnd(t *testing.T) {
	const blocks = 256
	mem, err := backstore.NewMemory(blocks*512, 512)
	require.NoError(t, err)
	rec := &recordingStore{Backstore: &capsStore{Backstore: mem,
		caps: backstore.Capabilities{Unmap: true, UnmapZeroes: true, MaxUnmapBytes: 32 * 512}}}
	_, m := newLUOver(t, rec, func(c *Config) { c.ThinProvisioning = true })
	before := testutil.Pattern(blocks*512, 5)
	writeMedium(t, mem, 0, before)
	rec.take()

	// Refused, nothing written.
	checkSense(t, exec(m, cdb16(0x93, 0x01, 200, 0), nil, 0), invalidCDB(10, -1)) // 56 blocks > 32
	checkSense(t, exec(m, cdb10(0x41, 0x00, 0, 0), fill(512, 1), 0), invalidCDB(7, -1))
	checkSense(t, exec(m, cdb16(0x93, 0x01, blocks, 0), nil, 0), lbaOutOfRange)
	checkSense(t, exec(m, cdb16(0x93, 0x01, 1<<40, 0), nil, 0), lbaOutOfRange)
	require.Empty(t, rec.take())
	require.Equal(t, before, readMedium(t, mem, 0, blocks*512))

	want := append([]byte(nil), before...)
	// A pattern from LBA 224: the last 32 blocks.
	blk := testutil.Pattern(512, 0x42)
	c := exec(m, cdb10(0x41, 0x00, 224, 0), blk, 0)
	checkGood(t, c)
	require.Equal(t, 512, c.TransferLength)
	for lba := 224; lba < blocks; lba++ {
		copy(want[lba*512:], blk)
	}
	require.Equal(t, []ioRecord{{op: "write", off: 224 * 512, len: 32 * 512}}, rec.take())
	require.Equal(t, want, readMedium(t, mem, 0, blocks*512))

	// NDOB with UNMAP from LBA 240: unmapped to the end.
	checkGood(t, exec(m, cdb16(0x93, 0x09, 240, 0), nil, 0))
	require.Equal(t, []ioRecord{{op: "unmap", off: 240 * 512, len: 16 * 512}}, rec.take())
	clear(want[240*512:])
	require.Equal(t, want, readMedium(t, mem, 0, blocks*512))

	// The last block alone.
	checkGood(t, exec(m, cdb16(0x93, 0x00, blocks-1, 0), fill(512, 7), 0))
	require.Equal(t, []ioRecord{{op: "write", off: (blocks - 1) * 512, len: 512}}, rec.take())
	copy(want[(blocks-1)*512:], fill(512, 7))
	require.Equal(t, want, readMedium(t, mem, 0, blocks*512))
}
