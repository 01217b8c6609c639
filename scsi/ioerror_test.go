package scsi

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/internal/testutil/faultstore"
)

// newFaultyLU makes a logical unit of blocks × bs bytes over a memory backstore wrapped in the
// faulty backstore, with thin provisioning.
func newFaultyLU(t testing.TB, blocks int64, bs uint32, mod func(*Config)) (*LogicalUnit, *LUNMap, *faultstore.Faulty, *backstore.Memory) {
	t.Helper()
	mem, err := backstore.NewMemory(blocks*int64(bs), bs)
	require.NoError(t, err)
	f := faultstore.New(mem)
	lu, m := newLUOver(t, f, func(c *Config) {
		c.ThinProvisioning = true
		if mod != nil {
			mod(c)
		}
	})
	return lu, m, f, mem
}

// TestIOErrorsReadWrite checks how READ and WRITE failures of the backstore turn into sense data:
// the errno picks the sense key and codes, INFORMATION holds the first LBA of the failed I/O, and
// no data is returned.
func TestIOErrorsReadWrite(t *testing.T) {
	tests := []struct {
		name string
		op   faultstore.Op
		err  error
		cdb  []byte
		want senseWant
	}{
		{"read EIO", faultstore.OpRead, syscall.EIO, cdb10(0x28, 0, 3, 4), readErrorAt(3)},
		{"read16 EIO", faultstore.OpRead, syscall.EIO, cdb16(0x88, 0, 5, 1), readErrorAt(5)},
		{"read EBADMSG", faultstore.OpRead, syscall.EBADMSG, cdb10(0x28, 0, 4, 2), readErrorAt(4)},
		{"write EIO", faultstore.OpWrite, syscall.EIO, cdb10(0x2A, 0, 3, 4), writeErrorAt(3)},
		{"write ENOSPC", faultstore.OpWrite, syscall.ENOSPC, cdb10(0x2A, 0x08, 5, 1), spaceAllocationFailedAt(5)},
		{"write EDQUOT", faultstore.OpWrite, syscall.EDQUOT, cdb12(0xAA, 0, 2, 8), spaceAllocationFailedAt(2)},
		{"write EROFS", faultstore.OpWrite, syscall.EROFS, cdb16(0x8A, 0, 5, 1),
			senseWant{0x7, 0x27, 0x00, -1, -1, false, 5, true}},
		{"read closed", faultstore.OpRead, backstore.ErrClosed, cdb10(0x28, 0, 5, 1),
			senseWant{0x4, 0x08, 0x00, -1, -1, false, 5, true}},
		{"read ETIMEDOUT", faultstore.OpRead, syscall.ETIMEDOUT, cdb10(0x28, 0, 5, 1),
			senseWant{0x4, 0x08, 0x01, -1, -1, false, 5, true}},
		{"write ETIMEDOUT", faultstore.OpWrite, syscall.ETIMEDOUT, cdb10(0x2A, 0, 5, 1),
			senseWant{0x4, 0x08, 0x01, -1, -1, false, 5, true}},
		{"read ENOMEM", faultstore.OpRead, syscall.ENOMEM, cdb10(0x28, 0, 5, 1),
			senseWant{0x5, 0x55, 0x03, -1, -1, false, 5, true}},
		{"read out of range", faultstore.OpRead, backstore.ErrOutOfRange, cdb10(0x28, 0, 5, 1),
			senseWant{0x5, 0x21, 0x00, -1, -1, false, 5, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, m, f, mem := newFaultyLU(t, 64, 512, nil)
			before := testutil.Pattern(64*512, 1)
			writeMedium(t, mem, 0, before)
			f.Inject(tt.op, 5*512, 512, tt.err) // block 5 is bad
			var out []byte
			if tt.cdb[0] != 0x28 && tt.cdb[0] != 0x88 {
				n := int(tt.cdb[8]) // the 10-byte CDBs above
				switch tt.cdb[0] {
				case 0xAA:
					n = int(tt.cdb[9])
				case 0x8A:
					n = int(tt.cdb[13])
				}
				out = fill(n*512, 0xEE)
			}
			c := exec(m, tt.cdb, out, 4096)
			checkSense(t, c, tt.want)
			require.Zero(t, c.DataInLength)
			require.Equal(t, before, readMedium(t, mem, 0, 64*512), "a failed write must not reach the store")
			// Outside the bad block all is well.
			checkGood(t, exec(m, cdb10(0x28, 0, 6, 2), nil, 1024))
		})
	}
}

// TestIOErrorDescriptorSense checks the INFORMATION field of a medium error in descriptor format
// (D_SENSE=1), which holds a 64-bit LBA, byte by byte, and that the fixed format leaves VALID
// clear for an LBA it cannot hold (SPC-4 4.5.3).
func TestIOErrorDescriptorSense(t *testing.T) {
	null, err := backstore.NewNull(1<<42, 512) // 2^33 blocks
	require.NoError(t, err)
	f := faultstore.New(null)
	lu, m := newLUOver(t, f, nil)
	const lba = 0x1_0000_0005
	f.Inject(faultstore.OpRead, lba*512, 512, syscall.EIO)

	c := exec(m, cdb16(0x88, 0, lba, 1), nil, 512)
	require.Equal(t, StatusCheckCondition, c.Status)
	s := c.SenseData()
	require.Len(t, s, 18)
	require.Equal(t, byte(0x70), s[0], "VALID must be clear: the LBA needs more than 4 bytes")
	require.Equal(t, []byte{0x03, 0x11, 0x00}, []byte{s[2], s[12], s[13]})

	lu.mode.dSense.Store(true)
	c = exec(m, cdb16(0x88, 0, lba, 1), nil, 512)
	require.Equal(t, StatusCheckCondition, c.Status)
	require.Equal(t, []byte{
		0x72, 0x03, 0x11, 0x00, 0x00, 0x00, 0x00, 0x0C, // header, additional length 12
		0x00, 0x0A, 0x80, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05, // information
	}, c.SenseData())
}

// TestIOErrorsFlush checks that a failed flush (SYNCHRONIZE CACHE, START STOP UNIT with STOP) is a
// WRITE ERROR without INFORMATION.
func TestIOErrorsFlush(t *testing.T) {
	_, m, f, _ := newFaultyLU(t, 64, 512, nil)
	f.Inject(faultstore.OpFlush, 0, 0, syscall.EIO)
	checkSense(t, exec(m, cdb10(0x35, 0, 0, 0), nil, 0), writeErrorNoInfo)
	checkSense(t, exec(m, cdb16(0x91, 0x02, 10, 5), nil, 0), writeErrorNoInfo)
	checkSense(t, exec(m, []byte{0x1B, 0, 0, 0, 0x00, 0}, nil, 0), writeErrorNoInfo)
	checkGood(t, exec(m, []byte{0x1B, 0, 0, 0, 0x04, 0}, nil, 0)) // NO_FLUSH
	checkGood(t, exec(m, []byte{0x1B, 0, 0, 0, 0x01, 0}, nil, 0)) // START
	f.Clear()
	checkGood(t, exec(m, cdb10(0x35, 0, 0, 0), nil, 0))
	f.Inject(faultstore.OpFlush, 0, 0, syscall.ENOSPC)
	checkSense(t, exec(m, cdb10(0x35, 0, 0, 0), nil, 0), senseWant{0x7, 0x27, 0x07, -1, -1, false, 0, false})
}

// TestIOErrorsVerify checks that VERIFY and WRITE AND VERIFY name the bad block itself in
// INFORMATION, also when it lies deep inside a range read in large chunks.
func TestIOErrorsVerify(t *testing.T) {
	forBlockSizes(t, func(t *testing.T, bs int) {
		_, m, f, mem := newFaultyLU(t, 400, uint32(bs), nil)
		data := testutil.Pattern(300*bs, 4)
		writeMedium(t, mem, 0, data)
		f.Inject(faultstore.OpRead, 123*int64(bs), int64(bs), syscall.EIO)

		checkSense(t, exec(m, cdb10(0x2F, 0x00, 0, 300), nil, 0), readErrorAt(123))
		checkSense(t, exec(m, cdb16(0x8F, 0x02, 100, 200), data[100*bs:], 0), readErrorAt(123))
		checkSense(t, exec(m, cdb10(0x2F, 0x06, 120, 10), data[:bs], 0), readErrorAt(123))
		checkGood(t, exec(m, cdb10(0x2F, 0x00, 124, 176), nil, 0))

		// WRITE AND VERIFY: the write lands, the read-back fails.
		blk := fill(3*bs, 0x31)
		checkSense(t, exec(m, cdb10(0x2E, 0x02, 122, 3), blk, 0), readErrorAt(123))
		require.Equal(t, blk, readMedium(t, mem, 122*int64(bs), 3*bs))
		f.Inject(faultstore.OpWrite, 200*int64(bs), int64(bs), syscall.EIO)
		checkSense(t, exec(m, cdb16(0x8E, 0x00, 199, 2), fill(2*bs, 1), 0), writeErrorAt(199))
	})
}

// TestIOErrorsUnmapWriteSame checks failures of the backstore's Unmap, WriteZeroes and of the
// chunked pattern write: INFORMATION holds the first LBA of the call that failed.
func TestIOErrorsUnmapWriteSame(t *testing.T) {
	_, m, f, mem := newFaultyLU(t, 1024, 4096, nil)
	before := testutil.Pattern(1024*4096, 6)
	writeMedium(t, mem, 0, before)
	f.Inject(faultstore.OpUnmap|faultstore.OpWriteZeroes, 500*4096, 4096, syscall.EIO)

	// The first descriptor is unmapped, the second fails.
	list := unmapList([2]uint64{10, 2}, [2]uint64{498, 4})
	checkSense(t, exec(m, unmapCDB(uint16(len(list))), list, 0), writeErrorAt(498))
	require.Equal(t, make([]byte, 2*4096), readMedium(t, mem, 10*4096, 2*4096))
	require.Equal(t, before[498*4096:502*4096], readMedium(t, mem, 498*4096, 4*4096))

	checkSense(t, exec(m, cdb16(0x93, 0x01, 490, 20), nil, 0), writeErrorAt(490))
	checkSense(t, exec(m, cdb10(0x41, 0x08, 490, 20), make([]byte, 4096), 0), writeErrorAt(490))

	// A pattern write goes 32 blocks (128 KiB) at a time: the failing chunk starts at 480.
	f.Inject(faultstore.OpWrite, 500*4096, 4096, syscall.ENOSPC)
	checkSense(t, exec(m, cdb16(0x93, 0, 448, 100), fill(4096, 0x99), 0), spaceAllocationFailedAt(480))
	require.Equal(t, fill(32*4096, 0x99), readMedium(t, mem, 448*4096, 32*4096))
}

// TestIOErrorsCompareAndWrite checks that a read failure stops COMPARE AND WRITE before it writes,
// and that a write failure is reported as such.
func TestIOErrorsCompareAndWrite(t *testing.T) {
	_, m, f, mem := newFaultyLU(t, 64, 512, nil)
	f.Inject(faultstore.OpRead, 7*512, 512, syscall.EIO)
	checkSense(t, exec(m, cawCDB(0, 7, 1), append(make([]byte, 512), fill(512, 1)...), 0), readErrorAt(7))
	require.Equal(t, make([]byte, 512), readMedium(t, mem, 7*512, 512))
	f.Clear()
	f.Inject(faultstore.OpWrite, 9*512, 512, syscall.EIO)
	checkSense(t, exec(m, cawCDB(0, 8, 2), append(make([]byte, 1024), fill(1024, 1)...), 0), writeErrorAt(8))
}
