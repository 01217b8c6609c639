package srp

import "sync/atomic"

// ctxChunkLen is how many contexts a channel makes at a time.
const ctxChunkLen = 16

// ctxChunk is contexts made together.
type ctxChunk [ctxChunkLen]cmdCtx

// ctxTable is a channel's command contexts: up to nctx of them (2 × credits), made a chunk at a
// time when every one made is busy. A channel so holds the contexts of the most IUs it has had
// in progress at once rather than of every credit it granted: the idle paths and spare
// channels of a multipath initiator run a few commands, a busy channel makes the rest in its
// first round trips. Chunks live as long as the channel, so a context keeps its address and
// its index (which work request IDs carry). Task management looks at the contexts from its own
// goroutine (claim) while the group goroutine makes more: the chunk pointers are atomic, and a
// chunk is published once its contexts are set up.
type ctxTable struct {
	chunks []atomic.Pointer[ctxChunk] // nctx / ctxChunkLen rounded up, fixed at construction
	n      int                        // contexts made (group goroutine)
}

// at returns context i, which must have been made.
func (t *ctxTable) at(i uint32) *cmdCtx {
	return &t.chunks[i/ctxChunkLen].Load()[i%ctxChunkLen]
}

// made reports whether context i exists.
func (t *ctxTable) made(i uint64) bool { return i < uint64(t.n) }

// forMade calls f with every context made (group goroutine).
func (t *ctxTable) forMade(f func(*cmdCtx)) {
	for i := range t.n {
		f(t.at(uint32(i)))
	}
}

// forPublished calls f with every context made, from any goroutine: what the group goroutine
// made after the call began may or may not be seen, and is free.
func (t *ctxTable) forPublished(f func(*cmdCtx)) {
	for k := range t.chunks {
		chunk := t.chunks[k].Load()
		if chunk == nil {
			return
		}
		for i := range chunk {
			f(&chunk[i])
		}
	}
}

// initCtxs sizes the table for nctx contexts and makes the first chunk: the first commands
// after the login allocate nothing.
func (ch *channel) initCtxs() {
	ch.ctxs.chunks = make([]atomic.Pointer[ctxChunk], (ch.nctx+ctxChunkLen-1)/ctxChunkLen)
	ch.growCtxs()
}

// growCtxs makes the next chunk of contexts and puts them on the free list, which must be
// empty; false when all nctx are made. The contexts of a last chunk beyond nctx stay unused,
// free for ever: they have no send buffer.
func (ch *channel) growCtxs() bool {
	base := ch.ctxs.n
	if base >= ch.nctx {
		return false
	}
	n := min(ctxChunkLen, ch.nctx-base)
	chunk := new(ctxChunk)
	if cap(ch.free) < base+n {
		ch.free = make([]*cmdCtx, 0, base+n)
	}
	for i := n - 1; i >= 0; i-- {
		c := &chunk[i]
		c.ch = ch
		c.idx = uint32(base + i)
		c.recv = -1
		c.buf, c.table = noBuf, noBuf
		c.abortDone = make(chan struct{}, 1)
		c.sendOff = ch.sendBufOff + uint64(base+i)*uint64(ch.sendStride)
		ch.free = append(ch.free, c)
	}
	ch.ctxs.chunks[base/ctxChunkLen].Store(chunk)
	ch.ctxs.n = base + n
	return true
}
