package backstore

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
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

// Size returns the current capacity.
func (m *Memory) Size() int64 { return m.table.Load().size }

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
