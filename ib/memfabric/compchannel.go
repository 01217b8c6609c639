package memfabric

import (
	"fmt"
	"sync"

	"github.com/srptarget/srptarget/ib"
)

// NewCompChannel implements ib.SharedQueues.
func (p *pd) NewCompChannel() (ib.CompChannel, error) {
	if err := p.node.usable(); err != nil {
		return nil, fmt.Errorf("memfabric: create completion channel: %w", err)
	}
	return &compChannel{node: p.node, sig: make(chan struct{}, 1)}, nil
}

// compChannel is an ib.CompChannel: the events its CQs raised and not yet taken, in order,
// as a verbs completion channel's file holds them. sig wakes whoever serves it: its own Serve,
// or the one whose also lists it (waiter). Lock order: a sharedCQ's mu, then a channel's.
type compChannel struct {
	node *Node
	sig  chan struct{} // buffer of one: an event or an Interrupt for the serving goroutine

	mu      sync.Mutex
	fired   []ib.CQ
	waiter  *compChannel // the channel whose Serve takes this one's events; nil: its own
	users   int          // CQs made on it and not closed
	closed  bool
	serving bool
	scratch []ib.CQ // what Serve hands to its step (the serving goroutine's)
}

// raise queues an event of q and wakes whoever serves the channel.
func (c *compChannel) raise(q *sharedCQ) {
	c.mu.Lock()
	c.fired = append(c.fired, q)
	w := c.waiter
	c.mu.Unlock()
	if w == nil {
		w = c
	}
	w.wake()
}

func (c *compChannel) wake() {
	select {
	case c.sig <- struct{}{}:
	default:
	}
}

// take moves the events not yet taken to dst.
func (c *compChannel) take(dst []ib.CQ) []ib.CQ {
	c.mu.Lock()
	dst = append(dst, c.fired...)
	clear(c.fired)
	c.fired = c.fired[:0]
	c.mu.Unlock()
	return dst
}

// serveFor makes w (nil: c itself) the channel whose Serve takes c's events; w is woken at
// once when some wait already.
func (c *compChannel) serveFor(w *compChannel) {
	c.mu.Lock()
	c.waiter = w
	pending := len(c.fired) > 0
	c.mu.Unlock()
	if pending && w != nil {
		w.wake()
	}
}

// use counts a CQ made on the channel (1) or closed (-1).
func (c *compChannel) use(delta int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if delta > 0 && c.closed {
		return fmt.Errorf("completion channel: %w", ib.ErrClosed)
	}
	c.users += delta
	return nil
}

// Serve implements ib.CompChannel.
func (c *compChannel) Serve(also []ib.CompChannel, step func(fired []ib.CQ) bool) error {
	others := make([]*compChannel, 0, len(also))
	for _, a := range also {
		o, ok := a.(*compChannel)
		if !ok || o.node.f != c.node.f || o == c {
			return fmt.Errorf("memfabric: serve completion channel: %T is not another channel of this fabric: %w", a, ib.ErrInvalidArgument)
		}
		others = append(others, o)
	}
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return fmt.Errorf("memfabric: serve completion channel: %w", ib.ErrClosed)
	case c.serving:
		c.mu.Unlock()
		return fmt.Errorf("memfabric: serve completion channel: served already: %w", ib.ErrInvalidArgument)
	}
	c.serving = true
	c.mu.Unlock()
	for _, o := range others {
		o.serveFor(c)
	}
	defer func() {
		for _, o := range others {
			o.serveFor(nil)
		}
		c.mu.Lock()
		c.serving = false
		c.mu.Unlock()
	}()
	buf := c.scratch[:0]
	defer func() { c.scratch = buf[:0] }()
	for {
		done := step(buf)
		clear(buf)
		buf = buf[:0]
		if done {
			return nil
		}
		<-c.sig
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return fmt.Errorf("memfabric: serve completion channel: %w", ib.ErrClosed)
		}
		buf = c.take(buf)
		for _, o := range others {
			buf = o.take(buf)
		}
	}
}

// Interrupt implements ib.CompChannel.
func (c *compChannel) Interrupt() { c.wake() }

// Close implements ib.CompChannel.
func (c *compChannel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users > 0 {
		return fmt.Errorf("memfabric: close completion channel: %d CQs use it: %w", c.users, ib.ErrInvalidArgument)
	}
	if !c.closed {
		c.closed = true
		c.wake()
	}
	return nil
}
