package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// TestPhysicalBlockSizeConfig checks Config.PhysicalBlockSize: a power-of-two multiple of the
// logical block size, at most 2^15 of them (four bits of exponent); zero takes the backstore's.
func TestPhysicalBlockSizeConfig(t *testing.T) {
	for _, tc := range []struct {
		lbs, pbs uint32
		want     uint32 // 0: refused
	}{
		{512, 0, 512},
		{512, 4096, 4096},
		{4096, 4096, 4096},
		{512, 512 << 15, 512 << 15},
		{512, 512 << 16, 0},
		{512, 256, 0},
		{512, 1536, 0},
		{4096, 2048, 0},
	} {
		mem, err := backstore.NewMemory(1<<20, tc.lbs)
		require.NoError(t, err)
		lu, err := NewLogicalUnit(Config{Backstore: mem, Serial: "1", PhysicalBlockSize: tc.pbs})
		if tc.want == 0 {
			require.ErrorContains(t, err, "physical block size", "%d/%d", tc.lbs, tc.pbs)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, lu.PhysicalBlockSize())
	}
}

// TestPhysicalBlockSizeReported checks what a 512e logical unit (512-byte logical blocks in
// 4 KiB physical blocks) reports: LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT 3 with LOWEST
// ALIGNED LOGICAL BLOCK ADDRESS 0 in READ CAPACITY(16) (SBC-4 5.20.2), and in the Block Limits
// VPD page (SBC-4 6.6.4) OPTIMAL TRANSFER LENGTH GRANULARITY 8, OPTIMAL UNMAP GRANULARITY 8
// and UGAVALID with UNMAP GRANULARITY ALIGNMENT 0.
func TestPhysicalBlockSizeReported(t *testing.T) {
	_, m, _ := newMemLU(t, 2048, 512, func(c *Config) { c.ThinProvisioning = true; c.PhysicalBlockSize = 4096 })
	c := exec(m, readCap16(32), nil, 32)
	checkGood(t, c)
	require.Equal(t, []byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0xFF, 0x00, 0x00, 0x02, 0x00,
		0x00, 0x03, 0xC0, 0x00}, data(c)[:16], "last LBA, block length, exponent 3, LBPME LBPRZ, lowest aligned LBA 0")

	c = exec(m, vpdCDB(0xB0, 64), nil, 64)
	checkGood(t, c)
	b := data(c)
	require.Equal(t, []byte{0x00, 0x08}, b[6:8], "OPTIMAL TRANSFER LENGTH GRANULARITY")
	require.Equal(t, []byte{0x00, 0x00, 0x00, 0x08}, b[28:32], "OPTIMAL UNMAP GRANULARITY")
	require.Equal(t, []byte{0x80, 0x00, 0x00, 0x00}, b[32:36], "UGAVALID, UNMAP GRANULARITY ALIGNMENT")
}

// thin512e makes a thin-provisioned 512e logical unit (512-byte logical blocks in 4 KiB
// physical ones) of blocks blocks over a recording memory store, filled with the pattern seed
// selects and the fill's records taken.
func thin512e(t *testing.T, blocks, seed int) (*backstore.Memory, *recordingStore, *LUNMap, []byte) {
	t.Helper()
	mem, err := backstore.NewMemory(int64(blocks)*512, 512)
	require.NoError(t, err)
	rec := &recordingStore{Backstore: mem}
	_, m := newLUOver(t, rec, func(c *Config) { c.ThinProvisioning = true; c.PhysicalBlockSize = 4096 })
	before := testutil.Pattern(blocks*512, seed)
	writeMedium(t, mem, 0, before)
	rec.take()
	return mem, rec, m, before
}

// TestUnmapPartialPhysicalBlocks checks UNMAP on a 512e logical unit: each descriptor
// deallocates the whole physical blocks it covers, and the logical blocks it covers in physical
// blocks shared with blocks outside it keep their data (SBC-4 5.31: their provisioning state
// "may remain unchanged").
func TestUnmapPartialPhysicalBlocks(t *testing.T) {
	const blocks = 128
	mem, rec, m, before := thin512e(t, blocks, 9)

	list := unmapList(
		[2]uint64{3, 20},  // 8..15 whole; 3..7 and 16..22 partial
		[2]uint64{33, 5},  // inside the physical block 32..39: nothing
		[2]uint64{48, 16}, // 48..63 exactly
		[2]uint64{70, 10}, // 72..79 whole; 70..71 partial
	)
	checkGood(t, exec(m, unmapCDB(uint16(len(list))), list, 0))
	require.Equal(t, []ioRecord{
		{op: "unmap", off: 8 * 512, len: 8 * 512},
		{op: "unmap", off: 48 * 512, len: 16 * 512},
		{op: "unmap", off: 72 * 512, len: 8 * 512},
	}, rec.take())
	want := append([]byte(nil), before...)
	for _, r := range [][2]int{{8, 16}, {48, 64}, {72, 80}} {
		clear(want[r[0]*512 : r[1]*512])
	}
	require.Equal(t, want, readMedium(t, mem, 0, blocks*512))
}

// TestWriteSameUnmapPartialPhysicalBlocks checks WRITE SAME with UNMAP and a block of zeroes on a
// 512e logical unit whose unmapped blocks read as zeroes: the whole physical blocks of the range
// are deallocated, its logical blocks in physical blocks it covers only in part are written with
// zeroes (SBC-4 5.50: every block reads back as the data-out block, unmapped or not), and the
// blocks around it keep their data.
func TestWriteSameUnmapPartialPhysicalBlocks(t *testing.T) {
	const blocks = 128
	mem, rec, m, before := thin512e(t, blocks, 4)
	want := append([]byte(nil), before...)

	for _, tc := range []struct {
		cdb    []byte
		lba, n int
		io     []ioRecord
	}{
		{cdb16(0x93, 0x09, 3, 20), 3, 20, []ioRecord{ // NDOB: 3..7 zeroed, 8..15 unmapped, 16..22 zeroed
			{op: "zeroes", off: 3 * 512, len: 5 * 512},
			{op: "unmap", off: 8 * 512, len: 8 * 512},
			{op: "zeroes", off: 16 * 512, len: 7 * 512}}},
		{cdb16(0x93, 0x09, 33, 5), 33, 5, []ioRecord{ // inside one physical block: zeroed
			{op: "zeroes", off: 33 * 512, len: 5 * 512}}},
		{cdb16(0x93, 0x09, 48, 16), 48, 16, []ioRecord{ // aligned: unmapped
			{op: "unmap", off: 48 * 512, len: 16 * 512}}},
		{cdb10(0x41, 0x08, 64, 12), 64, 12, []ioRecord{ // WRITE SAME(10) from the data-out block
			{op: "unmap", off: 64 * 512, len: 8 * 512},
			{op: "zeroes", off: 72 * 512, len: 4 * 512}}},
	} {
		var out []byte
		if tc.cdb[0] == 0x41 {
			out = make([]byte, 512)
		}
		checkGood(t, exec(m, tc.cdb, out, 0))
		require.Equal(t, tc.io, rec.take(), "% x", tc.cdb)
		clear(want[tc.lba*512 : (tc.lba+tc.n)*512])
		require.Equal(t, want, readMedium(t, mem, 0, blocks*512), "% x", tc.cdb)
	}
}
