package memfabric

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
)

// A connection's data path: work requests checked and queued on its send and receive queues,
// completions polled from its CQ; the pair's goroutine executes them (exec.go).

func (c *Conn) usable(what string) error {
	switch {
	case c.closed:
		return fmt.Errorf("memfabric: %s on %v: %w", what, c, ib.ErrClosed)
	case c.removed:
		return fmt.Errorf("memfabric: %s on %v: %w", what, c, ib.ErrDeviceRemoved)
	}
	return nil
}

// sendLimits are the connection's inputs to ib.CheckSendWR.
func (c *Conn) sendLimits() ib.SendLimits {
	return ib.SendLimits{
		MaxSGE:         c.caps.MaxSendSGE,
		MaxReadSGE:     c.node.f.opts.Limits.MaxReadSGE,
		MaxInline:      c.caps.MaxInlineData,
		InitiatorDepth: c.rdDepth,
	}
}

// PostSend implements ib.Conn.
func (c *Conn) PostSend(wrs []ib.SendWR) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if err := c.usable("post send"); err != nil {
		return 0, err
	}
	lim := c.sendLimits()
	if c.scq != nil {
		c.retired()
	}
	n := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if err = ib.CheckSendWR(wr, lim); err != nil {
			err = fmt.Errorf("memfabric: post send on %v: work request %d (id %#x): %w", c, i, wr.ID, err)
			break
		}
		if c.sq.full() {
			err = fmt.Errorf("memfabric: post send on %v: work request %d (id %#x): %d outstanding: %w",
				c, i, wr.ID, len(c.sq.slots), ib.ErrQueueFull)
			break
		}
		s := c.sq.slot(c.sq.tail)
		s.wr = *wr
		s.sges = append(s.sges[:0], wr.SGL...)
		s.wr.SGL = s.sges
		if wr.Inline {
			s.inlineLen = 0
			for _, g := range wr.SGL {
				if need := s.inlineLen + int(g.Length); need > len(s.inline) {
					s.inline = append(s.inline[:s.inlineLen], make([]byte, need-s.inlineLen)...)
				}
				s.inlineLen += copy(s.inline[s.inlineLen:], g.MR.Bytes()[g.Offset:g.Offset+uint64(g.Length)])
			}
		}
		c.sq.tail++
		n++
		if c.state == qpError {
			c.flushSend()
		}
	}
	if n > 0 && c.state == qpReady {
		c.dirty = true
		c.p.wake()
	}
	return n, err
}

// PostRecv implements ib.Conn.
func (c *Conn) PostRecv(wrs []ib.RecvWR) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if err := c.usable("post receive"); err != nil {
		return 0, err
	}
	if c.srq != nil {
		return 0, fmt.Errorf("memfabric: post receive on %v: its receive queue is an SRQ: %w", c, ib.ErrInvalidArgument)
	}
	if c.scq != nil {
		c.retired()
	}
	n := 0
	var err error
	for i := range wrs {
		if err = ib.CheckRecvWR(&wrs[i], c.caps.MaxRecvSGE); err != nil {
			err = fmt.Errorf("memfabric: post receive on %v: work request %d (id %#x): %w", c, i, wrs[i].ID, err)
			break
		}
		if c.rq.full() {
			err = fmt.Errorf("memfabric: post receive on %v: work request %d (id %#x): %d outstanding: %w",
				c, i, wrs[i].ID, len(c.rq.slots), ib.ErrQueueFull)
			break
		}
		c.postRecvLocked(&wrs[i])
		n++
	}
	if peer := c.peer(); n > 0 && peer != nil && peer.blk == blockRNR {
		peer.dirty = true
		c.p.wake()
	}
	return n, err
}

// postRecvLocked queues a checked receive; in the error state it is flushed at once.
func (c *Conn) postRecvLocked(wr *ib.RecvWR) {
	s := c.rq.slot(c.rq.tail)
	s.id = wr.ID
	s.sges = append(s.sges[:0], wr.SGL...)
	c.rq.tail++
	if c.state == qpError {
		c.flushRecv()
	}
}

// PollCompletions implements ib.Conn. Polling a completion frees its queue slot; for the send
// queue it also frees the slots of the unsignaled work requests before it.
func (c *Conn) PollCompletions(wcs []ib.Completion) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.closed {
		return 0, fmt.Errorf("memfabric: poll on %v: %w", c, ib.ErrClosed)
	}
	if c.scq != nil {
		return 0, fmt.Errorf("memfabric: poll on %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	}
	n := 0
	for n < len(wcs) && c.cq.head < c.cq.tail {
		e := &c.cq.ring[c.cq.head%uint64(len(c.cq.ring))]
		wcs[n] = e.c
		if e.srq != nil {
			e.srq.retire()
		} else if e.sq {
			c.sq.head = max(c.sq.head, e.idx+1)
		} else {
			c.rq.head = max(c.rq.head, e.idx+1)
		}
		c.cq.head++
		n++
	}
	return n, nil
}
