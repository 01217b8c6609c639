package backstore

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const benchSize = 64 << 20

func newBenchMemory(tb testing.TB) *Memory {
	m, err := NewMemory(benchSize, 512)
	require.NoError(tb, err)
	// Allocate every chunk, so that writes measure the steady state.
	require.NoError(tb, m.WriteAt(make([]byte, benchSize), 0, false))
	return m
}

func newBenchFile(tb testing.TB, direct bool) *File {
	f, err := OpenFile(filepath.Join(tb.TempDir(), "bench.img"),
		FileOptions{Size: benchSize, Create: true, Direct: direct})
	require.NoError(tb, err)
	tb.Cleanup(func() { f.Close() })
	p := alignedBuf(tb, 1<<20)
	for off := int64(0); off < benchSize; off += int64(len(p)) {
		require.NoError(tb, f.WriteAt(p, off, false))
	}
	return f
}

// TestZeroAllocs holds the data path to its promise: no allocation per transfer once the
// store is set up.
func TestZeroAllocs(t *testing.T) {
	mem := newBenchMemory(t)
	sparse, err := NewMemory(benchSize, 512)
	require.NoError(t, err)
	null, err := NewNull(benchSize, 512)
	require.NoError(t, err)
	file := newBenchFile(t, false)
	direct := newBenchFile(t, true)
	p := alignedBuf(t, 4096)

	cases := []struct {
		name string
		fn   func() error
	}{
		{"memory read", func() error { return mem.ReadAt(p, 8192) }},
		{"memory read of a hole", func() error { return sparse.ReadAt(p, 8192) }},
		{"memory write", func() error { return mem.WriteAt(p, 8192, false) }},
		{"memory fua write across chunks", func() error { return mem.WriteAt(p, memChunkSize-2048, true) }},
		{"null read", func() error { return null.ReadAt(p, 8192) }},
		{"null write", func() error { return null.WriteAt(p, 8192, true) }},
		{"file read", func() error { return file.ReadAt(p, 8192) }},
		{"file write", func() error { return file.WriteAt(p, 8192, false) }},
		{"file fua write", func() error { return file.WriteAt(p, 8192, true) }},
		{"direct file read", func() error { return direct.ReadAt(p, 8192) }},
		{"direct file fua write", func() error { return direct.WriteAt(p, 8192, true) }},
		{"direct file unaligned read", func() error { return direct.ReadAt(p[1:513], 8192) }},
	}
	for _, c := range cases {
		var err error
		allocs := testing.AllocsPerRun(50, func() {
			if e := c.fn(); e != nil {
				err = e
			}
		})
		require.NoError(t, err, c.name)
		require.Zero(t, allocs, c.name)
	}
}

func benchRead(b *testing.B, bs Backstore)  { benchIO(b, bs, false) }
func benchWrite(b *testing.B, bs Backstore) { benchIO(b, bs, true) }

// benchIO reads (or writes) 4 KiB at a time, 68 KiB apart, wrapping around the store. It
// branches on write rather than taking the transfer as a func, so that the figures include no
// indirect call the daemon would not make.
func benchIO(b *testing.B, bs Backstore, write bool) {
	p := alignedBuf(b, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	b.ResetTimer()
	var off int64
	for i := 0; i < b.N; i++ {
		var err error
		if write {
			err = bs.WriteAt(p, off, false)
		} else {
			err = bs.ReadAt(p, off)
		}
		if err != nil {
			b.Fatal(err)
		}
		off = (off + 4096*17) % benchSize
	}
}

func BenchmarkMemoryReadAt4K(b *testing.B) {
	b.Run("serial", func(b *testing.B) { benchRead(b, newBenchMemory(b)) })
	b.Run("parallel", func(b *testing.B) {
		m := newBenchMemory(b)
		b.ReportAllocs()
		b.SetBytes(4096)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			p := make([]byte, 4096)
			var off int64
			for pb.Next() {
				if err := m.ReadAt(p, off); err != nil {
					b.Error(err)
					return
				}
				off = (off + 4096*17) % benchSize
			}
		})
	})
}

func BenchmarkMemoryWriteAt4K(b *testing.B) { benchWrite(b, newBenchMemory(b)) }

func BenchmarkNullReadAt4K(b *testing.B) {
	n, err := NewNull(benchSize, 512)
	require.NoError(b, err)
	benchRead(b, n)
}

func BenchmarkFileReadAt4K(b *testing.B) {
	b.Run("buffered", func(b *testing.B) { benchRead(b, newBenchFile(b, false)) })
	b.Run("direct", func(b *testing.B) { benchRead(b, newBenchFile(b, true)) })
}
