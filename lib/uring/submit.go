package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Queueing requests into the submission ring and handing them to the kernel.

// ErrFull means every submission entry is queued: Submit first.
var ErrFull = errors.New("uring: submission queue full")

// next returns the next free submission entry, zeroed.
func (r *Ring) next() (*sqe, error) {
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.entries {
		return nil, ErrFull
	}
	s := &r.sqes[r.tail&r.sqMask]
	*s = sqe{}
	r.tail++
	return s, nil
}

// Read queues a read of len(p) bytes at off from fd into p; the completion carries tag. p
// must stay valid, and not move, until the completion is reaped: memory outside the Go heap
// (an mmap'd slab) or pinned.
func (r *Ring) Read(fd int, p []byte, off int64, tag uint64) error {
	return r.rw(opRead, opReadFixed, fd, p, off, 0, tag)
}

// Write queues a write of p at off to fd; rwFlags are preadv2(2)'s (unix.RWF_DSYNC).
func (r *Ring) Write(fd int, p []byte, off int64, rwFlags int, tag uint64) error {
	return r.rw(opWrite, opWriteFix, fd, p, off, uint32(rwFlags), tag)
}

func (r *Ring) rw(op, opFixed uint8, fd int, p []byte, off int64, rwFlags uint32, tag uint64) error {
	if len(p) == 0 || len(p) > 1<<31-1 {
		return fmt.Errorf("uring: a transfer of %d bytes", len(p))
	}
	s, err := r.next()
	if err != nil {
		return err
	}
	s.opcode = op
	if r.fixed(p) {
		s.opcode = opFixed // buf_index 0
	}
	s.fd = int32(fd)
	s.off = uint64(off)
	s.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))
	s.len = uint32(len(p))
	s.opFlags = rwFlags
	s.userData = tag
	return nil
}

// Fdatasync queues an fdatasync of fd.
func (r *Ring) Fdatasync(fd int, tag uint64) error {
	s, err := r.next()
	if err != nil {
		return err
	}
	s.opcode = opFsync
	s.fd = int32(fd)
	s.opFlags = fsyncDatasync
	s.userData = tag
	return nil
}

// Submit hands the queued requests to the kernel in one system call, and with wait > 0 also
// waits until that many completions are there to reap. It returns how many were submitted;
// fewer than were queued when the completion queue is full (reap, then submit again).
func (r *Ring) Submit(wait int) (int, error) {
	atomic.StoreUint32(r.sqTail, r.tail) // publishes the entries written before it
	n := r.tail - atomic.LoadUint32(r.sqHead)
	if n == 0 && wait == 0 {
		return 0, nil
	}
	flags := uintptr(0)
	if wait > 0 {
		flags = enterGetEvents
	}
	for {
		r1, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(wait), flags, 0, 0)
		switch e {
		case 0:
			r.inFlight += int(r1)
			return int(r1), nil
		case unix.EINTR:
			continue
		case unix.EBUSY, unix.EAGAIN:
			// the completion queue is full or the kernel lacks memory for now: nothing was
			// taken, the entries stay queued
			return 0, nil
		default:
			return 0, fmt.Errorf("uring: io_uring_enter: %w", e)
		}
	}
}
