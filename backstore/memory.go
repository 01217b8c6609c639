package backstore

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	memChunkShift = 20
	// memChunkSize is the unit in which Memory allocates RAM: large enough that the chunk
	// table stays small (8 MiB of pointers for a fully written 1 TiB disk), small enough
	// that a sparse disk holding a filesystem's scattered metadata stays small too.
	memChunkSize = 1 << memChunkShift
	// memStripes is the number of locks that guard the chunks; chunk i is guarded by lock
	// i%memStripes. Transfers to different chunks rarely contend, and a lock per chunk would
	// cost memory for every chunk of a mostly empty disk.
	memStripes = 64

	// The chunk table is a three-level radix tree, allocated as it is written: a flat table of
	// 8 bytes per chunk would be made whole at start-up, 800 GiB for a 100 PiB disk, and a
	// disk larger than RAM would crash the daemon before any initiator wrote to it. A leaf
	// holds the pointers of 4096 chunks (32 KiB for 4 GiB of disk), a mid level those of 4096
	// leaves (16 TiB of disk), and the top level, the only part made up front, one pointer per
	// 16 TiB: 4 MiB for the largest size an int64 holds.
	memLeafBits  = 12
	memLeafSize  = 1 << memLeafBits
	memMidBits   = 12
	memMidSize   = 1 << memMidBits
	memTopShift  = memLeafBits + memMidBits // chunk index to top-level index
	memLevelMask = memLeafSize - 1
)

type memChunk = [memChunkSize]byte

// memLeaf is the last level: chunk slots, nil for a chunk never written or unmapped (reads as
// zeroes). Each slot is read and written only under its chunk's stripe lock.
type memLeaf [memLeafSize]*memChunk

// memMid is the middle level. Its slots are set once, by compare-and-swap, by whichever
// writer needs the leaf first: writers of different stripes may race for it.
type memMid [memMidSize]atomic.Pointer[memLeaf]

// memTable is one generation of Memory's chunk table. A new table (Resize, Close) is
// published only while every stripe lock is held, so a caller that holds any stripe lock and
// loads the table sees the current one.
type memTable struct {
	size   int64
	closed bool
	top    []atomic.Pointer[memMid]
}

func newMemTable(size int64) *memTable {
	return &memTable{size: size, top: make([]atomic.Pointer[memMid], (memChunkCount(size)+memMidSize*memLeafSize-1)>>memTopShift)}
}

// chunk returns chunk idx, nil when it was never written; the caller holds its stripe lock.
// It makes no allocation.
func (t *memTable) chunk(idx int64) *memChunk {
	mid := t.top[idx>>memTopShift].Load()
	if mid == nil {
		return nil
	}
	leaf := mid[idx>>memLeafBits&memLevelMask].Load()
	if leaf == nil {
		return nil
	}
	return leaf[idx&memLevelMask]
}

// slot returns the slot of chunk idx, making its mid level and leaf when alloc is true, or
// nil when they do not exist and alloc is false; the caller holds the chunk's stripe lock.
func (t *memTable) slot(idx int64, alloc bool) **memChunk {
	top := &t.top[idx>>memTopShift]
	mid := top.Load()
	if mid == nil {
		if !alloc {
			return nil
		}
		top.CompareAndSwap(nil, new(memMid)) // or another stripe's writer made it first
		mid = top.Load()
	}
	ls := &mid[idx>>memLeafBits&memLevelMask]
	leaf := ls.Load()
	if leaf == nil {
		if !alloc {
			return nil
		}
		ls.CompareAndSwap(nil, new(memLeaf))
		leaf = ls.Load()
	}
	return &leaf[idx&memLevelMask]
}

// memStripe is a lock padded to its own cache line, so that two cores taking neighbouring
// locks do not fight over one line.
type memStripe struct {
	sync.RWMutex
	_ [64 - unsafe.Sizeof(sync.RWMutex{})%64]byte
}

// Memory is a sparse RAM disk. RAM is allocated a chunk at a time on the first write to it,
// Unmap and WriteZeroes give whole chunks back, and the data is lost on Close. It serves tests
// (including CAPACITY DATA HAS CHANGED, through Resize) and benchmarks of the layers above.
type Memory struct {
	lbs       uint32
	table     atomic.Pointer[memTable]
	stripes   [memStripes]memStripe
	allocated atomic.Int64
	resizeMu  sync.Mutex // one Resize or Close at a time
}

var _ Backstore = (*Memory)(nil)

// NewMemory makes a RAM disk of size bytes (a positive multiple of logicalBlockSize) that
// reads as zeroes. logicalBlockSize is a power of two from 512 to 65536; 0 means 512.
func NewMemory(size int64, logicalBlockSize uint32) (*Memory, error) {
	logicalBlockSize, err := checkBlockSize("backstore memory", logicalBlockSize)
	if err != nil {
		return nil, err
	}
	if err := checkMemSize(size, logicalBlockSize); err != nil {
		return nil, err
	}
	m := &Memory{lbs: logicalBlockSize}
	m.table.Store(newMemTable(size))
	return m, nil
}

func checkMemSize(size int64, lbs uint32) error {
	if size <= 0 || size%int64(lbs) != 0 {
		return fmt.Errorf("backstore memory: size %d is not a positive multiple of the %d-byte block", size, lbs)
	}
	return nil
}

// memChunkCount is the number of chunks of a disk of size bytes (written so as not to
// overflow for sizes near the int64 limit).
func memChunkCount(size int64) int64 {
	n := size >> memChunkShift
	if size&(memChunkSize-1) != 0 {
		n++
	}
	return n
}

func memError(op string, off int64, err error) error {
	return fmt.Errorf("backstore memory: %s at %d: %w", op, off, err)
}

func memRangeError(op string, off, length, size int64) error {
	return fmt.Errorf("backstore memory: %s of %d bytes at %d, capacity %d: %w", op, length, off, size, ErrOutOfRange)
}

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

// stripesOf returns the stripes of the chunks of [off, end) (end > off) as a bit set.
func stripesOf(off, end int64) uint64 {
	first, last := off>>memChunkShift, (end-1)>>memChunkShift
	if last-first+1 >= memStripes {
		return ^uint64(0)
	}
	var set uint64
	for idx := first; idx <= last; idx++ {
		set |= 1 << (idx % memStripes)
	}
	return set
}

// lockStripes locks the stripes of set in ascending order, shared or exclusive.
func (m *Memory) lockStripes(set uint64, shared bool) {
	for ; set != 0; set &= set - 1 {
		s := &m.stripes[bits.TrailingZeros64(set)]
		if shared {
			s.RLock()
		} else {
			s.Lock()
		}
	}
}

// unlockStripes unlocks what lockStripes locked.
func (m *Memory) unlockStripes(set uint64, shared bool) {
	for ; set != 0; set &= set - 1 {
		s := &m.stripes[bits.TrailingZeros64(set)]
		if shared {
			s.RUnlock()
		} else {
			s.Unlock()
		}
	}
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

// Size returns the current capacity.
func (m *Memory) Size() int64 { return m.table.Load().size }

// Refresh returns the current capacity: Resize is the only way it changes.
func (m *Memory) Refresh() (int64, error) {
	t := m.table.Load()
	if t.closed {
		return 0, fmt.Errorf("backstore memory: refresh: %w", ErrClosed)
	}
	return t.size, nil
}

// Resize changes the capacity, as growing a volume outside the daemon would; the SCSI layer
// notices on its next Refresh. Data below the new size is kept; space added later reads as
// zeroes, also where it had been cut off by an earlier shrink.
func (m *Memory) Resize(newSize int64) error {
	if err := checkMemSize(newSize, m.lbs); err != nil {
		return err
	}
	return m.replaceTable(func(old *memTable) *memTable {
		t := newMemTable(newSize)
		// The levels below the top are shared with the old table: every stripe lock is held.
		for i := range min(len(t.top), len(old.top)) {
			t.top[i].Store(old.top[i].Load())
		}
		m.dropChunks(old, memChunkCount(newSize))
		if tail := newSize & (memChunkSize - 1); tail != 0 && newSize < old.size {
			if c := t.chunk(memChunkCount(newSize) - 1); c != nil {
				clear(c[tail:])
			}
		}
		return t
	})
}

// dropChunks frees the chunks of t from index from on, so that space a later Resize adds back
// reads as zeroes. It visits only the levels that exist; every stripe lock is held.
func (m *Memory) dropChunks(t *memTable, from int64) {
	for ti := from >> memTopShift; ti < int64(len(t.top)); ti++ {
		mid := t.top[ti].Load()
		if mid == nil {
			continue
		}
		for mi := range mid {
			leaf := mid[mi].Load()
			if leaf == nil {
				continue
			}
			base := ti<<memTopShift | int64(mi)<<memLeafBits
			for li := range leaf {
				if base+int64(li) >= from && leaf[li] != nil {
					leaf[li] = nil
					m.allocated.Add(-memChunkSize)
				}
			}
		}
	}
}

// Close drops the data; every later call fails with ErrClosed.
func (m *Memory) Close() error {
	return m.replaceTable(func(old *memTable) *memTable {
		m.allocated.Store(0)
		return &memTable{size: old.size, closed: true}
	})
}

// replaceTable publishes the table that next makes from the current one, holding every
// stripe lock so that no transfer is half way through a chunk.
func (m *Memory) replaceTable(next func(old *memTable) *memTable) error {
	m.resizeMu.Lock()
	defer m.resizeMu.Unlock()
	old := m.table.Load()
	if old.closed {
		return fmt.Errorf("backstore memory: %w", ErrClosed)
	}
	for i := range m.stripes {
		m.stripes[i].Lock()
	}
	m.table.Store(next(old))
	for i := range m.stripes {
		m.stripes[i].Unlock()
	}
	return nil
}

// Allocated returns the bytes of RAM that hold data, a multiple of the 1 MiB chunk.
func (m *Memory) Allocated() int64 { return m.allocated.Load() }

func (m *Memory) LogicalBlockSize() uint32  { return m.lbs }
func (m *Memory) PhysicalBlockSize() uint32 { return m.lbs }
func (m *Memory) ReadOnly() bool            { return false }

// Capabilities: unmapped RAM is freed and reads back as zeroes; RAM does not rotate.
func (m *Memory) Capabilities() Capabilities {
	return Capabilities{Unmap: true, UnmapZeroes: true, NonRotational: true}
}

// NonBlocking implements NonBlocking: every operation is a copy in RAM.
func (m *Memory) NonBlocking() bool { return true }
