package backstore

import (
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// fdStore is what File and Block share: a page-cache descriptor that can serve any buffer,
// an optional O_DIRECT descriptor onto the same data for aligned buffers, the checks every
// call makes, and the read and write loops.
//
// Two descriptors, because O_DIRECT refuses (EINVAL) a buffer, offset or length that is not
// aligned to what the device or filesystem wants. RDMA buffers are page-aligned and take the
// direct path; an unaligned buffer still has to be served, so it goes through the page cache.
// Linux keeps the two coherent: a direct read first writes back dirty cached pages of its
// range and a direct write drops them.
type fdStore struct {
	path     string
	fd       int // page-cache descriptor, always open
	dfd      int // O_DIRECT descriptor, or -1
	memAlign uintptr
	offAlign int64
	lbs, pbs uint32
	readOnly bool
	size     atomic.Int64
	// atomic is what the kernel said of atomic writes on the direct descriptor (atomic.go).
	atomic AtomicLimits

	// mu is held shared by every call that uses a descriptor and exclusively by Close, so that
	// Close never closes a descriptor under a running system call, and a descriptor number
	// that the process reuses after Close can never be written to through this store.
	mu     sync.RWMutex
	closed bool

	// onIO, when set (by tests, before use), is told which descriptor each read or write took.
	onIO func(direct bool)
}

// acquire takes the shared lock unless the store is closed; a true result must be paired with
// s.mu.RUnlock.
func (s *fdStore) acquire() bool {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return false
	}
	return true
}

func (s *fdStore) opError(op string, off int64, err error) error {
	return fmt.Errorf("backstore %s: %s at %d: %w", s.path, op, off, err)
}

func (s *fdStore) rangeError(op string, off, length int64) error {
	return fmt.Errorf("backstore %s: %s of %d bytes at %d, capacity %d: %w",
		s.path, op, length, off, s.size.Load(), ErrOutOfRange)
}

// ReadAt reads all of p from off, through O_DIRECT when p, off and len(p) allow it. Reading
// past the end of a file that shrank behind our back (before Refresh) fails with an error
// wrapping io.ErrUnexpectedEOF.
func (s *fdStore) ReadAt(p []byte, off int64) error {
	if !s.acquire() {
		return s.opError("read", off, ErrClosed)
	}
	defer s.mu.RUnlock()
	if !checkRange(s.size.Load(), off, int64(len(p))) {
		return s.rangeError("read", off, int64(len(p)))
	}
	if err := s.preadFull(p, off); err != nil {
		return s.opError("read", off, err)
	}
	return nil
}

// WriteAt writes all of p at off, through O_DIRECT when p, off and len(p) allow it. With fua
// the write is done with RWF_DSYNC and is durable when WriteAt returns.
func (s *fdStore) WriteAt(p []byte, off int64, fua bool) error {
	if err := s.acquireWrite("write", off, int64(len(p))); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := s.pwriteFull(p, off, fua); err != nil {
		return s.opError("write", off, err)
	}
	return nil
}

// Flush is fdatasync: written data, and the metadata needed to read it, reach stable storage
// (for a block device, the device's volatile cache is flushed too).
func (s *fdStore) Flush() error {
	if !s.acquire() {
		return fmt.Errorf("backstore %s: flush: %w", s.path, ErrClosed)
	}
	defer s.mu.RUnlock()
	if err := retryEINTR(func() error { return unix.Fdatasync(s.fd) }); err != nil {
		return fmt.Errorf("backstore %s: flush: %w", s.path, err)
	}
	return nil
}

func (s *fdStore) Size() int64               { return s.size.Load() }
func (s *fdStore) LogicalBlockSize() uint32  { return s.lbs }
func (s *fdStore) PhysicalBlockSize() uint32 { return s.pbs }
func (s *fdStore) ReadOnly() bool            { return s.readOnly }

// Close waits for calls in progress and closes the descriptors; later calls fail with
// ErrClosed.
func (s *fdStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("backstore %s: close: %w", s.path, ErrClosed)
	}
	s.closed = true
	err := unix.Close(s.fd)
	if s.dfd >= 0 {
		if derr := unix.Close(s.dfd); err == nil {
			err = derr
		}
	}
	if err != nil {
		return fmt.Errorf("backstore %s: close: %w", s.path, err)
	}
	return nil
}

// refuseWrite says why op, a write of length bytes at off, cannot be made, with the store held
// open: it is read-only, or the range is not inside it.
// acquireWrite is acquire for a write (op) of length bytes at off: nil, and s.mu.RUnlock is the
// caller's; or why the write cannot be made (the store is closed, or refuseWrite), holding
// nothing.
func (s *fdStore) acquireWrite(op string, off, length int64) error {
	if !s.acquire() {
		return s.opError(op, off, ErrClosed)
	}
	if err := s.refuseWrite(op, off, length); err != nil {
		s.mu.RUnlock()
		return err
	}
	return nil
}

func (s *fdStore) refuseWrite(op string, off, length int64) error {
	if s.readOnly {
		return s.opError(op, off, unix.EROFS)
	}
	if !checkRange(s.size.Load(), off, length) {
		return s.rangeError(op, off, length)
	}
	return nil
}

// rangeOp runs do, Unmap's or WriteZeroes' work on length bytes at off, after the closed,
// read-only and range checks, with the store held open; an empty range does nothing, and do's
// error is wrapped as op's.
func (s *fdStore) rangeOp(op string, off, length int64, do func() error) error {
	if err := s.acquireWrite(op, off, length); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if length == 0 {
		return nil
	}
	if err := do(); err != nil {
		return s.opError(op, off, err)
	}
	return nil
}
