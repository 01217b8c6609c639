package backstore

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Memory's reads and writes: one loop over the chunk pieces of a range, under the stripe locks.

// memOp is what transfer does to each chunk piece.
type memOp uint8

const (
	memRead   memOp = iota // copy out of the chunk, zeroes for one never written
	memWrite               // copy into the chunk, allocating it on first write
	memZero                // free a chunk covered completely, zero part of one that is not
	memAtomic              // memWrite holding the locks of every chunk of the range at once
)

// transfer does kind to [off, off+length) a chunk piece at a time, with the current table
// loaded; p holds the data of memRead, memWrite and memAtomic (length is then len(p)) and is
// nil for memZero. memWrite and memZero hold each chunk's stripe lock (exclusive) while they
// work on it. memRead takes the stripe locks of every chunk of its range (shared) before the
// first piece and memAtomic all of them exclusive, so that a read sees an atomic write whole or
// not at all, whichever chunks either spans; both take them in ascending stripe order, the only
// order anything takes more than one in (replaceTable takes them all), so no two transfers
// wait for each other in a cycle. The range is checked before the first piece and again under
// each lock, because a Resize or Close may come between pieces. The operations share one loop
// with a switch rather than a callback, so that a transfer makes no closure and no indirect
// call per piece: reads and writes must not allocate.
func (m *Memory) transfer(kind memOp, op string, p []byte, off, length int64) error {
	t := m.table.Load()
	if t.closed {
		return memError(op, off, ErrClosed)
	}
	if !checkRange(t.size, off, length) {
		return memRangeError(op, off, length, t.size)
	}
	end := off + length
	var held uint64 // stripes locked for the whole transfer (memRead, memAtomic)
	if (kind == memRead || kind == memAtomic) && length > 0 {
		held = stripesOf(off, end)
		m.lockStripes(held, kind == memRead)
		defer m.unlockStripes(held, kind == memRead)
	}
	for off < end {
		idx := off >> memChunkShift
		in := int(off & (memChunkSize - 1))
		n := int(min(end-off, int64(memChunkSize-in)))
		s := &m.stripes[idx%memStripes]
		if held == 0 {
			s.Lock()
		}
		t = m.table.Load()
		if t.closed || off+int64(n) > t.size {
			if held == 0 {
				s.Unlock()
			}
			if t.closed {
				return memError(op, off, ErrClosed)
			}
			return memRangeError(op, off, int64(n), t.size)
		}
		c := t.chunk(idx)
		switch {
		case kind == memRead && c == nil:
			clear(p[:n])
		case kind == memRead:
			copy(p[:n], c[in:])
		case kind == memWrite || kind == memAtomic:
			if c == nil {
				c = new(memChunk)
				*t.slot(idx, true) = c
				m.allocated.Add(memChunkSize)
			}
			copy(c[in:], p[:n])
		case c == nil: // memZero of a chunk never written
		case in == 0 && end >= min((idx<<memChunkShift)+memChunkSize, t.size):
			*t.slot(idx, false) = nil
			m.allocated.Add(-memChunkSize)
		default:
			clear(c[in : in+n])
		}
		if held == 0 {
			s.Unlock()
		}
		if p != nil {
			p = p[n:]
		}
		off += int64(n)
	}
	return nil
}

// ReadAt copies out of the chunks; chunks never written read as zeroes.
func (m *Memory) ReadAt(p []byte, off int64) error {
	if m.readOneChunk(p, off) {
		return nil
	}
	return m.transfer(memRead, "read", p, off, int64(len(p)))
}

// readOneChunk is ReadAt for a read that one chunk holds, nearly every read of a data path:
// what transfer does for it (the table loaded and the range checked under the chunk's stripe
// lock, held shared while copying, so that an atomic write is seen whole or not at all)
// without its bit set of stripes and deferred unlock. It reports false, having read nothing,
// for any other read, and for one that fails (closed, out of range): transfer says why.
func (m *Memory) readOneChunk(p []byte, off int64) bool {
	n := int64(len(p))
	in := off & (memChunkSize - 1)
	if n == 0 || off < 0 || in+n > memChunkSize {
		return false
	}
	idx := off >> memChunkShift
	s := &m.stripes[idx%memStripes]
	s.RLock()
	t := m.table.Load()
	if t.closed || !checkRange(t.size, off, n) {
		s.RUnlock()
		return false
	}
	if c := t.chunk(idx); c == nil {
		clear(p)
	} else {
		copy(p, c[in:])
	}
	s.RUnlock()
	return true
}

// WriteAt copies into the chunks, allocating those not yet written. fua changes nothing: RAM
// is as stable as this store gets.
func (m *Memory) WriteAt(p []byte, off int64, fua bool) error {
	return m.transfer(memWrite, "write", p, off, int64(len(p)))
}

// memAtomicMax bounds one atomic write: it holds the stripe locks of its chunks while it copies.
const memAtomicMax = 16 << 20

// AtomicLimits: any write up to memAtomicMax is atomic. A read takes the locks of all its chunks
// before copying and WriteAtomicAt all of its own (transfer), so a read sees the whole write or
// none of it; there is nothing to survive a crash.
func (m *Memory) AtomicLimits() AtomicLimits { return AtomicLimits{MaxBytes: memAtomicMax} }

// WriteAtomicAt copies p into the chunks holding the locks of all of them.
func (m *Memory) WriteAtomicAt(p []byte, off int64, fua bool) error {
	if len(p) > memAtomicMax {
		return memError("atomic write", off, unix.EINVAL)
	}
	return m.transfer(memAtomic, "atomic write", p, off, int64(len(p)))
}

// Flush has nothing to make durable.
func (m *Memory) Flush() error {
	if m.table.Load().closed {
		return fmt.Errorf("backstore memory: flush: %w", ErrClosed)
	}
	return nil
}

// Unmap frees the chunks that [off, off+length) covers completely, giving their RAM back, and
// zeroes the parts of the others; the range reads as zeroes.
func (m *Memory) Unmap(off, length int64) error {
	return m.transfer(memZero, "unmap", nil, off, length)
}

// WriteZeroes is Unmap: for RAM there is nothing to keep allocated.
func (m *Memory) WriteZeroes(off, length int64) error {
	return m.transfer(memZero, "write zeroes", nil, off, length)
}
