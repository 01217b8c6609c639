package backstore

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// newQueue returns a queue, or skips where the kernel refuses io_uring (what the daemon does
// then is the synchronous path every other test covers).
func newQueue(t testing.TB, depth int) *Queue {
	t.Helper()
	q, err := NewQueue(depth, false)
	if errors.Is(err, ErrAsyncUnsupported) {
		t.Skipf("io_uring not available: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	return q
}

// drain reaps until every request in flight has completed, and returns the completions by tag.
func drain(t testing.TB, q *Queue) map[uint64]error {
	t.Helper()
	got := map[uint64]error{}
	require.NoError(t, q.Submit())
	for q.InFlight() > 0 {
		if q.Reap(func(c Completion) { got[c.Tag] = c.Err }) == 0 {
			require.NoError(t, q.Wait())
		}
	}
	return got
}

// TestQueueConformance writes and reads random blocks through a queue, many in flight, on
// each store that can do it, and checks the bytes against the synchronous calls.
func TestQueueConformance(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T, size int64) AsyncStore
	}{
		{"file", func(t *testing.T, size int64) AsyncStore {
			f, _ := newFile(t, size)
			return f
		}},
		{"file, direct", func(t *testing.T, size int64) AsyncStore {
			f, err := OpenFile(filepath.Join(t.TempDir(), "q.img"), FileOptions{Size: size, Create: true, Direct: true})
			require.NoError(t, err)
			return f
		}},
		{"block", func(t *testing.T, size int64) AsyncStore {
			lo := attachLoop(t, size, 512)
			b, err := OpenBlock(lo.path, BlockOptions{})
			require.NoError(t, err)
			return b
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			const size, blk, n = 4 << 20, 4096, 64
			s := st.open(t, size)
			defer s.Close()
			q := newQueue(t, 16)
			slab := alignedBuf(t, n*blk)
			require.NoError(t, q.RegisterBuffer(slab))
			rng := rand.New(rand.NewPCG(1, 2))
			offs := rng.Perm(size / blk)[:n]
			// writes in waves of 16, the last one of each wave with fua
			for w := 0; w < n; w += 16 {
				for i := w; i < w+16; i++ {
					p := slab[i*blk : (i+1)*blk]
					fillPattern(p, int64(offs[i])*blk, 9)
					require.NoError(t, s.StartWrite(q, p, int64(offs[i])*blk, i%16 == 15, uint64(i)))
				}
				require.ErrorIs(t, s.StartRead(q, slab[:blk], 0, 99), ErrQueueFull)
				for tag, err := range drain(t, q) {
					require.NoError(t, err, "write %d", tag)
				}
			}
			for i := 0; i < n; i++ {
				got := make([]byte, blk)
				require.NoError(t, s.ReadAt(got, int64(offs[i])*blk))
				require.True(t, bytes.Equal(slab[i*blk:(i+1)*blk], got), "block %d", offs[i])
			}
			// reads back through the queue, into the other end of the slab, with a buffer
			// outside the registered memory for every fourth one
			clear(slab)
			outside := make([][]byte, n)
			for w := 0; w < n; w += 16 {
				for i := w; i < w+16; i++ {
					p := slab[i*blk : (i+1)*blk]
					if i%4 == 0 {
						outside[i] = alignedBuf(t, blk)
						p = outside[i]
					}
					require.NoError(t, s.StartRead(q, p, int64(offs[i])*blk, uint64(i)))
				}
				for tag, err := range drain(t, q) {
					require.NoError(t, err, "read %d", tag)
				}
			}
			for i := 0; i < n; i++ {
				p := slab[i*blk : (i+1)*blk]
				if outside[i] != nil {
					p = outside[i]
				}
				want := make([]byte, blk)
				fillPattern(want, int64(offs[i])*blk, 9)
				require.True(t, bytes.Equal(want, p), "block %d", offs[i])
			}
		})
	}
}

func TestQueueRefusals(t *testing.T) {
	q := newQueue(t, 4)
	f, path := newFile(t, 1<<20)
	buf := alignedBuf(t, 8192)

	require.ErrorIs(t, f.StartRead(q, buf, 1<<20-4096, 1), ErrOutOfRange)
	require.ErrorContains(t, f.StartWrite(q, buf[:0], 0, false, 1), "empty transfer")
	require.Zero(t, q.InFlight(), "nothing refused is in flight")

	// a request in flight holds the store open: Close cannot take the lock until it is reaped
	require.NoError(t, f.StartRead(q, buf[:4096], 0, 2))
	require.False(t, f.mu.TryLock(), "Close would wait")
	require.Equal(t, map[uint64]error{2: nil}, drain(t, q))
	require.True(t, f.mu.TryLock())
	f.mu.Unlock()
	require.NoError(t, f.Close())
	require.ErrorIs(t, f.StartRead(q, buf[:4096], 0, 3), ErrClosed)

	ro, err := OpenFile(path, FileOptions{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	require.ErrorIs(t, ro.StartWrite(q, buf[:4096], 0, false, 4), unix.EROFS)

	// the file shrinks behind the store's back: a read past the new end fails as ReadAt does
	rw, err := OpenFile(path, FileOptions{})
	require.NoError(t, err)
	defer rw.Close()
	require.NoError(t, os.Truncate(path, 8192))
	require.NoError(t, rw.StartRead(q, buf, 1<<19, 5))
	got := drain(t, q)
	require.ErrorIs(t, got[5], io.ErrUnexpectedEOF)
	require.ErrorContains(t, got[5], "read at 524288")
}

// TestQueueDirectRefused: where the direct descriptor refuses a transfer (EINVAL) the queue
// does it through the page cache, as ReadAt and WriteAt do.
func TestQueueDirectRefused(t *testing.T) {
	f, err := OpenFile(filepath.Join(t.TempDir(), "d.img"), FileOptions{Size: 1 << 20, Create: true, Direct: true})
	require.NoError(t, err)
	defer f.Close()
	if f.dfd < 0 || f.memAlign < 2 {
		t.Skip("no O_DIRECT with an alignment here")
	}
	// pretend the kernel allows any alignment: the unaligned buffer then goes to the direct
	// descriptor, which refuses it
	f.memAlign, f.offAlign = 1, 1
	var direct []bool
	f.onIO = func(d bool) { direct = append(direct, d) }
	q := newQueue(t, 2)
	p := unalignedBuf(4096)
	fillPattern(p, 100, 5)
	require.NoError(t, f.StartWrite(q, p, 100, true, 1))
	require.Equal(t, map[uint64]error{1: nil}, drain(t, q))
	back := unalignedBuf(4096)
	require.NoError(t, f.StartRead(q, back, 100, 2))
	require.Equal(t, map[uint64]error{2: nil}, drain(t, q))
	require.Equal(t, p, back)
	require.Equal(t, []bool{true, true}, direct, "both started on the direct descriptor")
}

// TestQueueCloseInFlight: a store closed while one of its requests is in flight. Close waits
// for the request, which only the queue's goroutine reaps; that goroutine, starting another
// request of the store meanwhile, must get ErrClosed at once instead of waiting behind Close
// (which would wait for it in turn: neither would ever go on).
func TestQueueCloseInFlight(t *testing.T) {
	q := newQueue(t, 4)
	f, _ := newFile(t, 1<<20)
	buf := alignedBuf(t, 8192)
	require.NoError(t, f.StartRead(q, buf[:4096], 0, 1))
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	// wait until Close waits for the lock: new shared holders are refused from then on
	for f.mu.TryRLock() {
		f.mu.RUnlock()
		runtime.Gosched()
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a request in flight", err)
	default:
	}
	require.ErrorIs(t, f.StartRead(q, buf[4096:], 4096, 2), ErrClosed)
	require.ErrorIs(t, f.StartWrite(q, buf[4096:], 4096, false, 3), ErrClosed)
	require.ErrorIs(t, f.StartFlush(q, 4), ErrClosed)
	require.Equal(t, map[uint64]error{1: nil}, drain(t, q))
	require.NoError(t, <-closed)
}

// TestQueueFlush: StartFlush makes the writes before it durable as Flush does, and fails as
// Flush does on a closed store.
func TestQueueFlush(t *testing.T) {
	q := newQueue(t, 4)
	f, path := newFile(t, 1<<20)
	buf := alignedBuf(t, 4096)
	fillPattern(buf, 0, 3)
	require.NoError(t, f.StartWrite(q, buf, 0, false, 1))
	require.Equal(t, map[uint64]error{1: nil}, drain(t, q))
	require.NoError(t, f.StartFlush(q, 2))
	require.Equal(t, map[uint64]error{2: nil}, drain(t, q))
	// the data is in the file (the flush itself cannot be observed without a power cut)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, buf, got[:4096])
	require.NoError(t, f.Close())
	syncErr := f.Flush()
	asyncErr := f.StartFlush(q, 3)
	require.ErrorIs(t, asyncErr, ErrClosed)
	require.Equal(t, syncErr.Error(), asyncErr.Error())
}

// TestQueueFail: a request that a wrapping store fails itself is reaped with its error, takes
// a place in the queue until then, and Wait does not block for it.
func TestQueueFail(t *testing.T) {
	q := newQueue(t, 2)
	f, _ := newFile(t, 1<<20)
	defer f.Close()
	buf := alignedBuf(t, 4096)
	require.NoError(t, q.Fail(unix.EIO, 7))
	require.NoError(t, f.StartRead(q, buf, 0, 8))
	require.Equal(t, 2, q.InFlight())
	require.ErrorIs(t, q.Fail(unix.EIO, 9), ErrQueueFull)
	require.NoError(t, q.Wait())
	got := drain(t, q)
	require.Equal(t, map[uint64]error{7: unix.EIO, 8: nil}, got)
	require.Zero(t, q.InFlight())
}
