package uring

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// newRing returns a ring, or skips the test where the kernel (or a seccomp filter) refuses
// io_uring: the callers' fallback is tested where they are.
func newRing(t *testing.T, entries int, o Options) *Ring {
	t.Helper()
	r, err := New(entries, o)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("io_uring not available here: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func tempFile(t *testing.T, data []byte) int {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// mmapped returns n bytes outside the Go heap, as the SRP buffer pool's slab is.
func mmapped(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	return b
}

func TestReadWrite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		fixed  bool
		locked bool
	}{
		{"plain", Options{}, false, false},
		{"registered buffer", Options{}, true, false},
		{"single issuer", Options{SingleIssuer: true}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			data := pattern(64 << 10)
			fd := tempFile(t, data)
			r := newRing(t, 8, tc.opts)
			require.Equal(t, 8, r.Entries())
			mem := mmapped(t, 64<<10)
			if tc.fixed {
				require.NoError(t, r.RegisterBuffer(mem))
				require.True(t, r.fixed(mem[4096:8192]))
				require.False(t, r.fixed(make([]byte, 10)))
			}
			// 16 reads of 4 KiB in two batches of 8, tags = block numbers, in reverse order
			got := map[uint64]int32{}
			for batch := 0; batch < 2; batch++ {
				for i := 0; i < 8; i++ {
					blk := 15 - (batch*8 + i)
					require.NoError(t, r.Read(fd, mem[blk*4096:(blk+1)*4096], int64(blk)*4096, uint64(blk)))
				}
				require.ErrorIs(t, r.Read(fd, mem[:4096], 0, 99), ErrFull)
				require.Equal(t, 8, r.Queued())
				n, err := r.Submit(0)
				require.NoError(t, err)
				require.Equal(t, 8, n)
				for r.InFlight() > 0 {
					if r.Reap(func(c Completion) { got[c.Tag] = c.Res }) == 0 {
						require.NoError(t, r.Wait())
					}
				}
			}
			require.Len(t, got, 16)
			for blk, res := range got {
				require.Equal(t, int32(4096), res, "block %d", blk)
			}
			require.Equal(t, data, mem)

			// a write of the first 8 KiB, made durable, then read back with pread
			copy(mem[:8192], bytes.Repeat([]byte{0xa5}, 8192))
			require.NoError(t, r.Write(fd, mem[:8192], 4096, unix.RWF_DSYNC, 7))
			require.NoError(t, r.Fdatasync(fd, 8))
			_, err := r.Submit(2)
			require.NoError(t, err)
			res := map[uint64]Completion{}
			for len(res) < 2 {
				r.Reap(func(c Completion) { res[c.Tag] = c })
			}
			require.Equal(t, int32(8192), res[7].Res)
			require.NoError(t, res[8].Err())
			back := make([]byte, 8192)
			_, err = unix.Pread(fd, back, 4096)
			require.NoError(t, err)
			require.Equal(t, mem[:8192], back)
		})
	}
}

func TestErrorsAndShortReads(t *testing.T) {
	r := newRing(t, 4, Options{})
	fd := tempFile(t, pattern(6000))
	buf := make([]byte, 8192)
	require.NoError(t, r.Read(fd, buf, 4096, 1))      // 1904 bytes left in the file
	require.NoError(t, r.Read(fd, buf[:10], 9000, 2)) // past the end
	require.NoError(t, r.Read(1<<20, buf, 0, 3))      // no such descriptor
	_, err := r.Submit(3)
	require.NoError(t, err)
	got := map[uint64]Completion{}
	for len(got) < 3 {
		r.Reap(func(c Completion) { got[c.Tag] = c })
	}
	runtime.KeepAlive(buf)
	require.Equal(t, int32(1904), got[1].Res, "a short read is the caller's to continue")
	require.Zero(t, got[2].Res, "end of file")
	require.ErrorIs(t, got[3].Err(), unix.EBADF)
	require.Zero(t, r.Reap(func(Completion) { t.Fatal("nothing more") }), "Reap does not block")
	require.Error(t, r.Wait(), "nothing to wait for")
	require.Error(t, r.Read(fd, nil, 0, 4))
	require.Error(t, r.RegisterBuffer(nil))
}

func TestEventfd(t *testing.T) {
	r := newRing(t, 2, Options{})
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	defer unix.Close(efd)
	require.NoError(t, r.RegisterEventfd(efd))
	fd := tempFile(t, pattern(4096))
	buf := make([]byte, 4096)
	require.NoError(t, r.Read(fd, buf, 0, 1))
	_, err = r.Submit(1)
	require.NoError(t, err)
	var v [8]byte
	_, err = unix.Read(efd, v[:])
	require.NoError(t, err, "the completion signalled the eventfd")
	require.Equal(t, 1, r.Reap(func(c Completion) { require.Equal(t, int32(4096), c.Res) }))

	// signal off: a completion raises none; on again: the next one does
	if r.cqFlags == nil {
		t.Skip("no CQ ring flags on this kernel (before Linux 5.8)")
	}
	r.SignalEventfd(false)
	require.NoError(t, r.Read(fd, buf, 0, 2))
	_, err = r.Submit(1)
	require.NoError(t, err)
	_, err = unix.Read(efd, v[:])
	require.ErrorIs(t, err, unix.EAGAIN, "no signal while off")
	require.Equal(t, 1, r.Reap(func(c Completion) { require.Equal(t, uint64(2), c.Tag) }))
	r.SignalEventfd(true)
	require.NoError(t, r.Read(fd, buf, 0, 3))
	_, err = r.Submit(1)
	require.NoError(t, err)
	_, err = unix.Read(efd, v[:])
	require.NoError(t, err, "signalled again once on")
	require.Equal(t, 1, r.Reap(func(c Completion) { require.Equal(t, uint64(3), c.Tag) }))
	runtime.KeepAlive(buf)
}

func TestNewLimits(t *testing.T) {
	_, err := New(0, Options{})
	require.Error(t, err)
	_, err = New(8192, Options{})
	require.Error(t, err)
}

// TestLayout checks the structures against include/uapi/linux/io_uring.h's sizes and the
// offsets of the fields the kernel reads.
func TestLayout(t *testing.T) {
	require.Equal(t, uintptr(120), unsafe.Sizeof(params{}))
	require.Equal(t, uintptr(40), unsafe.Offsetof(params{}.sqOff))
	require.Equal(t, uintptr(80), unsafe.Offsetof(params{}.cqOff))
	require.Equal(t, uintptr(sqeSize), unsafe.Sizeof(sqe{}))
	require.Equal(t, uintptr(8), unsafe.Offsetof(sqe{}.off))
	require.Equal(t, uintptr(16), unsafe.Offsetof(sqe{}.addr))
	require.Equal(t, uintptr(24), unsafe.Offsetof(sqe{}.len))
	require.Equal(t, uintptr(28), unsafe.Offsetof(sqe{}.opFlags))
	require.Equal(t, uintptr(32), unsafe.Offsetof(sqe{}.userData))
	require.Equal(t, uintptr(40), unsafe.Offsetof(sqe{}.bufIndex))
	require.Equal(t, uintptr(cqeSize), unsafe.Sizeof(cqe{}))
}

// TestUnregisterBuffers: a registered buffer stands for the pages mapped when it was
// registered. Once it is unregistered, a new mapping at the same address (a buffer pool
// unmapped and another mapped where it was) is read into, not the old pages the ring
// pinned; and reads into it are plain ones.
func TestUnregisterBuffers(t *testing.T) {
	r := newRing(t, 4, Options{})
	size := os.Getpagesize()
	data := bytes.Repeat([]byte{0xA5}, size)
	fd := tempFile(t, data)
	old, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	old[0] = 1
	require.NoError(t, r.RegisterBuffer(old))
	require.True(t, r.fixed(old))
	require.NoError(t, r.UnregisterBuffers())
	require.False(t, r.fixed(old))
	require.NoError(t, r.UnregisterBuffers(), "twice is harmless")
	addr := unsafe.Pointer(unsafe.SliceData(old))
	require.NoError(t, unix.Munmap(old))
	p, err := unix.MmapPtr(-1, 0, addr, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE|unix.MAP_FIXED)
	require.NoError(t, err)
	fresh := unsafe.Slice((*byte)(p), size)
	defer unix.MunmapPtr(p, uintptr(size))
	require.NoError(t, r.Read(fd, fresh, 0, 9))
	require.NoError(t, r.Wait())
	var got Completion
	require.Equal(t, 1, r.Reap(func(c Completion) { got = c }))
	require.Equal(t, Completion{Tag: 9, Res: int32(size)}, got)
	require.Equal(t, data, fresh, "the read landed in the mapping at the address now")
}

// TestReapFindsDeferredCompletions polls with Reap alone, never Wait, on a single-issuer ring:
// a read from an empty pipe stays in flight through empty Reaps, and once the pipe has data
// its completion, posted through the deferred task work that IORING_SQ_TASKRUN announces,
// reaches a later Reap. Were the flag not looked at, or not set, the loop would never end.
func TestReapFindsDeferredCompletions(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := newRing(t, 4, Options{SingleIssuer: true})
	if r.enter != 0 {
		t.Logf("deferred task work; IORING_SQ_TASKRUN looked at: %v", r.taskrunFlag)
	}
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	buf := mmapped(t, 4096)
	require.NoError(t, r.Read(p[0], buf[:5], -1, 7))
	n, err := r.Submit(0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	for i := 0; i < 100; i++ {
		require.Zero(t, r.Reap(func(Completion) { t.Fatal("a read from an empty pipe completed") }))
	}
	_, err = unix.Write(p[1], []byte("hello"))
	require.NoError(t, err)
	var got []Completion
	deadline := time.Now().Add(10 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		r.Reap(func(c Completion) { got = append(got, c) })
	}
	require.Equal(t, []Completion{{Tag: 7, Res: 5}}, got, "Reap alone found the completion")
	require.Equal(t, "hello", string(buf[:5]))
	require.Zero(t, r.InFlight())
}
