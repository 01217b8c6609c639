package memfabric

import (
	"time"

	"github.com/srptarget/srptarget/ib"
)

// enterError moves the QP to the error state and flushes everything outstanding, send queue
// first, each queue in posting order.
func (c *Conn) enterError() {
	if c.state != qpReady {
		return
	}
	c.state = qpError
	c.unblock()
	c.flushSend()
	c.flushRecv()
	if peer := c.peer(); peer != nil {
		peer.dirty = true // a SEND of the peer's waiting for our receives now gets no answer
	}
}

func (c *Conn) flushSend() {
	for ; c.sq.exec < c.sq.tail; c.sq.exec++ {
		s := c.sq.slot(c.sq.exec)
		c.push(cqEntry{c: ib.Completion{ID: s.wr.ID, Status: ib.StatusWRFlushError}, sq: true, idx: c.sq.exec})
	}
}

func (c *Conn) flushRecv() {
	for ; c.rq.next < c.rq.tail; c.rq.next++ {
		c.push(cqEntry{c: ib.Completion{ID: c.rq.slot(c.rq.next).id, Status: ib.StatusWRFlushError}, idx: c.rq.next})
	}
}

// fail completes the head work request with an error (signaled or not) and moves the QP to the
// error state, which flushes the rest.
func (c *Conn) fail(st ib.Status) {
	idx := c.sq.exec
	c.push(cqEntry{c: ib.Completion{ID: c.sq.slot(idx).wr.ID, Status: st}, sq: true, idx: idx})
	c.sq.exec++
	c.enterError()
}

// progress executes the send queue in order until it is empty, blocked or in error. Called with
// p.mu held, from settle only.
func (c *Conn) progress() {
	for c.state == qpReady && !c.closed && !c.removed && c.sq.exec < c.sq.tail {
		s := c.sq.slot(c.sq.exec)
		peer := c.peer()
		if !peer.answers() {
			if c.block(blockRetry, c.node.f.opts.RetryTimeout, false) {
				return
			}
			c.fail(ib.StatusTransportRetryExceeded)
			return
		}
		var st ib.Status
		switch s.wr.Op {
		case ib.OpSend:
			if !peer.recvPosted() {
				// Receiver not ready: the peer NAKs and we retry rnrRetry times.
				if peer.srq != nil && !peer.srq.blocked(peer) {
					continue // a receive was posted meanwhile
				}
				if c.rnrRetry >= ib.InfiniteRNRRetry {
					c.block(blockRNR, 0, true)
					return
				}
				if c.block(blockRNR, time.Duration(c.rnrRetry)*c.node.f.opts.RNRTimer, false) {
					return
				}
				c.fail(ib.StatusRNRRetryExceeded)
				return
			}
			st = c.execSend(s, peer)
		case ib.OpRDMAWrite:
			st = c.execRDMA(s, peer, false)
		case ib.OpRDMARead:
			st = c.execRDMA(s, peer, true)
		}
		c.unblock()
		if st != ib.StatusSuccess {
			c.fail(st)
			return
		}
		if s.wr.Signaled {
			c.push(cqEntry{c: ib.Completion{ID: s.wr.ID, Status: ib.StatusSuccess, Opcode: s.wr.Op}, sq: true, idx: c.sq.exec})
		}
		c.sq.exec++
	}
	c.unblock()
}

// recvPosted reports whether a SEND to c finds a receive: in its receive queue or its SRQ.
func (c *Conn) recvPosted() bool {
	if c.srq != nil {
		return !c.srq.empty()
	}
	return c.rq.next != c.rq.tail
}

// takeRecv consumes the receive a SEND lands in (recvPosted said there is one).
func (c *Conn) takeRecv() (uint64, recvSlot) {
	if c.srq != nil {
		r, _ := c.srq.take(c.srqSGEs)
		c.srqSGEs = r.sges
		return 0, r
	}
	idx := c.rq.next
	c.rq.next++
	return idx, *c.rq.slot(idx)
}

// gather resolves the local SGEs of the head work request into c.src.
func (c *Conn) gather(s *sendSlot, write bool) bool {
	c.src = c.src[:0]
	if s.wr.Inline {
		c.src = append(c.src, s.inline[:s.inlineLen])
		return true
	}
	for _, g := range s.wr.SGL {
		b, ok := c.node.pd.local(g, write)
		if !ok {
			return false
		}
		c.src = append(c.src, b)
	}
	return true
}

func (c *Conn) execSend(s *sendSlot, peer *Conn) ib.Status {
	if !c.gather(s, false) {
		return ib.StatusLocalProtectionError
	}
	total := 0
	for _, b := range c.src {
		total += len(b)
	}
	ridx, r := peer.takeRecv()
	capacity := 0
	for _, g := range r.sges {
		capacity += int(g.Length)
	}
	if total > capacity {
		peer.push(cqEntry{c: ib.Completion{ID: r.id, Status: ib.StatusLocalLengthError}, idx: ridx, srq: peer.srq})
		peer.enterError()
		return ib.StatusRemoteInvalidRequest
	}
	// The HCA checks the receive SGEs it actually writes into.
	peer.dst = peer.dst[:0]
	for need, i := total, 0; need > 0; i++ {
		b, ok := peer.node.pd.local(r.sges[i], true)
		if !ok {
			peer.push(cqEntry{c: ib.Completion{ID: r.id, Status: ib.StatusLocalProtectionError}, idx: ridx, srq: peer.srq})
			peer.enterError()
			return ib.StatusRemoteOperationError
		}
		peer.dst = append(peer.dst, b)
		need -= min(need, len(b))
	}
	scatter(peer.dst, c.src)
	peer.push(cqEntry{c: ib.Completion{ID: r.id, Status: ib.StatusSuccess, Opcode: ib.OpRecv, ByteLen: uint32(total)}, idx: ridx, srq: peer.srq})
	if peer.estPending {
		peer.estPending = false
		peer.pushEvent(ib.EventEstablished)
	}
	return ib.StatusSuccess
}

// execRDMA moves the bytes of an RDMA WRITE (read false: the local SGEs into the peer's
// region) or an RDMA READ (read true: the peer's region into the local SGEs, which must be
// locally writable).
func (c *Conn) execRDMA(s *sendSlot, peer *Conn, read bool) ib.Status {
	if !c.gather(s, read) {
		return ib.StatusLocalProtectionError
	}
	if read && c.node.f.opts.IWARP {
		for _, g := range s.wr.SGL {
			// gather checked that every SGE names a valid region of this node.
			if g.MR.Access()&ib.AccessRemoteWrite == 0 {
				return ib.StatusLocalProtectionError
			}
		}
	}
	total := 0
	for _, b := range c.src {
		total += len(b)
	}
	if total == 0 {
		// A zero-length RDMA operation checks no rkey (IB spec); LIO uses a zero-length
		// WRITE as a drain marker.
		return ib.StatusSuccess
	}
	access := ib.AccessRemoteWrite
	if read {
		access = ib.AccessRemoteRead
	}
	remote, ok := peer.node.pd.remote(s.wr.RKey, s.wr.RemoteAddr, uint32(total), access)
	if !ok {
		peer.enterError()
		return ib.StatusRemoteAccessError
	}
	c.dst = append(c.dst[:0], remote)
	if read {
		scatter(c.src, c.dst) // c.src holds the local sinks here
	} else {
		scatter(c.dst, c.src)
	}
	return ib.StatusSuccess
}

// scatter copies the concatenation of src into the concatenation of dst, which is at least as
// long.
func scatter(dst, src [][]byte) {
	di, doff := 0, 0
	for _, b := range src {
		for len(b) > 0 {
			k := copy(dst[di][doff:], b)
			b = b[k:]
			doff += k
			if doff == len(dst[di]) {
				di++
				doff = 0
			}
		}
	}
}

// block records that the head work request waits, and whether it may go on waiting: an
// unbounded wait always may, a bounded one until its deadline (a zero duration fails at
// once). A timer re-runs progress at the deadline.
func (c *Conn) block(kind blockKind, d time.Duration, forever bool) bool {
	if c.blk != kind || c.blkIdx != c.sq.exec {
		c.unblock()
		c.blk, c.blkIdx, c.blkTimed = kind, c.sq.exec, !forever
		if forever {
			return true
		}
		if d <= 0 {
			return false
		}
		c.blkEnd = time.Now().Add(d)
		c.arm(d)
		return true
	}
	return !c.blkTimed || time.Now().Before(c.blkEnd)
}

func (c *Conn) unblock() {
	c.blk = blockNone
	c.disarm()
}

func (c *Conn) arm(d time.Duration) {
	c.timerGen++
	gen := c.timerGen
	c.timerArmed = true
	c.timerWG.Add(1)
	c.timer = time.AfterFunc(d, func() { c.onTimer(gen) })
}

func (c *Conn) disarm() {
	if c.timerArmed {
		c.timerArmed = false
		if c.timer.Stop() {
			c.timerWG.Done()
		}
	}
}

func (c *Conn) onTimer(gen uint64) {
	defer c.timerWG.Done()
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if gen == c.timerGen {
		c.timerArmed = false
	}
	c.dirty = true
	c.p.wake()
}
