package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
)

// TestOrWrite16 checks ORWRITE(16) (SBC-4 5.19) as libiscsi's OrWrite suite does, and more: each
// block becomes the OR of what it held and the block sent, across several scratch buffers, with
// FUA when asked; zero blocks is nothing; the refusals (ORPROTECT, the LBA range, the data-out
// length) change nothing.
func TestOrWrite16(t *testing.T) {
	const blocks = 1024
	_, m, rec := newRecordingLU(t, blocks, 512, nil)
	mem := rec.Backstore
	before := testutil.Pattern(blocks*512, 5)
	writeMedium(t, mem, 0, before)
	rec.take()

	in := testutil.Pattern(600*512, 9)
	c := exec(m, cdb16(0x8B, 0x08, 100, 600), in, 0) // FUA
	checkGood(t, c)
	require.Equal(t, 600*512, c.TransferLength)
	want := append([]byte(nil), before...)
	for i := range in {
		want[100*512+i] |= in[i]
	}
	require.Equal(t, want, readMedium(t, mem, 0, blocks*512))
	require.Equal(t, []ioRecord{
		{op: "read", off: 100 * 512, len: 128 << 10}, {op: "write", off: 100 * 512, len: 128 << 10, fua: true},
		{op: "read", off: 356 * 512, len: 128 << 10}, {op: "write", off: 356 * 512, len: 128 << 10, fua: true},
		{op: "read", off: 612 * 512, len: 88 * 512}, {op: "write", off: 612 * 512, len: 88 * 512, fua: true},
	}, rec.take())

	// libiscsi's OrWrite.Verify: zeroes, OR A5h, OR 5Ah: FFh.
	checkGood(t, exec(m, cdb10(0x2A, 0, 0, 4), zeros(4*512), 0))
	checkGood(t, exec(m, cdb16(0x8B, 0, 0, 4), fill(4*512, 0xA5), 0))
	require.Equal(t, fill(4*512, 0xA5), readMedium(t, mem, 0, 4*512))
	checkGood(t, exec(m, cdb16(0x8B, 0x02, 0, 4), fill(4*512, 0x5A), 0)) // FUA_NV: obsolete, ignored
	require.Equal(t, fill(4*512, 0xFF), readMedium(t, mem, 0, 4*512))
	rec.take()
	snapshot := readMedium(t, mem, 0, blocks*512)

	checkGood(t, exec(m, cdb16(0x8B, 0, 0, 0), nil, 0))
	for _, tc := range []struct {
		cdb  []byte
		out  []byte
		want senseWant
	}{
		{cdb16(0x8B, 0x20, 0, 1), zeros(512), invalidCDB(1, 7)},
		{cdb16(0x8B, 0x04, 0, 1), zeros(512), invalidCDB(1, 2)},
		{cdb16(0x8B, 0, blocks+1, 0), nil, lbaOutOfRange},
		{cdb16(0x8B, 0, 1<<63, 0), nil, lbaOutOfRange},
		{cdb16(0x8B, 0, blocks-1, 2), zeros(1024), lbaOutOfRange},
		{cdb16(0x8B, 0, 0, 2), zeros(512), invalidIU},
	} {
		checkSense(t, exec(m, tc.cdb, tc.out, 0), tc.want)
	}
	require.Empty(t, rec.take())
	require.Equal(t, snapshot, readMedium(t, mem, 0, blocks*512))
}
