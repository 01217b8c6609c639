package ib

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Slab is page-aligned anonymous memory outside the Go heap, for registration. The HCA keeps
// using a registered buffer after ibv_reg_mr returns, which cgo forbids for Go memory; and the
// page alignment satisfies O_DIRECT, so the backstore can read straight into the buffer that is
// then RDMA-written to the initiator.
type Slab struct {
	mu  sync.Mutex
	buf []byte
}

// NewSlab maps at least size bytes (rounded up to the page size), populated up front so the
// first I/O does not fault.
func NewSlab(size int) (*Slab, error) {
	if size <= 0 {
		return nil, fmt.Errorf("ib: slab of %d bytes: %w", size, ErrInvalidArgument)
	}
	page := os.Getpagesize()
	n := (size + page - 1) / page * page
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ib: mmap slab of %d bytes: %w", n, err)
	}
	return &Slab{buf: buf}, nil
}

// Bytes is the whole slab. It is nil after Close.
func (s *Slab) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf
}

// Close unmaps the slab. Every region registered from it must be deregistered first, and no
// slice of it may be used afterwards (access faults). A second Close is a no-op.
func (s *Slab) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf == nil {
		return nil
	}
	err := unix.Munmap(s.buf)
	s.buf = nil
	if err != nil {
		return fmt.Errorf("ib: munmap slab: %w", err)
	}
	return nil
}
