package backstore

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"unsafe"

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

// fdFor picks the descriptor for one transfer: the direct one when the buffer's address, the
// offset and the length all meet the O_DIRECT alignment.
func (s *fdStore) fdFor(p []byte, off int64) int {
	if s.dfd < 0 || len(p) == 0 {
		return s.fd
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	if addr%s.memAlign != 0 || off%s.offAlign != 0 || int64(len(p))%s.offAlign != 0 {
		return s.fd
	}
	return s.dfd
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
	if !s.acquire() {
		return s.opError("write", off, ErrClosed)
	}
	defer s.mu.RUnlock()
	if err := s.refuseWrite("write", off, int64(len(p))); err != nil {
		return err
	}
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
	if !s.acquire() {
		return s.opError(op, off, ErrClosed)
	}
	defer s.mu.RUnlock()
	if err := s.refuseWrite(op, off, length); err != nil {
		return err
	}
	if length == 0 {
		return nil
	}
	if err := do(); err != nil {
		return s.opError(op, off, err)
	}
	return nil
}

// preadFull fills p from off; see transferFull.
func (s *fdStore) preadFull(p []byte, off int64) error { return s.transferFull(p, off, false, false) }

// pwriteFull writes all of p at off; see transferFull.
func (s *fdStore) pwriteFull(p []byte, off int64, fua bool) error {
	return s.transferFull(p, off, true, fua)
}

// transferFull reads p from off, or writes all of p at off when write is true. pread and
// pwrite may move fewer bytes than asked (a signal, a device that splits requests), so it
// loops; zero bytes means the file ended before a read was full, or that nothing more can be
// written. If the direct descriptor refuses the transfer (EINVAL: an alignment the kernel did
// not report, or a short transfer that left an unaligned remainder) the rest goes through the
// page cache. With fua each pwritev2 carries RWF_DSYNC, which makes that write durable (data
// and the metadata needed to read it back) before it returns, like a SCSI write with the FUA
// bit; a kernel or filesystem without RWF_DSYNC gets a plain write followed by fdatasync
// instead.
func (s *fdStore) transferFull(p []byte, off int64, write, fua bool) error {
	fd := s.fdFor(p, off)
	if s.onIO != nil {
		s.onIO(fd == s.dfd)
	}
	syncAfter := false
	for len(p) > 0 {
		var n int
		var err error
		switch {
		case !write:
			n, err = unix.Pread(fd, p, off)
		case fua && !syncAfter:
			n, err = unix.Pwritev2(fd, [][]byte{p}, off, unix.RWF_DSYNC)
			if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
				syncAfter = true
				continue
			}
		default:
			n, err = unix.Pwrite(fd, p, off)
		}
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			if err == unix.EINVAL && fd == s.dfd {
				fd = s.fd
				continue
			}
			return err
		}
		if n == 0 && write {
			return io.ErrShortWrite
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		p = p[n:]
		off += int64(n)
	}
	if syncAfter {
		return retryEINTR(func() error { return unix.Fdatasync(fd) })
	}
	return nil
}

// zeroBuf is the source for writing zeroes where the store cannot zero a range by itself.
// It is only ever read.
var zeroBuf [256 << 10]byte

// writeZeroesByWriting writes zeroes over [off, off+length) through the page-cache descriptor.
func (s *fdStore) writeZeroesByWriting(off, length int64) error {
	for length > 0 {
		n := int64(len(zeroBuf))
		if n > length {
			n = length
		}
		if err := s.pwriteFull(zeroBuf[:n], off, false); err != nil {
			return err
		}
		off += n
		length -= n
	}
	return nil
}

// retryEINTR calls f until it fails with something other than EINTR.
func retryEINTR(f func() error) error {
	for {
		err := f()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// dioAlignment asks the kernel (statx STATX_DIOALIGN, Linux 6.1 and later; block devices
// since 6.11) which alignment O_DIRECT needs for the memory and for the file offset and length.
// When the kernel does not say, it assumes fallbackMem and fallbackOff. supported is false
// when the kernel says that the file cannot do direct I/O at all.
func dioAlignment(fd int, fallbackMem, fallbackOff uint32) (mem, off uint32, supported bool, err error) {
	var stx unix.Statx_t
	err = unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &stx)
	if err != nil && err != unix.ENOSYS && err != unix.EINVAL {
		return 0, 0, false, err
	}
	if err != nil || stx.Mask&unix.STATX_DIOALIGN == 0 {
		return fallbackMem, fallbackOff, true, nil
	}
	if stx.Dio_mem_align == 0 || stx.Dio_offset_align == 0 {
		return 0, 0, false, nil
	}
	return stx.Dio_mem_align, stx.Dio_offset_align, true, nil
}

// sameFile reports whether two descriptors refer to the same file or device, so that a second
// open by path cannot silently land on a file that replaced the first one.
func sameFile(fd1, fd2 int) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(fd1, &a); err != nil {
		return false, err
	}
	if err := unix.Fstat(fd2, &b); err != nil {
		return false, err
	}
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Rdev == b.Rdev, nil
}

// reopen opens path again with flags and checks that it is the same file as fd.
func reopen(path string, fd, flags int) (int, error) {
	nfd, err := openRetry(path, flags, 0)
	if err != nil {
		return -1, err
	}
	same, err := sameFile(fd, nfd)
	if err != nil || !same {
		unix.Close(nfd)
		if err == nil {
			err = fmt.Errorf("%s was replaced while being opened", path)
		}
		return -1, err
	}
	return nfd, nil
}

func openRetry(path string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
