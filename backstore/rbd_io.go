package backstore

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore/rbd"
)

// RBD's reads and writes: the checks each makes, then librbd.

func (r *RBD) ReadAt(p []byte, off int64) error {
	n := int64(len(p))
	return r.rangeOp("read", off, n, false, func() error { return r.ioError("read", off, n, r.img.Read(p, off)) })
}

func (r *RBD) WriteAt(p []byte, off int64, fua bool) error {
	n := int64(len(p))
	return r.rangeOp("write", off, n, true, func() error {
		if err := r.img.Write(p, off); err != nil {
			return r.ioError("write", off, n, err)
		}
		if fua && r.cache {
			if err := r.img.Flush(); err != nil {
				return fmt.Errorf("rbd %s: flush after a FUA write at %d: %w", r.name, off, err)
			}
		}
		return nil
	})
}

// Flush sends librbd a flush when its cache is on; without the cache every completed write is
// already on the OSDs.
func (r *RBD) Flush() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return fmt.Errorf("rbd %s: flush: %w", r.name, ErrClosed)
	}
	if r.ro || !r.cache {
		return nil
	}
	if err := r.img.Flush(); err != nil {
		return fmt.Errorf("rbd %s: flush: %w", r.name, err)
	}
	return nil
}

// check says why an operation (what) on length bytes at off cannot be made, with r.mu held:
// the store is closed, the range is not inside the image, or it writes a read-only image.
func (r *RBD) check(what string, off, length int64, write bool) error {
	if r.closed {
		return fmt.Errorf("rbd %s: %s: %w", r.name, what, ErrClosed)
	}
	if !checkRange(r.size.Load(), off, length) {
		return fmt.Errorf("rbd %s: %s of %d bytes at %d: %w", r.name, what, length, off, ErrOutOfRange)
	}
	if write && r.ro {
		return fmt.Errorf("rbd %s: %s: %w", r.name, what, unix.EROFS)
	}
	return nil
}

// rangeOp makes op, the librbd call of an operation (what) on length bytes at off, under r.mu
// once check lets it (and there is something to do); op wraps its errors (ioError).
func (r *RBD) rangeOp(what string, off, length int64, write bool, op func() error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.check(what, off, length, write); err != nil {
		return err
	}
	if length == 0 {
		return nil
	}
	return op()
}

// ioError is err, librbd's answer to an operation (what) on length bytes at off, with that
// context; nil stays nil.
func (r *RBD) ioError(what string, off, length int64, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("rbd %s: %s of %d bytes at %d: %w", r.name, what, length, off, err)
}

// Unmap discards the range. The connection sets rbd_skip_partial_discard=false, so a discard
// smaller than an object zeroes what it cannot deallocate and the range reads back as zeroes.
func (r *RBD) Unmap(off, length int64) error {
	return r.rangeOp("discard", off, length, true, func() error {
		return r.ioError("discard", off, length, r.img.Discard(off, length))
	})
}

// WriteZeroes is librbd's write-zeroes, which deallocates whole objects and zeroes the rest.
func (r *RBD) WriteZeroes(off, length int64) error {
	return r.rangeOp("write zeroes", off, length, true, func() error {
		return r.ioError("write zeroes", off, length, r.img.WriteZeroes(off, length))
	})
}

// CompareAndWriteMax is librbd's compare-and-write's limit (one 512-byte sector).
func (r *RBD) CompareAndWriteMax() int { return rbd.CompareAndWriteMax }

// CompareAndWrite is librbd's compare-and-write: one operation on the OSD, atomic against
// every client of the image, the other gateways included.
func (r *RBD) CompareAndWrite(cmp, data []byte, off int64) (int64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if err := r.check("compare and write", off, int64(len(data)), true); err != nil {
		return 0, err
	}
	mismatch, err := r.img.CompareAndWrite(cmp, data, off)
	switch {
	case errors.Is(err, rbd.ErrMiscompare):
		return mismatch, ErrMiscompare
	case err != nil:
		return 0, r.ioError("compare and write", off, int64(len(data)), err)
	}
	if r.cache {
		// With librbd's cache on, make the write durable as a FUA write would be: the
		// atomic test and set that uses it guards on-disk structures.
		if err := r.img.Flush(); err != nil {
			return 0, fmt.Errorf("rbd %s: flush after a compare and write at %d: %w", r.name, off, err)
		}
	}
	return 0, nil
}
