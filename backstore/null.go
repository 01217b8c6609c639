package backstore

import (
	"fmt"
	"sync/atomic"
)

// Null is a device that stores nothing: reads return zeroes and writes are dropped. It measures
// the cost of everything above the backstore (SRP, RDMA, SCSI) with no storage in the way.
type Null struct {
	size   int64
	lbs    uint32
	closed atomic.Bool
}

var _ Backstore = (*Null)(nil)

// NewNull makes a null device of size bytes (a positive multiple of logicalBlockSize).
// logicalBlockSize is a power of two from 512 to 65536; 0 means 512.
func NewNull(size int64, logicalBlockSize uint32) (*Null, error) {
	logicalBlockSize, err := checkBlockSize("backstore null", logicalBlockSize)
	if err != nil {
		return nil, err
	}
	if size <= 0 || size%int64(logicalBlockSize) != 0 {
		return nil, fmt.Errorf("backstore null: size %d is not a positive multiple of the %d-byte block", size, logicalBlockSize)
	}
	return &Null{size: size, lbs: logicalBlockSize}, nil
}

func (n *Null) check(op string, off, length int64) error {
	if n.closed.Load() {
		return fmt.Errorf("backstore null: %s at %d: %w", op, off, ErrClosed)
	}
	if !checkRange(n.size, off, length) {
		return fmt.Errorf("backstore null: %s of %d bytes at %d, capacity %d: %w", op, length, off, n.size, ErrOutOfRange)
	}
	return nil
}

// ReadAt fills p with zeroes.
func (n *Null) ReadAt(p []byte, off int64) error {
	if err := n.check("read", off, int64(len(p))); err != nil {
		return err
	}
	clear(p)
	return nil
}

// WriteAt drops p.
func (n *Null) WriteAt(p []byte, off int64, fua bool) error {
	return n.check("write", off, int64(len(p)))
}

func (n *Null) Flush() error {
	if n.closed.Load() {
		return fmt.Errorf("backstore null: flush: %w", ErrClosed)
	}
	return nil
}

func (n *Null) Unmap(off, length int64) error       { return n.check("unmap", off, length) }
func (n *Null) WriteZeroes(off, length int64) error { return n.check("write zeroes", off, length) }
func (n *Null) Size() int64                         { return n.size }

func (n *Null) Refresh() (int64, error) {
	if n.closed.Load() {
		return 0, fmt.Errorf("backstore null: refresh: %w", ErrClosed)
	}
	return n.size, nil
}

func (n *Null) LogicalBlockSize() uint32  { return n.lbs }
func (n *Null) PhysicalBlockSize() uint32 { return n.lbs }
func (n *Null) ReadOnly() bool            { return false }

// Capabilities: everything reads as zeroes, unmapped or not; nothing rotates.
func (n *Null) Capabilities() Capabilities {
	return Capabilities{Unmap: true, UnmapZeroes: true, NonRotational: true}
}

func (n *Null) Close() error {
	if n.closed.Swap(true) {
		return fmt.Errorf("backstore null: close: %w", ErrClosed)
	}
	return nil
}

// NonBlocking implements NonBlocking: nothing is stored.
func (n *Null) NonBlocking() bool { return true }
