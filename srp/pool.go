package srp

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/srptarget/srptarget/ib"
)

// bufPool is the data-buffer memory of one RDMA device: one slab registered once in the
// device's protection domain and shared by all channels on that device, so that no command
// registers memory. Commands take one contiguous buffer each, because scsi.Command.DataIn and
// DataOut are single slices that the backstore reads and writes directly (zero copy: the
// backstore fills the very bytes that are then RDMA-written, and RDMA READs land where the
// backstore writes from).
//
// Allocation is a binary buddy allocator over 4 KiB units: blocks of 4 KiB × 2^k up to the
// largest transfer, split on allocation and merged on free. Its metadata is a few arrays sized
// once, so neither allocating nor freeing touches the Go heap.
//
// When no block is free the channel queues the command and retries when any channel frees a
// buffer (register/notify); a command that waited longer than Limits.BufferWait is answered
// with BUSY. Waiting first rather than answering TASK SET FULL at once keeps large transfers
// flowing under load without the Linux midlayer lowering the queue depth.
type bufPool struct {
	slab *ib.Slab
	mr   ib.MR
	mem  []byte

	mu       sync.Mutex
	blocks   buddies // the largest block is poolMinBlock << blocks.maxOrder
	waiters  []waker
	inUse    atomic.Int64 // bytes handed out
	cached   atomic.Int64 // bytes free in the poll groups' caches (bufCache)
	highMark atomic.Int64
	waiting  atomic.Int32 // channels with commands waiting for a buffer

	closeOnce sync.Once
	closing   chan struct{} // closed by close
	closeErr  error
}

// newBufPool maps size bytes (rounded up to a multiple of the largest block) and registers
// them in pd. maxBuf is the largest buffer a command may ask for. remoteWrite adds remote
// write access, which iWARP requires of RDMA READ sinks (Limits.RemoteWriteForReadSinks).
func newBufPool(pd ib.ProtectionDomain, size int64, maxBuf uint32, remoteWrite bool) (*bufPool, error) {
	size, maxOrder, err := poolGeometry(size, maxBuf)
	if err != nil {
		return nil, err
	}
	// The memory is a slab outside the Go heap: registered memory must not be Go memory
	// (cgo), and a slab goes back to the kernel the moment the pool closes, where a heap
	// allocation would stay in the process until the garbage collector and the scavenger
	// got round to it (a device removed and added back would then hold two pools).
	slab, err := ib.NewSlab(int(size))
	if err != nil {
		return nil, fmt.Errorf("srp: buffer pool of %d bytes: %w", size, err)
	}
	p := newBufPoolOver(slab.Bytes()[:size], maxOrder)
	p.slab = slab
	// Local write: RDMA READ data lands here. No remote access on IB and RoCE: the initiator
	// never touches target memory. iWARP places READ responses through the sink's STag, which
	// needs remote write.
	access := ib.AccessLocalWrite
	if remoteWrite {
		access |= ib.AccessRemoteWrite
	}
	mr, err := pd.RegisterMemory(p.mem, access)
	if err != nil {
		_ = slab.Close()
		return nil, fmt.Errorf("srp: registering the buffer pool of %d bytes: %w", len(p.mem), err)
	}
	p.mr = mr
	return p, nil
}

// newBufPoolMem builds the allocator over Go memory, unregistered. Tests use it.
func newBufPoolMem(size int64, maxBuf uint32) (*bufPool, error) {
	size, maxOrder, err := poolGeometry(size, maxBuf)
	if err != nil {
		return nil, err
	}
	return newBufPoolOver(make([]byte, size), maxOrder), nil
}

// poolGeometry rounds size up to a whole number of the largest blocks, which hold maxBuf
// bytes (at least poolMinBlock), and returns it with the largest block's order.
func poolGeometry(size int64, maxBuf uint32) (int64, int, error) {
	if maxBuf < poolMinBlock {
		maxBuf = poolMinBlock
	}
	maxOrder := bits.Len32((maxBuf+poolMinBlock-1)/poolMinBlock - 1)
	top := int64(poolMinBlock) << maxOrder
	if size < top {
		size = top
	}
	size = (size + top - 1) / top * top
	if size/poolMinBlock > 1<<30 {
		return 0, 0, fmt.Errorf("srp: buffer pool of %d bytes is too large", size)
	}
	return size, maxOrder, nil
}

// newBufPoolOver builds the allocator over mem, whose length poolGeometry gave, all free.
func newBufPoolOver(mem []byte, maxOrder int) *bufPool {
	return &bufPool{
		closing: make(chan struct{}),
		mem:     mem,
		blocks:  newBuddies(int64(len(mem))/poolMinBlock, maxOrder),
	}
}

// close deregisters and unmaps the pool, once. Every buffer must have been freed and every
// queue pair that used it closed.
func (p *bufPool) close() error {
	p.closeOnce.Do(func() {
		close(p.closing)
		if p.mr != nil {
			p.closeErr = p.mr.Deregister()
		}
		if p.slab != nil {
			if cerr := p.slab.Close(); p.closeErr == nil {
				p.closeErr = cerr
			}
		}
	})
	return p.closeErr
}

// unused reports whether no channel uses the pool any more and every buffer is back.
func (p *bufPool) unused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters) == 0 && p.inUse.Load() == 0 && p.cached.Load() == 0
}

// poolBuf is one allocated block.
type poolBuf struct {
	unit  int32 // first unit; -1 when none
	order int8
	n     uint32 // bytes asked for
}

var noBuf = poolBuf{unit: -1}

// bytes is the size of the block (0 for noBuf): what it takes from the pool.
func (b poolBuf) bytes() int64 {
	if !b.valid() {
		return 0
	}
	return int64(poolMinBlock) << b.order
}

func (b poolBuf) valid() bool { return b.unit >= 0 }

// offset is the block's byte offset in the pool (and in its MR).
func (b poolBuf) offset() uint64 { return uint64(b.unit) * poolMinBlock }

// bytes returns the n bytes asked for.
func (p *bufPool) bytes(b poolBuf) []byte {
	off := b.offset()
	return p.mem[off : off+uint64(b.n) : off+uint64(b.n)]
}

// orderFor returns the order of the smallest block holding n bytes, or -1 if none does.
func (p *bufPool) orderFor(n uint32) int {
	units := (uint64(n) + poolMinBlock - 1) / poolMinBlock
	if units == 0 {
		units = 1
	}
	o := bits.Len64(units - 1)
	if o > p.blocks.maxOrder {
		return -1
	}
	return o
}

// blockBytes is the size of the block alloc would hand out for n bytes (0 if none can hold
// them; alloc then fails).
func (p *bufPool) blockBytes(n uint32) int64 {
	o := p.orderFor(n)
	if o < 0 {
		return 0
	}
	return int64(poolMinBlock) << o
}

// alloc returns a block of at least n bytes (n > 0), or ok false when none is free now.
func (p *bufPool) alloc(n uint32) (poolBuf, bool) {
	want := p.orderFor(n)
	if want < 0 {
		return noBuf, false
	}
	p.mu.Lock()
	u, ok := p.blocks.take(want)
	p.mu.Unlock()
	if !ok {
		return noBuf, false
	}
	p.noteInUse(p.inUse.Add(int64(poolMinBlock) << want))
	return poolBuf{unit: u, order: int8(want), n: n}, true
}

// noteInUse raises the high mark to used bytes.
func (p *bufPool) noteInUse(used int64) {
	for {
		hm := p.highMark.Load()
		if used <= hm || p.highMark.CompareAndSwap(hm, used) {
			return
		}
	}
}

// release returns b to the pool, merging it with its free buddies, and wakes the channels
// waiting for a buffer.
func (p *bufPool) release(b poolBuf) {
	if !b.valid() {
		return
	}
	p.inUse.Add(-(int64(poolMinBlock) << b.order))
	p.mu.Lock()
	p.blocks.give(b.unit, int(b.order))
	if p.waiting.Load() > 0 {
		p.wakeLocked()
	}
	p.mu.Unlock()
}

// wakeAll wakes every channel of the pool.
func (p *bufPool) wakeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wakeLocked()
}

// wakeLocked wakes every channel of the pool, p.mu held.
func (p *bufPool) wakeLocked() {
	for _, w := range p.waiters {
		w.signal()
	}
}

// waker is what the pool wakes when buffers come back: a channel.
type waker interface{ signal() }

// register adds a channel's wake-up channel, signalled when a buffer is freed while some
// channel waits.
func (p *bufPool) register(w waker) {
	p.mu.Lock()
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
}

func (p *bufPool) unregister(w waker) {
	p.mu.Lock()
	if i := slices.Index(p.waiters, w); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1) // clears the vacated slot
	}
	p.mu.Unlock()
}

// freeBytes counts the free memory (for tests and stats).
func (p *bufPool) freeBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocks.freeUnits() * poolMinBlock
}

// size is the pool's total memory.
func (p *bufPool) size() int64 { return int64(len(p.mem)) }

// buddies is a binary buddy allocator over units of poolMinBlock: free blocks of 2^k units up
// to 2^maxOrder, split on take and merged with their free buddy on give. Its metadata is a few
// arrays sized once, so neither touches the Go heap. Its owner's lock guards it.
type buddies struct {
	maxOrder int
	heads    []int32 // per order: first free block (unit index), -1 if none
	next     []int32 // per unit, for a free block's head unit: next free block of its order
	prev     []int32
	order    []int8 // per unit, for a block's head unit: its order
	free     []bool // per unit, for a block's head unit: whether it is free
}

// newBuddies makes the allocator of units units (a whole number of the largest blocks), all
// free.
func newBuddies(units int64, maxOrder int) buddies {
	b := buddies{
		maxOrder: maxOrder,
		heads:    make([]int32, maxOrder+1),
		next:     make([]int32, units),
		prev:     make([]int32, units),
		order:    make([]int8, units),
		free:     make([]bool, units),
	}
	for i := range b.heads {
		b.heads[i] = -1
	}
	for u := int32(units) - int32(1)<<maxOrder; u >= 0; u -= int32(1) << maxOrder {
		b.push(u, maxOrder)
	}
	return b
}

// take returns the first unit of a free block of order want, split from a larger one if
// need be, or false when none is free.
func (b *buddies) take(want int) (int32, bool) {
	o := want
	for o <= b.maxOrder && b.heads[o] < 0 {
		o++
	}
	if o > b.maxOrder {
		return -1, false
	}
	u := b.heads[o]
	b.unlink(u, o)
	for o > want {
		o--
		b.push(u+int32(1)<<o, o)
	}
	b.order[u] = int8(want)
	b.free[u] = false
	return u, true
}

// give frees the block at unit u of order o, merged with its buddies while they are free.
func (b *buddies) give(u int32, o int) {
	for o < b.maxOrder {
		buddy := u ^ int32(1)<<o
		if !b.free[buddy] || int(b.order[buddy]) != o {
			break
		}
		b.unlink(buddy, o)
		u = min(u, buddy)
		o++
	}
	b.push(u, o)
}

// freeUnits counts the free units.
func (b *buddies) freeUnits() int64 {
	var n int64
	for o, h := range b.heads {
		for u := h; u >= 0; u = b.next[u] {
			n += int64(1) << o
		}
	}
	return n
}

// push makes the block at unit u of order o free. Its owner's lock held (or the allocator not yet shared).
func (b *buddies) push(u int32, o int) {
	b.order[u] = int8(o)
	b.free[u] = true
	b.prev[u] = -1
	b.next[u] = b.heads[o]
	if h := b.heads[o]; h >= 0 {
		b.prev[h] = u
	}
	b.heads[o] = u
}

// unlink takes the free block at unit u of order o off its free list. Its owner's lock held.
func (b *buddies) unlink(u int32, o int) {
	if pr := b.prev[u]; pr >= 0 {
		b.next[pr] = b.next[u]
	} else {
		b.heads[o] = b.next[u]
	}
	if nx := b.next[u]; nx >= 0 {
		b.prev[nx] = b.prev[u]
	}
	b.free[u] = false
}
