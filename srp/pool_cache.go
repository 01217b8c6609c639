package srp

// bufCache is a poll group's cache of free data buffers of one pool: the small blocks its
// channels give back, handed out again without the pool's mutex, which every group would
// otherwise take twice per command (the per-core caches SPDK and the kernel's slab keep for
// the same reason). Only the group goroutine uses it. Blocks in a cache are free: the pool
// counts them in cached, not in inUse. A group gives its cache back to the pool when a channel
// waits for buffers (the pool's waiting count) and when it stops using the device.
type bufCache struct {
	p    *bufPool
	free [cacheOrders][]poolBuf
}

const (
	// cacheOrders: blocks up to poolMinBlock << (cacheOrders-1) (64 KiB) are cached.
	cacheOrders = 5
	// cacheDepth bounds the blocks cached of the smallest order, half as many of the next,
	// and so on: 256 KiB per order, a group holds at most 1.25 MiB per device. A queue pair
	// with 64 commands of 4 KiB in flight is served from the cache.
	cacheDepth = 64
)

func newBufCache(p *bufPool) *bufCache {
	c := &bufCache{p: p}
	for o := range c.free {
		c.free[o] = make([]poolBuf, 0, cacheDepth>>o)
	}
	return c
}

// alloc returns a block of at least n bytes from the cache, or from the pool.
func (c *bufCache) alloc(n uint32) (poolBuf, bool) {
	if c == nil {
		return noBuf, false
	}
	if o := c.p.orderFor(n); o >= 0 && o < cacheOrders {
		if k := len(c.free[o]); k > 0 {
			b := c.free[o][k-1]
			c.free[o] = c.free[o][:k-1]
			b.n = n
			sz := int64(poolMinBlock) << o
			c.p.cached.Add(-sz)
			c.p.noteInUse(c.p.inUse.Add(sz))
			return b, true
		}
	}
	return c.p.alloc(n)
}

// release gives b back to the cache, or to the pool when the cache is full for its size or a
// channel waits for buffers.
func (c *bufCache) release(b poolBuf) {
	if !b.valid() {
		return
	}
	if o := int(b.order); o < cacheOrders && len(c.free[o]) < cacheDepth>>o && c.p.waiting.Load() == 0 {
		c.free[o] = append(c.free[o], b)
		sz := int64(poolMinBlock) << o
		c.p.inUse.Add(-sz)
		c.p.cached.Add(sz)
		return
	}
	c.p.release(b)
}

// flush gives every cached block back to the pool.
func (c *bufCache) flush() {
	if c == nil {
		return
	}
	for o := range c.free {
		for _, b := range c.free[o] {
			c.p.cached.Add(-(int64(poolMinBlock) << o))
			c.p.inUse.Add(int64(poolMinBlock) << o) // release takes it off again
			c.p.release(b)
		}
		c.free[o] = c.free[o][:0]
	}
}

// empty reports whether nothing is cached.
func (c *bufCache) empty() bool {
	for o := range c.free {
		if len(c.free[o]) > 0 {
			return false
		}
	}
	return true
}
