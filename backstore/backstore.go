// Package backstore holds the places where a logical unit's blocks live: regular files, block
// devices, RAM and a null device for benchmarks.
//
// Every implementation works on buffers that the caller owns. On the SRP data path those buffers
// are registered RDMA memory, so the backstore reads straight into the memory that is then RDMA
// WRITten to the initiator and writes straight from the memory that an RDMA READ filled: no copy.
//
// Errors keep their errno (wrapped with %w, testable with errors.Is(err, unix.EIO)) so that the
// SCSI layer can turn them into precise sense data: EIO into MEDIUM ERROR, ENOSPC into SPACE
// ALLOCATION FAILED, EROFS into WRITE PROTECTED.
package backstore

import (
	"errors"
	"fmt"
)

// Backstore is the storage behind one logical unit. Offsets and lengths are in bytes; callers
// keep them multiples of LogicalBlockSize. All methods are safe for concurrent use.
type Backstore interface {
	// ReadAt fills all of p from offset off. A short read is an error.
	ReadAt(p []byte, off int64) error
	// WriteAt writes all of p at offset off. With fua the data is on stable storage when
	// WriteAt returns (forced unit access).
	WriteAt(p []byte, off int64, fua bool) error
	// Flush makes every completed write durable (SYNCHRONIZE CACHE).
	Flush() error
	// Unmap deallocates the range; later reads return zeroes when Capabilities().UnmapZeroes.
	Unmap(off, length int64) error
	// WriteZeroes makes the range read back as zeroes. Whether the space stays allocated depends
	// on the store (a file keeps it where the filesystem can zero in place, so that a later
	// write cannot fail for want of space); callers that want the space back use Unmap.
	WriteZeroes(off, length int64) error
	// Size is the capacity in bytes as last seen (see Refresh).
	Size() int64
	// Refresh re-reads the capacity from the underlying file or device and returns it, so that
	// a resize made outside the daemon is noticed (CAPACITY DATA HAS CHANGED).
	Refresh() (int64, error)
	// LogicalBlockSize is the unit of addressing, in bytes (512 or 4096 usually).
	LogicalBlockSize() uint32
	// PhysicalBlockSize is the device's preferred I/O unit, a multiple of LogicalBlockSize.
	PhysicalBlockSize() uint32
	// ReadOnly reports whether writes are refused (opened read-only).
	ReadOnly() bool
	// Capabilities says what the store can do beyond reading and writing.
	Capabilities() Capabilities
	// Close releases the file or device. No other method may be called afterwards.
	Close() error
}

// NonBlocking is implemented by stores that never wait for I/O: every operation is done in
// memory (RAM, null). A caller may then run commands on a goroutine that must not block for
// long, such as the transport's own, instead of handing them to a worker. Wrappers (Faulty)
// do not forward it.
type NonBlocking interface {
	NonBlocking() bool
}

// CompareAndWriter is implemented by stores that other clients may write as well, and that
// compare and write atomically against all of them (an RBD image served by several gateways,
// each its own client): COMPARE AND WRITE uses it instead of comparing under the logical unit's
// own range lock, which only orders this process's commands.
type CompareAndWriter interface {
	// CompareAndWriteMax is the most bytes CompareAndWrite compares at once; 0 when the store
	// has no compare-and-write of its own (a wrapper over one that has none).
	CompareAndWriteMax() int
	// CompareAndWrite writes data at off if the store holds cmp there (the same length). On a
	// miscompare it writes nothing and returns ErrMiscompare with the offset, from off, of the
	// first byte that differs.
	CompareAndWrite(cmp, data []byte, off int64) (mismatch int64, err error)
}

// ErrMiscompare is CompareAndWrite's error when the store does not hold what was compared.
var ErrMiscompare = errors.New("miscompare")

// Capabilities tells the SCSI layer what to advertise (thin provisioning, zeroing).
type Capabilities struct {
	// Unmap is true when Unmap really deallocates (punch hole, discard, RAM freed).
	Unmap bool
	// UnmapZeroes is true when unmapped blocks read back as zeroes (LBPRZ).
	UnmapZeroes bool
	// MaxUnmapBytes bounds one Unmap or WriteZeroes call; 0 means no limit of its own.
	MaxUnmapBytes int64
	// UnmapGranularity is the unit in which Unmap really frees space, in bytes (a file's
	// filesystem block): a smaller unmap only zeroes. 0 means the logical block.
	UnmapGranularity int64
	// NonRotational is true when the medium has no spinning parts (RAM, or a file or device
	// whose disk says queue/rotational 0); false also when that is not known.
	NonRotational bool
}

// ErrClosed is returned by a backstore used after Close.
var ErrClosed = errors.New("backstore closed")

// ErrOutOfRange is returned for an access that reaches outside [0, Size). The SCSI layer checks
// LBA ranges before it calls a backstore; this is a second line of defence, so that a bug there
// cannot write past the end of a block device or grow a file.
var ErrOutOfRange = errors.New("backstore: access out of range")

// checkRange reports whether [off, off+length) lies inside [0, size). It is written so that
// no sum can overflow, whatever the caller passes.
func checkRange(size, off, length int64) bool {
	return off >= 0 && length >= 0 && off <= size && length <= size-off
}

// validBlockSize reports whether n can be a logical block size: a power of two from 512 bytes
// (the smallest block SBC and Linux know) to 64 KiB (larger blocks have no use and no support
// in the Linux initiator's block layer).
func validBlockSize(n uint32) bool {
	return n >= 512 && n <= 64<<10 && n&(n-1) == 0
}

// checkBlockSize returns the logical block size n asks for, 512 when 0, or an error that
// names the store (what) when validBlockSize refuses it.
func checkBlockSize(what string, n uint32) (uint32, error) {
	if n == 0 {
		return 512, nil
	}
	if !validBlockSize(n) {
		return 0, fmt.Errorf("%s: logical block size %d is not a power of two from 512 to 65536", what, n)
	}
	return n, nil
}
