package backstore

import (
	"errors"
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdStore's read and write loops: which descriptor a transfer takes, short transfers, EINTR,
// and the fall back from O_DIRECT to the page cache.

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
