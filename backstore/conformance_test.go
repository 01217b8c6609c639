package backstore

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// impl describes one backstore for the conformance suite.
type impl struct {
	name string
	// open returns a new, zero-filled store of size bytes with logical block lbs.
	open func(t *testing.T, size int64, lbs uint32) Backstore
	// openReadOnly returns a read-only store whose whole content is fillPattern(seed 7); nil
	// for stores that have no read-only mode.
	openReadOnly func(t *testing.T, size int64, lbs uint32) Backstore
	// persists is false for Null: written data is dropped and everything reads as zeroes.
	persists bool
	// mapping is what the store says through Mapper: "sparse" (a new store is one hole,
	// written blocks are mapped, unmapped ones holes again), "mapped" (every block mapped
	// whatever happens), or "" for a store that does not implement Mapper.
	mapping string
}

func conformanceImpls() []impl {
	openFile := func(direct bool) func(t *testing.T, size int64, lbs uint32) Backstore {
		return func(t *testing.T, size int64, lbs uint32) Backstore {
			f, err := OpenFile(filepath.Join(t.TempDir(), "disk.img"),
				FileOptions{Size: size, Create: true, LogicalBlockSize: lbs, Direct: direct})
			require.NoError(t, err)
			return f
		}
	}
	openFileRO := func(direct bool) func(t *testing.T, size int64, lbs uint32) Backstore {
		return func(t *testing.T, size int64, lbs uint32) Backstore {
			path := filepath.Join(t.TempDir(), "ro.img")
			data := make([]byte, size)
			fillPattern(data, 0, 7)
			require.NoError(t, os.WriteFile(path, data, 0o600))
			f, err := OpenFile(path, FileOptions{ReadOnly: true, LogicalBlockSize: lbs, Direct: direct})
			require.NoError(t, err)
			return f
		}
	}
	openBlock := func(t *testing.T, size int64, lbs uint32) Backstore {
		lo := attachLoop(t, size, lbs)
		b, err := OpenBlock(lo.path, BlockOptions{})
		require.NoError(t, err)
		return b
	}
	openBlockRO := func(t *testing.T, size int64, lbs uint32) Backstore {
		lo := attachLoop(t, size, lbs)
		data := make([]byte, size)
		fillPattern(data, 0, 7)
		require.NoError(t, os.WriteFile(lo.path, data, 0))
		b, err := OpenBlock(lo.path, BlockOptions{ReadOnly: true})
		require.NoError(t, err)
		return b
	}
	return append([]impl{
		{name: "memory", persists: true, mapping: "sparse", open: func(t *testing.T, size int64, lbs uint32) Backstore {
			m, err := NewMemory(size, lbs)
			require.NoError(t, err)
			return m
		}},
		{name: "null", persists: false, open: func(t *testing.T, size int64, lbs uint32) Backstore {
			n, err := NewNull(size, lbs)
			require.NoError(t, err)
			return n
		}},
		{name: "file", persists: true, mapping: "sparse", open: openFile(false), openReadOnly: openFileRO(false)},
		{name: "file-direct", persists: true, mapping: "sparse", open: openFile(true), openReadOnly: openFileRO(true)},
		{name: "block", persists: true, mapping: "mapped", open: openBlock, openReadOnly: openBlockRO},
	}, moreConformanceImpls...)
}

// moreConformanceImpls are stores that need more than this machine (RBD: a cluster, make test-rbd).
var moreConformanceImpls []impl

const confSize = 6 << 20 // six memory chunks

func TestConformance(t *testing.T) {
	for _, im := range conformanceImpls() {
		for _, lbs := range []uint32{512, 4096} {
			t.Run(fmt.Sprintf("%s/lbs%d", im.name, lbs), func(t *testing.T) {
				runConformance(t, im, lbs)
			})
		}
	}
}

// model is what the store should hold; for a store that does not persist it stays zero.
type model struct {
	data     []byte
	persists bool
}

func (m *model) write(p []byte, off int64) {
	if m.persists {
		copy(m.data[off:], p)
	}
}

func (m *model) zero(off, length int64) { clear(m.data[off : off+length]) }

// check reads the whole store, through a buffer full of junk, and compares it with the model.
func (m *model) check(t *testing.T, bs Backstore) {
	t.Helper()
	got := bytes.Repeat([]byte{0xee}, len(m.data))
	require.NoError(t, bs.ReadAt(got, 0))
	if !bytes.Equal(m.data, got) {
		for i := range got {
			if got[i] != m.data[i] {
				t.Fatalf("store differs from model first at byte %d: got %#x, want %#x", i, got[i], m.data[i])
			}
		}
	}
}

func runConformance(t *testing.T, im impl, lbs uint32) {
	B := int64(lbs)
	const MiB = 1 << 20

	t.Run("geometry", func(t *testing.T) {
		bs := im.open(t, confSize, lbs)
		defer bs.Close()
		require.Equal(t, int64(confSize), bs.Size())
		require.Equal(t, lbs, bs.LogicalBlockSize())
		pbs := bs.PhysicalBlockSize()
		require.GreaterOrEqual(t, pbs, lbs)
		require.Zero(t, pbs%lbs)
		require.False(t, bs.ReadOnly())
		size, err := bs.Refresh()
		require.NoError(t, err)
		require.Equal(t, int64(confSize), size)
	})

	t.Run("mapping", func(t *testing.T) {
		bs := im.open(t, confSize, lbs)
		mp, ok := bs.(Mapper)
		if im.mapping == "" {
			require.False(t, ok, "%s implements Mapper", im.name)
			require.NoError(t, bs.Close())
			return
		}
		require.True(t, ok, "%s does not implement Mapper", im.name)
		type extent struct {
			mapped   bool
			off, end int64
		}
		// extents walks the whole store and checks that the runs tile it in whole blocks.
		extents := func() []extent {
			var out []extent
			for off := int64(0); off < confSize; {
				mapped, end, err := mp.Mapping(off, confSize)
				require.NoError(t, err)
				require.Greater(t, end, off)
				require.LessOrEqual(t, end, int64(confSize))
				require.Zero(t, end%B, "run end %d is not a whole block", end)
				if n := len(out); n > 0 && out[n-1].mapped == mapped {
					t.Fatalf("runs [%d,%d) and [%d,%d) have the same state %v: not maximal", out[n-1].off, out[n-1].end, off, end, mapped)
				}
				out = append(out, extent{mapped, off, end})
				off = end
			}
			return out
		}
		mappedAt := func(off int64) bool {
			mapped, end, err := mp.Mapping(off, B)
			require.NoError(t, err)
			require.Equal(t, off+B, end, "the limit bounds the run")
			return mapped
		}
		// holesReadZero checks that every run reported as a hole reads back as zeroes.
		holesReadZero := func() {
			for _, e := range extents() {
				if e.mapped {
					continue
				}
				got := make([]byte, e.end-e.off)
				require.NoError(t, bs.ReadAt(got, e.off))
				require.Equal(t, -1, bytes.IndexFunc(got, func(r rune) bool { return r != 0 }), "hole [%d,%d) holds data", e.off, e.end)
			}
		}

		sparse := im.mapping == "sparse"
		require.Equal(t, []extent{{!sparse, 0, confSize}}, extents(), "a new store")

		p := alignedBuf(t, int(B))
		fillPattern(p, 2*MiB+3*B, 1)
		require.NoError(t, bs.WriteAt(p, 2*MiB+3*B, false))
		require.True(t, mappedAt(2*MiB+3*B), "a written block")
		require.Equal(t, !sparse, mappedAt(0), "a block never written")
		require.Equal(t, !sparse, mappedAt(confSize-B), "the last block, never written")
		holesReadZero()

		require.NoError(t, bs.Unmap(2*MiB, MiB))
		require.Equal(t, !sparse, mappedAt(2*MiB+3*B), "an unmapped block")
		require.Equal(t, []extent{{!sparse, 0, confSize}}, extents(), "everything unmapped again")

		// Out of range and bad limits.
		for _, c := range []struct{ off, limit int64 }{{confSize, B}, {-B, B}, {0, 0}, {0, -1}} {
			_, _, err := mp.Mapping(c.off, c.limit)
			require.ErrorIs(t, err, ErrOutOfRange, "off %d limit %d", c.off, c.limit)
		}
		_, end, err := mp.Mapping(confSize-B, math.MaxInt64)
		require.NoError(t, err)
		require.Equal(t, int64(confSize), end, "a limit past the end stops at the end")

		require.NoError(t, bs.Close())
		_, _, err = mp.Mapping(0, B)
		require.ErrorIs(t, err, ErrClosed)
	})

	t.Run("data", func(t *testing.T) {
		bs := im.open(t, confSize, lbs)
		defer bs.Close()
		m := &model{data: make([]byte, confSize), persists: im.persists}
		m.check(t, bs)
		caps := bs.Capabilities()

		type step struct {
			name    string
			op      string // write, fua, unmap, zero, flush
			off     int64
			length  int64
			aligned bool // page-aligned buffer (else deliberately unaligned)
		}
		steps := []step{
			{name: "first block", op: "write", off: 0, length: B, aligned: true},
			{name: "last block", op: "fua", off: confSize - B, length: B, aligned: true},
			{name: "unaligned buffer", op: "write", off: 3 * B, length: 5 * B},
			{name: "across chunk boundary", op: "write", off: MiB - 2*B, length: 4 * B, aligned: true},
			{name: "fua across chunk boundary unaligned", op: "fua", off: 2*MiB - B, length: 2 * B},
			{name: "large multi-chunk", op: "write", off: MiB + 7*B, length: 3 * MiB, aligned: true},
			{name: "overwrite middle", op: "fua", off: 2 * MiB, length: 64 << 10, aligned: true},
			{name: "flush", op: "flush"},
			{name: "unmap inside one chunk", op: "unmap", off: MiB + 8*B, length: 16 * B},
			{name: "unmap whole chunk and parts of neighbours", op: "unmap", off: 2*MiB - 4*B, length: MiB + 8*B},
			{name: "write zeroes partial", op: "zero", off: 4*MiB - 2*B, length: 5 * B},
			{name: "rewrite unmapped", op: "write", off: 2 * MiB, length: 8 * B, aligned: true},
			{name: "write zeroes to the end", op: "zero", off: 3 * MiB, length: confSize - 3*MiB},
			{name: "zero length unmap", op: "unmap", off: B, length: 0},
			{name: "fill end again", op: "write", off: confSize - 2*MiB, length: 2 * MiB, aligned: true},
			{name: "write zeroes whole store", op: "zero", off: 0, length: confSize},
		}
		for i, s := range steps {
			switch s.op {
			case "write", "fua":
				var p []byte
				if s.aligned {
					p = alignedBuf(t, int(s.length))
				} else {
					p = unalignedBuf(int(s.length))
				}
				fillPattern(p, s.off, byte(i))
				require.NoError(t, bs.WriteAt(p, s.off, s.op == "fua"), s.name)
				m.write(p, s.off)

				// Read the range back on its own, into the same kind of buffer.
				var got []byte
				if s.aligned {
					got = alignedBuf(t, int(s.length))
				} else {
					got = unalignedBuf(int(s.length))
				}
				require.NoError(t, bs.ReadAt(got, s.off), s.name)
				require.True(t, bytes.Equal(m.data[s.off:s.off+s.length], got), s.name)
			case "flush":
				require.NoError(t, bs.Flush(), s.name)
			case "unmap":
				require.NoError(t, bs.Unmap(s.off, s.length), s.name)
				if !caps.UnmapZeroes {
					// What unmapped blocks read as is the device's business; make it known.
					require.NoError(t, bs.WriteZeroes(s.off, s.length), s.name)
				}
				m.zero(s.off, s.length)
			case "zero":
				require.NoError(t, bs.WriteZeroes(s.off, s.length), s.name)
				m.zero(s.off, s.length)
			}
			m.check(t, bs)
		}
	})

	t.Run("out of range", func(t *testing.T) {
		bs := im.open(t, confSize, lbs)
		defer bs.Close()
		cases := []struct {
			name        string
			off, length int64
		}{
			{"negative offset", -B, B},
			{"at the end", confSize, B},
			{"straddles the end", confSize - B, 2 * B},
			{"far beyond", 1 << 40, B},
			{"offset+length overflows", math.MaxInt64 - B + 1, 2 * B},
		}
		p := make([]byte, 2*B)
		for _, c := range cases {
			buf := p[:c.length]
			require.ErrorIs(t, bs.ReadAt(buf, c.off), ErrOutOfRange, c.name)
			require.ErrorIs(t, bs.WriteAt(buf, c.off, false), ErrOutOfRange, c.name)
			require.ErrorIs(t, bs.WriteAt(buf, c.off, true), ErrOutOfRange, c.name)
			require.ErrorIs(t, bs.Unmap(c.off, c.length), ErrOutOfRange, c.name)
			require.ErrorIs(t, bs.WriteZeroes(c.off, c.length), ErrOutOfRange, c.name)
		}
		require.ErrorIs(t, bs.Unmap(0, -B), ErrOutOfRange, "negative length")
		require.ErrorIs(t, bs.WriteZeroes(0, -B), ErrOutOfRange, "negative length")
		require.Equal(t, int64(confSize), bs.Size(), "a refused write must not grow the store")
	})

	if im.openReadOnly != nil {
		t.Run("read only", func(t *testing.T) {
			bs := im.openReadOnly(t, confSize, lbs)
			defer bs.Close()
			require.True(t, bs.ReadOnly())
			want := make([]byte, confSize)
			fillPattern(want, 0, 7)
			got := make([]byte, confSize)
			require.NoError(t, bs.ReadAt(got, 0))
			require.True(t, bytes.Equal(want, got))

			p := make([]byte, B)
			require.ErrorIs(t, bs.WriteAt(p, 0, false), unix.EROFS)
			require.ErrorIs(t, bs.WriteAt(p, B, true), unix.EROFS)
			require.ErrorIs(t, bs.Unmap(0, B), unix.EROFS)
			require.ErrorIs(t, bs.WriteZeroes(0, B), unix.EROFS)
			require.NoError(t, bs.Flush())
			require.NoError(t, bs.ReadAt(got, 0))
			require.True(t, bytes.Equal(want, got), "refused writes changed the data")
		})
	}

	t.Run("closed", func(t *testing.T) {
		bs := im.open(t, confSize, lbs)
		require.NoError(t, bs.Close())
		p := make([]byte, B)
		require.ErrorIs(t, bs.ReadAt(p, 0), ErrClosed)
		require.ErrorIs(t, bs.WriteAt(p, 0, false), ErrClosed)
		require.ErrorIs(t, bs.WriteAt(p, 0, true), ErrClosed)
		require.ErrorIs(t, bs.Flush(), ErrClosed)
		require.ErrorIs(t, bs.Unmap(0, B), ErrClosed)
		require.ErrorIs(t, bs.WriteZeroes(0, B), ErrClosed)
		_, err := bs.Refresh()
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, bs.Close(), ErrClosed)
	})

	t.Run("close while busy", func(t *testing.T) {
		// Close is not meant to race with I/O, but if it does, the I/O must fail cleanly with
		// ErrClosed rather than touch a closed (or reused) descriptor or freed memory.
		bs := im.open(t, confSize, lbs)
		var wg sync.WaitGroup
		started := make(chan struct{}, 4)
		errs := make(chan error, 4)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := make([]byte, 8*B)
				off := int64(w) * MiB
				for i := 0; ; i++ {
					var err error
					if w%2 == 0 {
						err = bs.WriteAt(p, off, i%2 == 0)
					} else {
						err = bs.ReadAt(p, off)
					}
					if i == 0 {
						started <- struct{}{}
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for w := 0; w < 4; w++ {
			<-started
		}
		require.NoError(t, bs.Close())
		wg.Wait()
		close(errs)
		for err := range errs {
			require.ErrorIs(t, err, ErrClosed)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		bs := im.open(t, confSize, lbs)
		defer bs.Close()
		// Workers own disjoint ranges that straddle chunk boundaries; each writes, reads back
		// and zeroes its range over and over while the others do the same.
		const workers = 6
		region := int64(confSize / workers)
		var g errgroup.Group
		for w := 0; w < workers; w++ {
			p := unalignedBuf(int(16 * B))
			if w%2 == 0 {
				p = alignedBuf(t, int(16*B))
			}
			g.Go(func() error {
				base := int64(w)*region + region/2 - 8*B
				got := make([]byte, len(p))
				for iter := 0; iter < 40; iter++ {
					off := base + int64(iter%4)*B
					fillPattern(p, off, byte(iter))
					if err := bs.WriteAt(p, off, iter%3 == 0); err != nil {
						return err
					}
					if err := bs.ReadAt(got, off); err != nil {
						return err
					}
					want := p
					if !im.persists {
						want = make([]byte, len(p))
					}
					if !bytes.Equal(want, got) {
						return fmt.Errorf("worker %d iteration %d: read back wrong data", w, iter)
					}
					if iter%5 == 4 {
						if err := bs.WriteZeroes(off, 4*B); err != nil {
							return err
						}
						if err := bs.Flush(); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}
		require.NoError(t, g.Wait())
	})
}

// TestErrorsCarryContext checks the shape of errors: the operation and offset for people, the
// sentinel or errno for code.
func TestErrorsCarryContext(t *testing.T) {
	m, err := NewMemory(1<<20, 512)
	require.NoError(t, err)
	err = m.ReadAt(make([]byte, 512), 1<<20)
	require.ErrorIs(t, err, ErrOutOfRange)
	require.Contains(t, err.Error(), "read of 512 bytes at 1048576")
	require.False(t, errors.Is(err, ErrClosed))
}
