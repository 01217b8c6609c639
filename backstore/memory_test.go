package backstore

import (
	"bytes"
	"errors"
	"math"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

func TestNewMemoryAndNullArguments(t *testing.T) {
	cases := []struct {
		name    string
		size    int64
		lbs     uint32
		wantErr string
		wantLBS uint32
	}{
		{"defaults to 512-byte blocks", 1 << 20, 0, "", 512},
		{"4096-byte blocks", 1 << 20, 4096, "", 4096},
		{"size smaller than a block", 2048, 4096, "not a positive multiple", 0},
		{"zero size", 0, 512, "not a positive multiple", 0},
		{"negative size", -512, 512, "not a positive multiple", 0},
		{"partial block", 1<<20 + 1, 512, "not a positive multiple", 0},
		{"block size not a power of two", 1 << 20, 1000, "logical block size 1000", 0},
		{"block size too small", 1 << 20, 256, "logical block size 256", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, merr := NewMemory(c.size, c.lbs)
			n, nerr := NewNull(c.size, c.lbs)
			if c.wantErr != "" {
				require.ErrorContains(t, merr, c.wantErr)
				require.ErrorContains(t, nerr, c.wantErr)
				require.Nil(t, m)
				require.Nil(t, n)
				return
			}
			require.NoError(t, merr)
			require.NoError(t, nerr)
			require.Equal(t, c.wantLBS, m.LogicalBlockSize())
			require.Equal(t, c.wantLBS, n.LogicalBlockSize())
			require.Equal(t, c.size, m.Size())
			require.Equal(t, c.size, n.Size())
		})
	}
}

func TestMemoryAllocatesOnlyWhatIsWritten(t *testing.T) {
	const MiB = memChunkSize
	// 5.5 MiB: the last chunk is partial.
	m, err := NewMemory(5*MiB+MiB/2, 512)
	require.NoError(t, err)
	require.Zero(t, m.Allocated())

	p := make([]byte, 4096)
	require.NoError(t, m.ReadAt(p, 0))
	require.Zero(t, m.Allocated(), "a read allocated")

	steps := []struct {
		name          string
		do            func() error
		wantAllocated int64
	}{
		{"one block", func() error { return m.WriteAt(bytes.Repeat([]byte{1}, 512), 4096, false) }, 1 * MiB},
		{"same chunk again", func() error { return m.WriteAt(bytes.Repeat([]byte{2}, 512), 8192, true) }, 1 * MiB},
		{"across a boundary", func() error { return m.WriteAt(bytes.Repeat([]byte{3}, 1024), 2*MiB-512, false) }, 3 * MiB},
		{"partial unmap keeps the chunk", func() error { return m.Unmap(2*MiB-512, 512) }, 3 * MiB},
		{"whole-chunk unmap frees it", func() error { return m.Unmap(MiB, MiB) }, 2 * MiB},
		{"unmap of unallocated chunks", func() error { return m.Unmap(3*MiB, 2*MiB) }, 2 * MiB},
		{"write the partial last chunk", func() error { return m.WriteAt(bytes.Repeat([]byte{4}, 512), 5*MiB+4096, false) }, 3 * MiB},
		{"write zeroes to the end frees the partial chunk", func() error { return m.WriteZeroes(5*MiB, MiB/2) }, 2 * MiB},
		{"write zeroes over everything", func() error { return m.WriteZeroes(0, m.Size()) }, 0},
	}
	for _, s := range steps {
		require.NoError(t, s.do(), s.name)
		require.Equal(t, s.wantAllocated, m.Allocated(), s.name)
	}
	all := make([]byte, m.Size())
	require.NoError(t, m.ReadAt(all, 0))
	require.Equal(t, make([]byte, m.Size()), all)

	require.NoError(t, m.WriteAt(p, 0, false))
	require.NoError(t, m.Close())
	require.Zero(t, m.Allocated())
	require.ErrorIs(t, m.Resize(MiB), ErrClosed)
}

func TestMemoryResize(t *testing.T) {
	const MiB = memChunkSize
	m, err := NewMemory(3*MiB, 512)
	require.NoError(t, err)
	data := make([]byte, 3*MiB)
	fillPattern(data, 0, 1)
	require.NoError(t, m.WriteAt(data, 0, false))
	require.Equal(t, int64(3*MiB), m.Allocated())

	// Grow: old data kept, new space zero, capacity reported.
	require.NoError(t, m.Resize(5*MiB))
	require.Equal(t, int64(5*MiB), m.Size())
	size, err := m.Refresh()
	require.NoError(t, err)
	require.Equal(t, int64(5*MiB), size)
	got := make([]byte, 5*MiB)
	require.NoError(t, m.ReadAt(got, 0))
	require.Equal(t, data, got[:3*MiB])
	require.Equal(t, make([]byte, 2*MiB), got[3*MiB:])

	// Shrink into the middle of a chunk: data beyond is gone, and the chunks past the end
	// are given back.
	require.NoError(t, m.Resize(MiB+4096))
	require.Equal(t, int64(2*MiB), m.Allocated())
	require.ErrorIs(t, m.ReadAt(make([]byte, 512), MiB+4096), ErrOutOfRange)
	require.ErrorIs(t, m.WriteAt(make([]byte, 512), MiB+4096, false), ErrOutOfRange)

	// Grow again: what the shrink cut off reads as zeroes, even inside the kept chunk.
	require.NoError(t, m.Resize(3*MiB))
	got = make([]byte, 3*MiB)
	require.NoError(t, m.ReadAt(got, 0))
	require.Equal(t, data[:MiB+4096], got[:MiB+4096])
	require.Equal(t, make([]byte, 2*MiB-4096), got[MiB+4096:])

	for _, bad := range []int64{0, -512, 1000} {
		require.ErrorContains(t, m.Resize(bad), "not a positive multiple")
	}
	require.Equal(t, int64(3*MiB), m.Size())
}

// TestMemoryResizeUnderLoad resizes back and forth above a range that other goroutines keep
// writing and reading: their I/O never fails, sees only its own data, and the race detector
// watches the table swap.
func TestMemoryResizeUnderLoad(t *testing.T) {
	const MiB = memChunkSize
	m, err := NewMemory(4*MiB, 512)
	require.NoError(t, err)
	var g errgroup.Group
	var rounds atomic.Int64
	stop := make(chan struct{})
	for w := 0; w < 3; w++ {
		g.Go(func() error {
			off := int64(w)*MiB/2 + MiB/4 // straddles chunk boundaries, below 2 MiB
			p := make([]byte, 64<<10)
			got := make([]byte, len(p))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return nil
				default:
				}
				fillPattern(p, off, byte(i))
				if err := m.WriteAt(p, off, false); err != nil {
					return err
				}
				if err := m.ReadAt(got, off); err != nil {
					return err
				}
				if !bytes.Equal(p, got) {
					return errors.New("read back data that was not written")
				}
				rounds.Add(1)
			}
		})
	}
	for i := 0; i < 200 || rounds.Load() < 300; i++ {
		require.NoError(t, m.Resize(int64(2+i%5)*MiB))
	}
	close(stop)
	require.NoError(t, g.Wait())
}

func TestNullReadsZeroes(t *testing.T) {
	n, err := NewNull(1<<20, 512)
	require.NoError(t, err)
	p := bytes.Repeat([]byte{0xff}, 4096)
	require.NoError(t, n.WriteAt(p, 0, true))
	require.NoError(t, n.ReadAt(p, 0))
	require.Equal(t, make([]byte, 4096), p)
	require.Equal(t, Capabilities{Unmap: true, UnmapZeroes: true, NonRotational: true}, n.Capabilities())
}

// TestMemoryHugeIsLazy: the chunk table is made as it is written, so a disk far larger than
// RAM costs nothing until it is written, and a shrink frees only what was written.
func TestMemoryHugeIsLazy(t *testing.T) {
	const MiB = memChunkSize
	sizes := []struct {
		name string
		size int64
	}{
		{"100 PiB", 100 << 50},
		{"the largest int64 multiple of 512", math.MaxInt64 &^ 511},
	}
	for _, tc := range sizes {
		t.Run(tc.name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			m, err := NewMemory(tc.size, 512)
			require.NoError(t, err)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "NewMemory allocated in proportion to the size")

			end := tc.size - 4096
			p := bytes.Repeat([]byte{7}, 4096)
			require.NoError(t, m.WriteAt(p, end, false))
			require.NoError(t, m.WriteAt(p, 0, false))
			require.Equal(t, int64(2*MiB), m.Allocated())
			got := make([]byte, 4096)
			require.NoError(t, m.ReadAt(got, end))
			require.Equal(t, p, got)
			require.NoError(t, m.ReadAt(got, tc.size/2))
			require.Equal(t, make([]byte, 4096), got, "a chunk never written reads as zeroes")

			require.NoError(t, m.Resize(16*MiB))
			require.Equal(t, int64(MiB), m.Allocated(), "the shrink kept the chunk at the old end")
			require.NoError(t, m.Resize(tc.size))
			require.NoError(t, m.ReadAt(got, end))
			require.Equal(t, make([]byte, 4096), got, "space added back reads as zeroes")
			require.NoError(t, m.Close())
		})
	}
}

// TestMemoryMappingSkipsAbsentLevels checks the chunk map walk across levels of the chunk table
// that were never made: a hole of many TiB before a written chunk, and the mapped run after it.
func TestMemoryMappingSkipsAbsentLevels(t *testing.T) {
	const size = 1 << 50 // 1 PiB: 64 top-level slots of 16 TiB
	m, err := NewMemory(size, 512)
	require.NoError(t, err)
	defer m.Close()
	const at = 100<<40 + 5<<30 + 3<<20 + 4096 // inside chunk 100 TiB + 5 GiB + 3 MiB
	require.NoError(t, m.WriteAt(make([]byte, 2<<20), at, false))
	chunk := int64(at) &^ (memChunkSize - 1)

	for _, c := range []struct {
		off, limit int64
		mapped     bool
		end        int64
	}{
		{0, size, false, chunk},
		{chunk - 512, size, false, chunk},
		{chunk, size, true, chunk + 3<<20}, // the 2 MiB from at touch three chunks
		{chunk + 512, 1024, true, chunk + 1536},
		{chunk + 3<<20, size, false, size},
		{size - 512, size, false, size},
		{0, 1 << 20, false, 1 << 20},
	} {
		mapped, end, err := m.Mapping(c.off, c.limit)
		require.NoError(t, err)
		require.Equal(t, c.mapped, mapped, "off %d", c.off)
		require.Equal(t, c.end, end, "off %d", c.off)
	}
}
