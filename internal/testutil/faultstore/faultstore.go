// Package faultstore wraps a backstore so that tests can make chosen operations fail, for the
// error paths of the SCSI layer and the engine (sense data, statistics, task management).
package faultstore

import (
	"fmt"
	"strings"
	"sync"

	"github.com/srptarget/srptarget/backstore"
)

// Op names the kinds of backstore operation that Faulty can fail. They are bits, so one
// injection can cover several kinds (OpRead|OpWrite).
type Op uint8

const (
	OpRead Op = 1 << iota
	OpWrite
	OpFlush
	OpUnmap
	OpWriteZeroes

	// OpAll covers every kind.
	OpAll = OpRead | OpWrite | OpFlush | OpUnmap | OpWriteZeroes
)

var opNames = [...]string{"read", "write", "flush", "unmap", "write zeroes"}

func (o Op) String() string {
	if o == 0 {
		return "none"
	}
	var parts []string
	for i, name := range opNames {
		if o&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if rest := o &^ OpAll; rest != 0 {
		parts = append(parts, fmt.Sprintf("Op(%#x)", uint8(rest)))
	}
	return strings.Join(parts, "|")
}

type fault struct {
	ops      Op
	off, end int64 // end < 0: no end
	err      error
}

// Faulty wraps a Backstore and fails chosen operations on chosen ranges, so that tests of the
// layers above can check how I/O errors turn into sense data (EIO into MEDIUM ERROR, ENOSPC
// into SPACE ALLOCATION FAILED). A failed operation does not reach the wrapped store. Every
// method not listed here is the wrapped store's.
type Faulty struct {
	backstore.Backstore

	mu     sync.RWMutex
	faults []fault
}

var _ backstore.Backstore = (*Faulty)(nil)

// New wraps inner; until Inject is called it changes nothing.
func New(inner backstore.Backstore) *Faulty {
	return &Faulty{Backstore: inner}
}

// Inject makes the operations in op fail with err (wrapped with context, so errors.Is(result,
// err) holds) when they touch [off, off+length). length <= 0 extends the range to the end of
// the store. Flush has no range: an injection that includes OpFlush fails every flush.
// Injections add up; the earliest matching one wins.
func (f *Faulty) Inject(op Op, off, length int64, err error) {
	end := int64(-1)
	if length > 0 {
		end = off + length
	}
	f.mu.Lock()
	f.faults = append(f.faults, fault{ops: op, off: off, end: end, err: err})
	f.mu.Unlock()
}

// Clear removes every injection.
func (f *Faulty) Clear() {
	f.mu.Lock()
	f.faults = nil
	f.mu.Unlock()
}

// match returns the injected error for op on [off, off+length), or nil.
func (f *Faulty) match(op Op, off, length int64) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, ft := range f.faults {
		if ft.ops&op == 0 {
			continue
		}
		if op == OpFlush {
			return ft.err
		}
		// Overlap of [off, off+length) with [ft.off, ft.end); an empty access overlaps when
		// its offset lies in the range.
		if (ft.end < 0 || off < ft.end) && (off+length > ft.off || (length == 0 && off >= ft.off)) {
			return ft.err
		}
	}
	return nil
}

func (f *Faulty) ReadAt(p []byte, off int64) error {
	if err := f.match(OpRead, off, int64(len(p))); err != nil {
		return fmt.Errorf("backstore faulty: read at %d: %w", off, err)
	}
	return f.Backstore.ReadAt(p, off)
}

func (f *Faulty) WriteAt(p []byte, off int64, fua bool) error {
	if err := f.match(OpWrite, off, int64(len(p))); err != nil {
		return fmt.Errorf("backstore faulty: write at %d: %w", off, err)
	}
	return f.Backstore.WriteAt(p, off, fua)
}

func (f *Faulty) Flush() error {
	if err := f.match(OpFlush, 0, 0); err != nil {
		return fmt.Errorf("backstore faulty: flush: %w", err)
	}
	return f.Backstore.Flush()
}

func (f *Faulty) Unmap(off, length int64) error {
	if err := f.match(OpUnmap, off, length); err != nil {
		return fmt.Errorf("backstore faulty: unmap at %d: %w", off, err)
	}
	return f.Backstore.Unmap(off, length)
}

func (f *Faulty) WriteZeroes(off, length int64) error {
	if err := f.match(OpWriteZeroes, off, length); err != nil {
		return fmt.Errorf("backstore faulty: write zeroes at %d: %w", off, err)
	}
	return f.Backstore.WriteZeroes(off, length)
}

// Async is Faulty over a store that a backstore.Queue drives (File, Block): StartRead,
// StartWrite and StartFlush fail as ReadAt, WriteAt and Flush do, with the same errors,
// through Queue.Fail; otherwise they are the wrapped store's.
type Async struct {
	*Faulty
	inner backstore.AsyncStore
}

var _ backstore.AsyncStore = (*Async)(nil)

// NewAsync wraps inner; until Inject is called it changes nothing.
func NewAsync(inner backstore.AsyncStore) *Async {
	return &Async{Faulty: New(inner), inner: inner}
}

func (a *Async) StartRead(q *backstore.Queue, p []byte, off int64, tag uint64) error {
	if err := a.match(OpRead, off, int64(len(p))); err != nil {
		return q.Fail(fmt.Errorf("backstore faulty: read at %d: %w", off, err), tag)
	}
	return a.inner.StartRead(q, p, off, tag)
}

func (a *Async) StartWrite(q *backstore.Queue, p []byte, off int64, fua bool, tag uint64) error {
	if err := a.match(OpWrite, off, int64(len(p))); err != nil {
		return q.Fail(fmt.Errorf("backstore faulty: write at %d: %w", off, err), tag)
	}
	return a.inner.StartWrite(q, p, off, fua, tag)
}

func (a *Async) StartFlush(q *backstore.Queue, tag uint64) error {
	if err := a.match(OpFlush, 0, 0); err != nil {
		return q.Fail(fmt.Errorf("backstore faulty: flush: %w", err), tag)
	}
	return a.inner.StartFlush(q, tag)
}
