package backstore

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// AtomicLimits describe the writes a store makes untorn (SBC-4 4.29, atomic writes): after a
// crash, and to every read that overlaps one, its range holds all of the old data or all of
// the new.
type AtomicLimits struct {
	// MaxBytes is the longest such write; 0 when the store makes none.
	MaxBytes int64
	// PowerOfTwo restricts them to the rule of pwritev2 RWF_ATOMIC (Linux 6.11,
	// Documentation/filesystems/iomap/operations.rst "Atomic writes"): a length that is a power
	// of two from MinBytes to MaxBytes, at an offset that is a multiple of the length. Without
	// it any length up to MaxBytes at any offset is atomic.
	PowerOfTwo bool
	MinBytes   int64
}

// AtomicWriter is implemented by stores that can make atomic writes. WriteAtomicAt writes all of
// p at off as one atomic write, or fails having written nothing; p must fit the limits.
type AtomicWriter interface {
	AtomicLimits() AtomicLimits
	WriteAtomicAt(p []byte, off int64, fua bool) error
}

// STATX_ATTR_WRITE_ATOMIC (include/uapi/linux/stat.h): the file supports atomic writes.
const statxAttrWriteAtomic = 0x00400000

// kernelAtomicLimits turns the atomic write unit the kernel reports for a file or device
// (statx STATX_WRITE_ATOMIC, or a block device's queue/atomic_write_unit_{min,max}_bytes) into
// AtomicLimits, the unit at least one logical block of lbs bytes; none when the kernel reports
// none.
func kernelAtomicLimits(unitMin, unitMax uint32, lbs uint32) AtomicLimits {
	if unitMax == 0 || unitMax < lbs || unitMax&(unitMax-1) != 0 {
		return AtomicLimits{}
	}
	return AtomicLimits{MaxBytes: int64(unitMax), MinBytes: int64(max(unitMin, lbs)), PowerOfTwo: true}
}

// statxAtomic asks the kernel which atomic writes the file open at fd supports (Linux 6.11 and
// later; an older kernel answers without STATX_WRITE_ATOMIC). XFS makes them on any device
// since 6.16 (copy on write when the device cannot), ext4 on devices that can.
func statxAtomic(fd int, lbs uint32) AtomicLimits {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_WRITE_ATOMIC, &stx); err != nil {
		return AtomicLimits{}
	}
	if stx.Mask&unix.STATX_WRITE_ATOMIC == 0 || stx.Attributes&statxAttrWriteAtomic == 0 || stx.Atomic_write_segments_max < 1 {
		return AtomicLimits{}
	}
	return kernelAtomicLimits(stx.Atomic_write_unit_min, stx.Atomic_write_unit_max, lbs)
}

// sysfsAtomic reads queue/atomic_write_unit_min_bytes and queue/atomic_write_unit_max_bytes of
// the block device numbered rdev under sysfs (normally /sys), a partition's from its disk's queue
// directory, as discardMaxBytes does. A kernel without atomic writes has neither file.
func sysfsAtomic(sysfs string, rdev uint64, lbs uint32) AtomicLimits {
	dir := fmt.Sprintf("%s/dev/block/%d:%d", sysfs, unix.Major(rdev), unix.Minor(rdev))
	read := func(q, name string) (uint32, bool) {
		data, err := os.ReadFile(q + "/" + name)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
		return uint32(n), err == nil
	}
	for _, q := range []string{dir + "/queue", dir + "/../queue"} {
		unitMax, ok := read(q, "atomic_write_unit_max_bytes")
		if !ok {
			continue
		}
		unitMin, _ := read(q, "atomic_write_unit_min_bytes")
		return kernelAtomicLimits(unitMin, unitMax, lbs)
	}
	return AtomicLimits{}
}

// fits reports whether a write of n bytes at off meets l.
func (l AtomicLimits) fits(off, n int64) bool {
	if n <= 0 || n > l.MaxBytes {
		return false
	}
	if !l.PowerOfTwo {
		return true
	}
	return n >= l.MinBytes && n&(n-1) == 0 && off%n == 0
}

// AtomicLimits reports what statx (File) or sysfs (Block) said when the store was opened.
func (s *fdStore) AtomicLimits() AtomicLimits { return s.atomic }

// WriteAtomicAt writes p at off with one pwritev2(RWF_ATOMIC) on the direct descriptor, with
// RWF_DSYNC too when fua: the kernel writes all of it or none, also across a crash. A write
// that does not fit the limits, or whose buffer is not aligned for O_DIRECT, fails with EINVAL
// without being tried: through the page cache it would not be atomic.
func (s *fdStore) WriteAtomicAt(p []byte, off int64, fua bool) error {
	if err := s.acquireWrite("atomic write", off, int64(len(p))); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if !s.atomic.fits(off, int64(len(p))) || s.fdFor(p, off) != s.dfd {
		return s.opError("atomic write", off, unix.EINVAL)
	}
	flags := unix.RWF_ATOMIC
	if fua {
		flags |= unix.RWF_DSYNC
	}
	for {
		n, err := unix.Pwritev2(s.dfd, [][]byte{p}, off, flags)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return s.opError("atomic write", off, err)
		case n != len(p):
			// The kernel refuses an atomic write it cannot make whole; it never writes
			// part of one.
			return s.opError("atomic write", off, io.ErrShortWrite)
		}
		return nil
	}
}
