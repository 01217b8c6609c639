package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// TestReadWriteRoundTrip writes with each WRITE CDB and reads back with each READ CDB, at 512-
// and 4096-byte blocks, and checks the bytes on the medium as well as the bytes read.
func TestReadWriteRoundTrip(t *testing.T) {
	forBlockSizes(t, func(t *testing.T, bs int) {
		const blocks = 2048
		_, m, mem := newMemLU(t, blocks, uint32(bs), nil)
		writes := []struct {
			name string
			cdb  []byte
			lba  int
			n    int
		}{
			{"WRITE(6)", []byte{0x0A, 0x00, 0x00, 0x07, 0x03, 0x00}, 7, 3},
			{"WRITE(10)", []byte{0x2A, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x05, 0x00}, 0x20, 5},
			{"WRITE(10) FUA DPO", []byte{0x2A, 0x18, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00}, 0x100, 1},
			{"WRITE(12)", []byte{0xAA, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00}, 0x200, 16},
			{"WRITE(16)", []byte{0x8A, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x07, 0xF0, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00}, 0x7F0, 16},
			{"WRITE(16) group 3Fh", []byte{0x8A, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x02, 0x3F, 0x00}, 0x300, 2},
		}
		for i, w := range writes {
			data := testutil.Pattern(w.n*bs, i+1)
			c := exec(m, w.cdb, data, 0)
			checkGood(t, c)
			require.Equal(t, len(data), c.TransferLength, w.name)
			require.Equal(t, data, readMedium(t, mem, int64(w.lba*bs), w.n*bs), w.name)
		}
		reads := []struct {
			name string
			cdb  []byte
		}{
			{"READ(6)", []byte{0x08, 0x00, 0x00, 0x07, 0x03, 0x00}},
			{"READ(10)", []byte{0x28, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x05, 0x00}},
			{"READ(10) FUA", []byte{0x28, 0x08, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00}},
			{"READ(12) DPO", []byte{0xA8, 0x10, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00}},
			{"READ(16)", []byte{0x88, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0x07, 0xF0, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00}},
			{"READ(16) FUA_NV", []byte{0x88, 0x02, 0, 0, 0, 0, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00}},
		}
		for i, r := range reads {
			w := writes[i]
			want := testutil.Pattern(w.n*bs, i+1)
			c := exec(m, r.cdb, nil, len(want))
			checkGood(t, c)
			require.Equal(t, len(want), c.TransferLength, r.name)
			require.Equal(t, len(want), c.DataInLength, r.name)
			require.Equal(t, want, c.DataIn, r.name)
			over, res := c.DataInResidual()
			require.False(t, over)
			require.Zero(t, res)
		}
	})
}

// TestReadWrite6ZeroMeans256 checks that a TRANSFER LENGTH of 0 in READ(6)/WRITE(6) moves 256
// blocks, and that the 21-bit LBA takes the low five bits of byte 1.
func TestReadWrite6ZeroMeans256(t *testing.T) {
	_, m, mem := newMemLU(t, 0x10200, 512, nil)
	data := testutil.Pattern(256*512, 0x42)
	c := exec(m, []byte{0x0A, 0x01, 0x00, 0x10, 0x00, 0x00}, data, 0) // LBA 0x010010
	checkGood(t, c)
	require.Equal(t, 256*512, c.TransferLength)
	require.Equal(t, data, readMedium(t, mem, 0x10010*512, 256*512))
	c = exec(m, []byte{0x08, 0x01, 0x00, 0x10, 0x00, 0x00}, nil, 256*512)
	checkGood(t, c)
	require.Equal(t, data, c.DataIn[:c.DataInLength])
	// 256 blocks from 0x10101 end at 0x10201 > 0x10200.
	checkSense(t, exec(m, []byte{0x08, 0x01, 0x01, 0x01, 0x00, 0x00}, nil, 256*512), lbaOutOfRange)
}

// TestReadWriteZeroLength checks that a TRANSFER LENGTH of zero in the 10/12/16-byte CDBs moves
// nothing and is GOOD.
func TestReadWriteZeroLength(t *testing.T) {
	_, m, rec := newRecordingLU(t, 64, 512, nil)
	for _, cdb := range [][]byte{
		cdb10(0x28, 0, 3, 0), cdb12(0xA8, 0, 3, 0), cdb16(0x88, 0, 63, 0),
		cdb10(0x2A, 0, 3, 0), cdb12(0xAA, 0, 3, 0), cdb16(0x8A, 0, 63, 0),
	} {
		c := exec(m, cdb, nil, 512)
		checkGood(t, c)
		require.Zero(t, c.TransferLength)
		require.Zero(t, c.DataInLength)
	}
	require.Empty(t, rec.take())
	// A write with no blocks but data is a data-out mismatch.
	checkSense(t, exec(m, cdb10(0x2A, 0, 3, 0), make([]byte, 512), 0), invalidIU)
}

// TestReadWriteOutOfRange checks LOGICAL BLOCK ADDRESS OUT OF RANGE at the end of the medium and
// for LBAs that would wrap, with no data moved.
func TestReadWriteOutOfRange(t *testing.T) {
	_, m, rec := newRecordingLU(t, 100, 512, nil)
	tests := [][]byte{
		cdb10(0x28, 0, 100, 1),
		cdb10(0x28, 0, 99, 2),
		cdb10(0x28, 0, 100, 0), // an LBA past the end is out of range even with no blocks
		cdb12(0xA8, 0, 0, 101),
		cdb16(0x88, 0, 0xFFFFFFFFFFFFFFFF, 2), // LBA + length wraps
		cdb16(0x88, 0, 1<<40, 1),
		{0x08, 0x00, 0x00, 0x64, 0x01, 0x00},
	}
	for _, cdb := range tests {
		c := exec(m, cdb, nil, 4096)
		checkSense(t, c, lbaOutOfRange)
		require.Zero(t, c.DataInLength)
	}
	writes := [][]byte{
		cdb10(0x2A, 0, 99, 2), cdb12(0xAA, 0, 100, 1), cdb16(0x8A, 0, 0xFFFFFFFFFFFFFFFF, 2),
	}
	for _, cdb := range writes {
		checkSense(t, exec(m, cdb, make([]byte, 1024), 0), lbaOutOfRange)
	}
	require.Empty(t, rec.take())
	// The last block itself is fine.
	checkGood(t, exec(m, cdb10(0x28, 0, 99, 1), nil, 512))
}

// TestReadWriteMaxTransfer checks that a transfer above Config.MaxTransferBytes is INVALID FIELD
// IN CDB pointing at the TRANSFER LENGTH field, and that the maximum itself is accepted.
func TestReadWriteMaxTransfer(t *testing.T) {
	_, m, rec := newRecordingLU(t, 1024, 512, func(c *Config) { c.MaxTransferBytes = 64 << 10 })
	tests := []struct {
		cdb  []byte
		want senseWant
	}{
		{cdb10(0x28, 0, 0, 129), invalidCDB(7, -1)},
		{cdb12(0xA8, 0, 0, 129), invalidCDB(6, -1)},
		{cdb16(0x88, 0, 0, 129), invalidCDB(10, -1)},
		{[]byte{0x08, 0, 0, 0, 0, 0}, invalidCDB(4, -1)}, // 256 blocks
		{cdb10(0x2A, 0, 0, 129), invalidCDB(7, -1)},
		{cdb16(0x8A, 0, 0, 0xFFFFFFFF), invalidCDB(10, -1)},
		{cdb10(0x2E, 0, 0, 129), invalidCDB(7, -1)},
	}
	for _, tt := range tests {
		c := exec(m, tt.cdb, make([]byte, 129*512), 129*512)
		checkSense(t, c, tt.want)
	}
	require.Empty(t, rec.take())
	checkGood(t, exec(m, cdb10(0x28, 0, 0, 128), nil, 128*512))
	checkGood(t, exec(m, cdb10(0x2A, 0, 0, 128), make([]byte, 128*512), 0))
}

// TestReadShortBuffer checks a READ whose data-in buffer is smaller than the transfer: the
// whole blocks that fit are read, TransferLength stays the full transfer, and the residual is an
// overflow the transport reports.
func TestReadShortBuffer(t *testing.T) {
	_, m, mem := newMemLU(t, 64, 512, nil)
	data := testutil.Pattern(8*512, 7)
	writeMedium(t, mem, 0, data)

	c := exec(m, cdb10(0x28, 0, 0, 8), nil, 3*512+100)
	checkGood(t, c)
	require.Equal(t, 8*512, c.TransferLength)
	require.Equal(t, 3*512, c.DataInLength)
	require.Equal(t, data[:3*512], c.DataIn[:3*512])
	over, n := c.DataInResidual()
	require.True(t, over)
	require.Equal(t, 5*512-100, n)

	c = exec(m, cdb10(0x28, 0, 0, 8), nil, 100) // not even one block
	checkGood(t, c)
	require.Zero(t, c.DataInLength)

	c = exec(m, cdb10(0x28, 0, 0, 2), nil, 4096) // larger buffer: underflow
	checkGood(t, c)
	require.Equal(t, 1024, c.DataInLength)
	over, n = c.DataInResidual()
	require.False(t, over)
	require.Equal(t, 4096-1024, n)
}

// TestWriteDataOutMismatch checks that a WRITE whose data-out buffer is shorter or longer than
// its CDB asks for is refused with INVALID FIELD IN COMMAND INFORMATION UNIT and writes nothing.
func TestWriteDataOutMismatch(t *testing.T) {
	_, m, rec := newRecordingLU(t, 512, 512, nil)
	for _, n := range []int{0, 511, 1023, 1025, 1536} {
		c := exec(m, cdb10(0x2A, 0, 4, 2), fill(n, 0xEE), 0)
		checkSense(t, c, invalidIU)
		require.Equal(t, 1024, c.TransferLength)
	}
	c := exec(m, []byte{0x0A, 0, 0, 4, 0, 0}, make([]byte, 512), 0) // WRITE(6) of 256 blocks
	checkSense(t, c, invalidIU)
	require.Empty(t, rec.take())
	require.Equal(t, make([]byte, 1024), readMedium(t, rec, 4*512, 1024))
}

// TestWriteFUA checks that the FUA bit reaches the backstore, and that with the write cache
// disabled (WCE=0) every write is forced, FUA or not.
func TestWriteFUA(t *testing.T) {
	for _, wce := range []bool{true, false} {
		lu, m, rec := newRecordingLU(t, 64, 512, func(c *Config) { c.WriteCache = wce })
		blk := fill(512, 1)
		tests := []struct {
			cdb []byte
			fua bool
		}{
			{cdb10(0x2A, 0x00, 1, 1), false},
			{cdb10(0x2A, 0x08, 1, 1), true},
			{cdb10(0x2A, 0x10, 1, 1), false}, // DPO is not FUA
			{cdb12(0xAA, 0x08, 1, 1), true},
			{cdb16(0x8A, 0x08, 1, 1), true},
			{cdb16(0x8A, 0x00, 1, 1), false},
			{[]byte{0x0A, 0, 0, 1, 1, 0}, false}, // WRITE(6) has no FUA
		}
		for _, tt := range tests {
			checkGood(t, exec(m, tt.cdb, blk, 0))
			require.Equal(t, []ioRecord{{op: "write", off: 512, len: 512, fua: tt.fua || !wce}}, rec.take(),
				"WCE %v, % x", wce, tt.cdb)
		}
		// The caching page can change WCE at any time (MODE SELECT): the next write follows.
		lu.mode.wce.Store(!wce)
		checkGood(t, exec(m, cdb10(0x2A, 0, 1, 1), blk, 0))
		require.Equal(t, []ioRecord{{op: "write", off: 512, len: 512, fua: wce}}, rec.take())
	}
}

// TestReadWriteAllocs checks that READ(10) and WRITE(10) of 4 KiB through LUNMap.Execute on a
// memory logical unit allocate nothing once warm, with a Command reused as a transport would.
func TestReadWriteAllocs(t *testing.T) {
	_, m, _ := newMemLU(t, 1024, 512, nil)
	c := &Command{Nexus: testNexus, LUN: EncodeLUN(0), DataIn: make([]byte, 4096)}
	data := testutil.Pattern(4096, 1)
	read := cdb10(0x28, 0, 8, 8)
	write := cdb10(0x2A, 0, 8, 8)
	do := func(cdb, out []byte) {
		in := c.DataIn[:4096]
		c.Reset()
		c.Nexus, c.LUN, c.CDB, c.DataOut, c.DataIn = testNexus, EncodeLUN(0), cdb, out, in
		m.Execute(c)
		if c.Status != StatusGood {
			t.Fatalf("status %v sense % x", c.Status, c.SenseData())
		}
	}
	do(write, data) // allocates the memory backstore's chunk
	do(read, nil)
	require.Equal(t, data, c.DataIn)
	require.Zero(t, testing.AllocsPerRun(200, func() { do(write, data) }), "WRITE(10)")
	require.Zero(t, testing.AllocsPerRun(200, func() { do(read, nil) }), "READ(10)")
	fua := cdb10(0x2A, 0x08, 8, 8)
	require.Zero(t, testing.AllocsPerRun(200, func() { do(fua, data) }), "WRITE(10) FUA")
}

// TestReadWriteNullBackstore checks the data path over the null backstore: writes are dropped,
// reads return zeroes, the range checks still apply.
func TestReadWriteNullBackstore(t *testing.T) {
	null, err := backstore.NewNull(128*4096, 4096)
	require.NoError(t, err)
	_, m := newLUOver(t, null, nil)
	checkGood(t, exec(m, cdb10(0x2A, 0, 0, 2), fill(8192, 0xFF), 0))
	c := exec(m, cdb10(0x28, 0, 0, 2), nil, 8192)
	checkGood(t, c)
	require.Equal(t, make([]byte, 8192), c.DataIn)
	checkSense(t, exec(m, cdb10(0x28, 0, 127, 2), nil, 8192), lbaOutOfRange)
}
