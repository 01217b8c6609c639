package backstore

import (
	"bytes"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/internal/testutil/cephtest"
)

// openTestRBD opens image o of the test cluster (cephtest.Image).
func openTestRBD(t testing.TB, o rbd.Options, lbs uint32, readOnly bool, more ...rbd.Setting) *RBD {
	t.Helper()
	r, err := OpenRBD(o, lbs, readOnly, more...)
	require.NoError(t, err)
	return r
}

func init() {
	// With librbd's cache on, writes may sit in the client until a flush: FUA and Flush must
	// send one, and the suite's reads after FUA writes and flushes see the data either way.
	moreConformanceImpls = append(moreConformanceImpls, impl{
		name: "rbd-cache", persists: true,
		open: func(t *testing.T, size int64, lbs uint32) Backstore {
			r := openTestRBD(t, cephtest.Image(t, "test", uint64(size)), lbs, false, rbd.Setting{Name: "rbd_cache", Value: "true"})
			require.True(t, r.cache, "rbd_cache=true seen")
			return r
		},
	})
	moreConformanceImpls = append(moreConformanceImpls, impl{
		name: "rbd", persists: true,
		open: func(t *testing.T, size int64, lbs uint32) Backstore {
			r := openTestRBD(t, cephtest.Image(t, "test", uint64(size)), lbs, false)
			require.False(t, r.cache, "the test cluster's ceph.conf sets rbd cache = false")
			return r
		},
		openReadOnly: func(t *testing.T, size int64, lbs uint32) Backstore {
			img := cephtest.Image(t, "test", uint64(size))
			w := openTestRBD(t, img, lbs, false)
			data := make([]byte, size)
			fillPattern(data, 0, 7)
			require.NoError(t, w.WriteAt(data, 0, true))
			require.NoError(t, w.Close())
			return openTestRBD(t, img, lbs, true)
		},
	})
}

// TestRBDResizeWatch: a resize by another client reaches OnResize's callback, and Refresh then
// returns the new size, with no reopening.
func TestRBDResizeWatch(t *testing.T) {
	img := cephtest.Image(t, "test", 4<<20)
	r := openTestRBD(t, img, 0, false)
	defer r.Close()
	fired := make(chan struct{}, 1)
	// As the daemon's callback does: re-read the size (Close must not deadlock with it).
	require.NoError(t, r.OnResize(func() {
		_, _ = r.Refresh()
		select {
		case fired <- struct{}{}:
		default:
		}
	}))

	other := openTestRBD(t, img, 0, false)
	require.NoError(t, other.img.Resize(8<<20))
	require.NoError(t, other.Close())
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch callback 10 s after a resize")
	}
	size, err := r.Refresh()
	require.NoError(t, err)
	require.Equal(t, int64(8<<20), size)
	require.Equal(t, int64(8<<20), r.Size())
	// The new blocks are usable at once.
	p := alignedBuf(t, 4096)
	fillPattern(p, 6<<20, 3)
	require.NoError(t, r.WriteAt(p, 6<<20, false))
	got := alignedBuf(t, 4096)
	require.NoError(t, r.ReadAt(got, 6<<20))
	require.Equal(t, p, got)
}

// TestRBDNoAllocations: a read or a write from registered (non-Go) memory allocates nothing on
// the Go heap once the store is warm.
func TestRBDNoAllocations(t *testing.T) {
	r := openTestRBD(t, cephtest.Image(t, "test", 4<<20), 0, false)
	defer r.Close()
	p := alignedBuf(t, 4096)
	fillPattern(p, 0, 1)
	for i := 0; i < 10; i++ { // warm up: the pinner cache, the poll goroutine's stack
		require.NoError(t, r.WriteAt(p, 0, true))
		require.NoError(t, r.ReadAt(p, 0))
	}
	allocs := testing.AllocsPerRun(200, func() {
		if err := r.WriteAt(p, 8192, true); err != nil {
			panic(err)
		}
		if err := r.ReadAt(p, 8192); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "allocations per write+read")
}

// TestRBDOSDStopped: with the OSD stopped (SIGSTOP), I/O fails with ETIMEDOUT within the
// OSD op timeout instead of hanging; after SIGCONT it works again, and every write acknowledged
// before the stop reads back.
func TestRBDOSDStopped(t *testing.T) {
	img := cephtest.Image(t, "test", 4<<20)
	pid := cephtest.OSDPID(t, img)
	img.OSDOpTimeout = 3 * time.Second
	r := openTestRBD(t, img, 0, false)
	defer r.Close()
	acked := make([]byte, 64<<10)
	fillPattern(acked, 0, 9)
	require.NoError(t, r.WriteAt(acked, 0, true))

	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"write", func() error { return r.WriteAt(make([]byte, 4096), 1<<20, false) }},
		{"read", func() error { return r.ReadAt(make([]byte, 4096), 0) }},
	} {
		start := time.Now()
		err := op.do()
		took := time.Since(start)
		require.ErrorIs(t, err, unix.ETIMEDOUT, op.name)
		require.Less(t, took, 8*time.Second, op.name+": the timeout is 3 s")
		t.Logf("%s with the OSD stopped: %v after %v", op.name, err, took.Round(time.Millisecond))
	}
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	stopped = false

	// The OSD answers again: I/O works, and what was acknowledged is there.
	deadline := time.Now().Add(30 * time.Second)
	got := make([]byte, len(acked))
	for {
		err := r.ReadAt(got, 0)
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "no read works 30 s after SIGCONT: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
	require.True(t, bytes.Equal(acked, got), "acknowledged data lost")
	p := make([]byte, 4096)
	fillPattern(p, 1<<20, 4)
	require.NoError(t, r.WriteAt(p, 1<<20, true))
	require.NoError(t, r.ReadAt(got[:4096], 1<<20))
	require.Equal(t, p, got[:4096])
}

// BenchmarkRBD: 4 KiB random-offset reads and writes from registered-like memory, as many in
// flight as -cpu × RunParallel's goroutines; compare with `rbd bench` on the same cluster.
func BenchmarkRBD(b *testing.B) {
	const size = 64 << 20
	r := openTestRBD(b, cephtest.Image(b, "bench", size), 0, false)
	defer r.Close()
	for _, op := range []string{"write", "read"} {
		b.Run(op+"-4k-qd32", func(b *testing.B) {
			b.SetParallelism(16) // 16 × GOMAXPROCS goroutines: QD 32 on 2 CPUs
			b.SetBytes(4096)
			b.ReportAllocs()
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				p, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
				if err != nil {
					panic(err)
				}
				defer unix.Munmap(p)
				for pb.Next() {
					off := (seq.Add(1) * 7919 % (size / 4096)) * 4096
					if op == "write" {
						err = r.WriteAt(p, off, false)
					} else {
						err = r.ReadAt(p, off)
					}
					if err != nil {
						panic(err)
					}
				}
			})
		})
	}
}
