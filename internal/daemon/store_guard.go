package daemon

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore"
)

// guardedStore is a backstore that can be closed while commands may still be on their way
// into it (sharedStore says when): every operation holds mu shared, and closing takes it
// exclusively, so it waits for the operations already inside and refuses later ones with
// backstore.ErrClosed. It forwards the optional interfaces of the store inside (NonBlocking,
// Mapper, AtomicWriter, CompareAndWriter) so that the wrapper hides none of them.
type guardedStore struct {
	backstore.Backstore
	key storeKey // names the store in errors

	mu     sync.RWMutex
	closed bool
}

// enter holds the store open for one operation, which then calls leave; it fails once the
// store is closed.
func (g *guardedStore) enter() error {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return fmt.Errorf("%v: %w", g.key, backstore.ErrClosed)
	}
	return nil
}

func (g *guardedStore) leave() { g.mu.RUnlock() }

// closeGuard refuses every later operation, once those inside have left.
func (g *guardedStore) closeGuard() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// NonBlocking forwards the store's backstore.NonBlocking. Without it every RAM and null LUN of
// the daemon ran its commands on a worker goroutine, two goroutine hand-offs per command
// (often a thread wake-up each) that srp's channel skips for a store that never waits for
// I/O. Holding mu shared never waits for I/O here either: closing a RAM store is a free.
func (g *guardedStore) NonBlocking() bool {
	nb, ok := g.Backstore.(backstore.NonBlocking)
	return ok && nb.NonBlocking()
}

func (g *guardedStore) ReadAt(p []byte, off int64) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return g.Backstore.ReadAt(p, off)
}

func (g *guardedStore) WriteAt(p []byte, off int64, fua bool) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return g.Backstore.WriteAt(p, off, fua)
}

func (g *guardedStore) Flush() error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return g.Backstore.Flush()
}

func (g *guardedStore) Unmap(off, length int64) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return g.Backstore.Unmap(off, length)
}

func (g *guardedStore) WriteZeroes(off, length int64) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	return g.Backstore.WriteZeroes(off, length)
}

func (g *guardedStore) Refresh() (int64, error) {
	if err := g.enter(); err != nil {
		return 0, err
	}
	defer g.leave()
	return g.Backstore.Refresh()
}

// Mapping implements backstore.Mapper for GET LBA STATUS: the store's own map where it keeps
// one (file, memory), and every block mapped for one that does not (null), which is what the
// SCSI layer assumes of a store without a map.
func (g *guardedStore) Mapping(off, limit int64) (bool, int64, error) {
	if err := g.enter(); err != nil {
		return false, 0, err
	}
	defer g.leave()
	if m, ok := g.Backstore.(backstore.Mapper); ok {
		return m.Mapping(off, limit)
	}
	size := g.Backstore.Size()
	if off < 0 || off >= size || limit <= 0 {
		return false, 0, fmt.Errorf("%v: mapping of %d bytes at %d: %w", g.key, limit, off, backstore.ErrOutOfRange)
	}
	return true, off + min(limit, size-off), nil
}

var _ backstore.Mapper = (*guardedStore)(nil)

// AtomicLimits forwards the store's backstore.AtomicWriter: its limits, none for a store without
// atomic writes (then WRITE ATOMIC(16) is not offered).
func (g *guardedStore) AtomicLimits() backstore.AtomicLimits {
	if aw, ok := g.Backstore.(backstore.AtomicWriter); ok {
		return aw.AtomicLimits()
	}
	return backstore.AtomicLimits{}
}

// WriteAtomicAt forwards an atomic write; only called within AtomicLimits.
func (g *guardedStore) WriteAtomicAt(p []byte, off int64, fua bool) error {
	if err := g.enter(); err != nil {
		return err
	}
	defer g.leave()
	aw, ok := g.Backstore.(backstore.AtomicWriter)
	if !ok {
		return fmt.Errorf("%v: atomic write: %w", g.key, unix.EOPNOTSUPP)
	}
	return aw.WriteAtomicAt(p, off, fua)
}

var _ backstore.AtomicWriter = (*guardedStore)(nil)

// CompareAndWriteMax forwards the store's backstore.CompareAndWriter (0: it has none).
func (g *guardedStore) CompareAndWriteMax() int {
	if cw, ok := g.Backstore.(backstore.CompareAndWriter); ok {
		return cw.CompareAndWriteMax()
	}
	return 0
}

func (g *guardedStore) CompareAndWrite(cmp, data []byte, off int64) (int64, error) {
	if err := g.enter(); err != nil {
		return 0, err
	}
	defer g.leave()
	cw, ok := g.Backstore.(backstore.CompareAndWriter)
	if !ok {
		return 0, fmt.Errorf("%v: compare and write: %w", g.key, errors.ErrUnsupported)
	}
	return cw.CompareAndWrite(cmp, data, off)
}

var _ backstore.CompareAndWriter = (*guardedStore)(nil)
