package scsi

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

// writeAtomicCDB is WRITE ATOMIC(16) with byte 1 b1, LBA, ATOMIC BOUNDARY and TRANSFER LENGTH.
func writeAtomicCDB(b1 byte, lba uint64, boundary, n uint16) []byte {
	cdb := make([]byte, 16)
	cdb[0], cdb[1] = 0x9C, b1
	binary.BigEndian.PutUint64(cdb[2:], lba)
	binary.BigEndian.PutUint16(cdb[10:], boundary)
	binary.BigEndian.PutUint16(cdb[12:], n)
	return cdb
}

// TestAtomicLimitsOf checks the Block Limits fields made of what a backstore can do: any length
// (RAM) gives only a maximum; RWF_ATOMIC's powers of two give one size as maximum, alignment
// and granularity, the largest the transfer limit allows and no smaller than the store's
// minimum.
func TestAtomicLimitsOf(t *testing.T) {
	kernel := func(min, max int64) backstore.AtomicLimits {
		return backstore.AtomicLimits{MinBytes: min, MaxBytes: max, PowerOfTwo: true}
	}
	for _, tc := range []struct {
		l           backstore.AtomicLimits
		shift       uint
		maxTransfer uint32
		want        atomicLimits
	}{
		{backstore.AtomicLimits{}, 9, 0, atomicLimits{}},
		{backstore.AtomicLimits{MaxBytes: 16 << 20}, 9, 0, atomicLimits{max: 32768}},
		{backstore.AtomicLimits{MaxBytes: 16 << 20}, 9, 8 << 20, atomicLimits{max: 16384}},
		{backstore.AtomicLimits{MaxBytes: 64 << 20}, 9, 0, atomicLimits{max: 0xFFFF}}, // TRANSFER LENGTH has 16 bits
		{kernel(4096, 1<<20), 9, 8 << 20, atomicLimits{2048, 2048, 2048}},
		{kernel(4096, 1<<20), 12, 8 << 20, atomicLimits{256, 256, 256}},
		{kernel(4096, 1<<20), 9, 96 << 10, atomicLimits{128, 128, 128}}, // 64 KiB: the largest power of two in 96 KiB
		{kernel(4096, 1<<20), 9, 2048, atomicLimits{}},                  // 2 KiB transfers cannot hold the 4 KiB unit
		{kernel(512, 512), 12, 0, atomicLimits{}},                       // units smaller than a block
	} {
		require.Equal(t, tc.want, atomicLimitsOf(tc.l, tc.shift, tc.maxTransfer), "%+v shift %d max transfer %d", tc.l, tc.shift, tc.maxTransfer)
	}
}

// TestWriteAtomic16 checks WRITE ATOMIC(16) (SBC-4 5.48) on a RAM logical unit: the data is
// written with the atomic write, the Block Limits page says so, and each refusal has its
// sense data with nothing written: LBA ranges as libiscsi's WriteAtomic16.BeyondEol and
// .ZeroBlocks probe them, the ATOMIC BOUNDARY, the maximum, WRPROTECT, the reserved bits and a
// short data-out buffer.
func TestWriteAtomic16(t *testing.T) {
	const blocks = 1024
	_, m, mem := newMemLU(t, blocks, 512, func(c *Config) { c.MaxTransferBytes = 64 << 10 })
	before := testutil.Pattern(blocks*512, 8)
	writeMedium(t, mem, 0, before)
	want := append([]byte(nil), before...)

	c := exec(m, vpdCDB(0xB0, 64), nil, 64)
	checkGood(t, c)
	require.Equal(t, []byte{0, 0, 0, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, data(c)[44:64],
		"MAXIMUM ATOMIC TRANSFER LENGTH 128 (the transfer limit), no alignment, granularity or boundaries")

	for _, tc := range []struct {
		b1     byte
		lba    uint64
		n      uint16
		fua    bool
		expect any // nil: GOOD
	}{
		{0x00, 0, 1, false, nil},
		{0x18, 100, 128, true, nil},           // DPO, FUA
		{0x00, blocks - 128, 128, false, nil}, // to the last block
		{0x00, 0, 0, false, nil},              // nothing
		{0x00, blocks - 1, 2, false, lbaOutOfRange},
		{0x00, blocks + 1, 0, false, lbaOutOfRange},
		{0x00, 1 << 63, 1, false, lbaOutOfRange},
		{0x00, ^uint64(0), 1, false, lbaOutOfRange},
		{0x00, 0, 129, false, invalidCDB(12, -1)},
		{0x20, 0, 1, false, invalidCDB(1, 7)},
		{0x04, 0, 1, false, invalidCDB(1, 2)},
		{0x01, 0, 1, false, invalidCDB(1, 0)},
	} {
		t.Run(fmt.Sprintf("%02x/%d/%d", tc.b1, tc.lba, tc.n), func(t *testing.T) {
			block := testutil.Pattern(int(tc.n)*512, int(tc.lba)+7)
			c := exec(m, writeAtomicCDB(tc.b1, tc.lba, 0, tc.n), block, 0)
			if tc.expect == nil {
				checkGood(t, c)
				require.Equal(t, int(tc.n)*512, c.TransferLength)
				copy(want[tc.lba*512:], block)
			} else {
				checkSense(t, c, tc.expect.(senseWant))
			}
			require.Equal(t, want, readMedium(t, mem, 0, blocks*512))
		})
	}
	checkSense(t, exec(m, writeAtomicCDB(0, 0, 8, 8), zeros(8*512), 0), invalidCDB(10, -1))
	checkSense(t, exec(m, writeAtomicCDB(0, 0, 0, 8), zeros(7*512), 0), invalidIU)
	require.Equal(t, want, readMedium(t, mem, 0, blocks*512))
}

// pow2Store is a RAM backstore that makes atomic writes only as RWF_ATOMIC does: powers of two
// from 4 KiB to 64 KiB at offsets that are multiples of the length. It records them.
type pow2Store struct {
	*backstore.Memory
	mu     sync.Mutex
	writes [][2]int64
}

func (s *pow2Store) AtomicLimits() backstore.AtomicLimits {
	return backstore.AtomicLimits{MinBytes: 4096, MaxBytes: 64 << 10, PowerOfTwo: true}
}

func (s *pow2Store) WriteAtomicAt(p []byte, off int64, fua bool) error {
	n := int64(len(p))
	if n < 4096 || n > 64<<10 || n&(n-1) != 0 || off%n != 0 {
		return fmt.Errorf("atomic write of %d bytes at %d does not fit", n, off)
	}
	s.mu.Lock()
	s.writes = append(s.writes, [2]int64{off, n})
	s.mu.Unlock()
	return s.Memory.WriteAtomicAt(p, off, fua)
}

// TestWriteAtomic16PowerOfTwo: over a store with RWF_ATOMIC's rule the logical unit accepts
// exactly the writes of the one size it advertises, at LBAs that are multiples of it, and
// refuses the others with INVALID FIELD IN CDB on the TRANSFER LENGTH or the LBA, as libiscsi's
// WriteAtomic16.VPD probes it. A store without atomic writes has no WRITE ATOMIC(16): INVALID
// COMMAND OPERATION CODE, not listed by REPORT SUPPORTED OPERATION CODES.
func TestWriteAtomic16PowerOfTwo(t *testing.T) {
	mem, err := backstore.NewMemory(1024*512, 512)
	require.NoError(t, err)
	st := &pow2Store{Memory: mem}
	_, m := newLUOver(t, st, nil)
	c := exec(m, vpdCDB(0xB0, 64), nil, 64)
	checkGood(t, c)
	require.Equal(t, []byte{0, 0, 0, 128, 0, 0, 0, 128, 0, 0, 0, 128}, data(c)[44:56], "64 KiB: maximum, alignment, granularity")

	checkGood(t, exec(m, writeAtomicCDB(0, 256, 0, 128), fill(128*512, 3), 0))
	checkSense(t, exec(m, writeAtomicCDB(0, 64, 0, 128), fill(128*512, 3), 0), invalidCDB(2, -1))
	checkSense(t, exec(m, writeAtomicCDB(0, 256, 0, 64), fill(64*512, 3), 0), invalidCDB(12, -1))
	checkSense(t, exec(m, writeAtomicCDB(0, 256, 0, 256), fill(256*512, 3), 0), invalidCDB(12, -1))
	require.Equal(t, [][2]int64{{256 * 512, 64 << 10}}, st.writes)
	require.Equal(t, fill(128*512, 3), readMedium(t, mem, 256*512, 128*512))

	mem2, err := backstore.NewMemory(64*512, 512)
	require.NoError(t, err)
	_, m2 := newLUOver(t, &capsStore{Backstore: mem2, caps: mem2.Capabilities()}, nil) // hides Memory's atomic writes
	checkSense(t, exec(m2, writeAtomicCDB(0, 0, 0, 1), zeros(512), 0), invalidOpcode)
	c = exec(m2, rsocCDB(false, 1, 0x9C, 0, 64), nil, 64)
	requireData(t, c, []byte{0, 0x01, 0, 0}, 4)
	c = exec(m2, vpdCDB(0xB0, 64), nil, 64)
	require.Equal(t, zeros(20), data(c)[44:64])
}

// TestWriteAtomic16Untorn runs WRITE ATOMIC(16) from two writers over overlapping ranges that
// straddle the RAM store's 1 MiB chunk boundary (LBA 2048), each write filling its range with
// one value of its own, while a reader reads the union of the ranges with READ(16) over and
// over. Every read must see each atomic write whole or not at all: the part only the first
// writer writes holds one value, the part only the second writes one value, and the part both
// write one of those two (or the value both parts still had before either writer came).
func TestWriteAtomic16Untorn(t *testing.T) {
	const blocks = 4096
	lu, m, _ := newMemLU(t, blocks, 512, nil)
	_ = lu
	const (
		aStart, aEnd = 1984, 2112 // writer A
		bStart, bEnd = 2048, 2176 // writer B
		rounds       = 400
	)
	var wg sync.WaitGroup
	writer := func(n *Nexus, start, end int, base byte) {
		defer wg.Done()
		buf := make([]byte, (end-start)*512)
		for i := 0; i < rounds; i++ {
			v := base + byte(i%100)
			for j := range buf {
				buf[j] = v
			}
			c := run(m, n, 0, writeAtomicCDB(0, uint64(start), 0, uint16(end-start)), buf, 0)
			if c.Status != StatusGood {
				t.Errorf("WRITE ATOMIC: status %v sense % x", c.Status, c.SenseData())
				return
			}
		}
	}
	uniform := func(b []byte) (byte, bool) {
		for _, x := range b {
			if x != b[0] {
				return 0, false
			}
		}
		return b[0], true
	}
	done := make(chan struct{})
	var reads int
	go func() {
		defer close(done)
		for i := 0; i < 3*rounds; i++ {
			c := run(m, testNexus, 0, cdb16(0x88, 0, aStart, bEnd-aStart), nil, (bEnd-aStart)*512)
			if c.Status != StatusGood {
				t.Errorf("READ: status %v", c.Status)
				return
			}
			d := data(c)
			onlyA, okA := uniform(d[:(bStart-aStart)*512])
			both, okB := uniform(d[(bStart-aStart)*512 : (aEnd-aStart)*512])
			onlyB, okC := uniform(d[(aEnd-aStart)*512:])
			if !okA || !okB || !okC || (both != onlyA && both != onlyB) {
				t.Errorf("read %d saw a torn atomic write: A-only %v/%v, both %v/%v, B-only %v/%v", i, onlyA, okA, both, okB, onlyB, okC)
				return
			}
			reads++
		}
	}()
	wg.Add(2)
	go writer(testNexus, aStart, aEnd, 1)
	go writer(otherNexus, bStart, bEnd, 101)
	wg.Wait()
	<-done
	require.Equal(t, 3*rounds, reads)
}
