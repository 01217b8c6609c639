package memfabric

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
)

// How a connection's consumer learns of work: Ready's signal, Serve's loop on the caller's
// goroutine, Interrupt, the consumer's own arming (ib.NotifyArmer), and the event queue.

// Serve implements ib.Waiter: step runs on the caller's goroutine, which waits for Ready's
// signal or an Interrupt between steps. Unlike verbs, Ready stays usable beside it (tests
// look at it); the signals Serve takes are Ready's.
func (c *Conn) Serve(step func(ready bool) bool) error {
	// The first step looks at everything: a signal from before Serve is its.
	ready := false
	select {
	case <-c.ready:
		ready = true
	default:
	}
	for {
		c.p.mu.Lock()
		err := c.usable("serve")
		c.p.mu.Unlock()
		if err != nil {
			return err
		}
		if step(ready) {
			return nil
		}
		select {
		case <-c.ready:
			ready = true
		case <-c.intr:
			ready = false
		}
	}
}

// Interrupt implements ib.Waiter.
func (c *Conn) Interrupt() {
	select {
	case c.intr <- struct{}{}:
	default:
	}
}

func (c *Conn) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

func (c *Conn) push(e cqEntry) {
	if c.scq != nil {
		e.c.QPNum = c.qpn
		if e.sq && c.sendCQ != nil {
			c.sendCQ.add(c, e)
		} else {
			c.scq.add(c, e)
		}
		return
	}
	if c.cq.tail-c.cq.head == uint64(len(c.cq.ring)) {
		panic("memfabric: completion queue overrun (broken slot accounting)")
	}
	c.cq.ring[c.cq.tail%uint64(len(c.cq.ring))] = e
	c.cq.tail++
	switch {
	case !c.consumerArms:
		c.signal()
	case e.sq && c.armedSend:
		c.armedSend = false
		c.signal()
	case !e.sq && c.armedRecv:
		c.armedRecv = false
		c.signal()
	}
}

// ArmNotify implements ib.NotifyArmer: the next receive completion signals Ready, and the
// next send-queue completion too when sends is set; completions already queued do not.
func (c *Conn) ArmNotify(sends bool) error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.scq != nil {
		return fmt.Errorf("memfabric: arm %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	}
	c.consumerArms = true
	c.armedRecv = true
	c.armedSend = sends
	return nil
}

func (c *Conn) pushEvent(e ib.Event) {
	c.events = append(c.events, e)
	c.signal()
	if c.onEvent != nil {
		c.onEvent()
	}
}

// PollEvent implements ib.Conn.
func (c *Conn) PollEvent() (ib.Event, bool) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if len(c.events) == 0 {
		return 0, false
	}
	e := c.events[0]
	c.events = append(c.events[:0], c.events[1:]...)
	return e, true
}
