//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/srptarget/srptarget/ib"
)

// Waiting on a completion channel: arming its CQs, reading their events, and Serve, which
// parks the consumer's goroutine on the channel (or on the epoll set of several) and runs its
// step for the CQs that raised events. The accounting of armed CQs is what lets a read stop
// without a read() that finds the channel empty.

// arm arms q's CQ unless it is armed with its event unread; q.mu held.
func (c *compChannel) arm(q *sharedCQ) syscall.Errno {
	if q.cq.armed.Load() {
		return 0
	}
	c.armed.Add(1)
	if e := q.cq.arm(); e != 0 {
		c.armed.Add(-1)
		return e
	}
	return 0
}

// readEventsLocked reads the channel's events until it is empty or no CQ can have raised
// another, appending the CQs that raised them to c's fired list (also's to the serving
// channel's: into). c.mu held.
func (c *compChannel) readEventsLocked(into *compChannel) {
	for c.armed.Load() > 0 && !c.freed {
		p := C.srpt_next_cq_event(c.ch)
		if p == nil {
			return // empty, or an error: the step polls anyway
		}
		for _, q := range c.cqs {
			if q.cq.cq != p {
				continue
			}
			q.cq.event()
			if q.cq.armed.Load() {
				q.cq.armed.Store(false)
				c.armed.Add(-1)
			}
			into.fired = append(into.fired, q)
			break
		}
	}
}

// Serve implements ib.CompChannel, as Conn.Serve does for a connection's own CQs.
func (c *compChannel) Serve(also []ib.CompChannel, step func([]ib.CQ) bool) error {
	c.also = c.also[:0]
	for _, a := range also {
		o, ok := a.(*compChannel)
		if !ok || o == c {
			return errorf("serve completion channel: %T is not another verbs channel: %w", a, ib.ErrInvalidArgument)
		}
		c.also = append(c.also, o)
	}
	c.mu.Lock()
	switch {
	case c.closed || c.freed:
		c.mu.Unlock()
		return errorf("serve completion channel: %w", ib.ErrClosed)
	case c.serving:
		c.mu.Unlock()
		return errorf("serve completion channel: served already: %w", ib.ErrInvalidArgument)
	}
	c.serving = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.serving = false
		c.mu.Unlock()
		clear(c.also)
		c.also = c.also[:0]
		c.step = nil
	}()
	rc, f := c.rc, c.file
	if len(c.also) > 0 {
		want := append(make([]epollMember, 0, 1+len(c.also)), c.epollMember())
		for _, o := range c.also {
			want = append(want, o.epollMember())
		}
		if err := c.ep.hold(want); err != nil {
			return errorf("serve completion channel: %w", err)
		}
		rc, f = c.ep.rc, c.ep.file
	}
	c.step = step
	c.early = c.intr.Load()
	c.waitFile.Store(f)
	c.waitDirty = true // a deadline an Interrupt left: the first step covers it
	for {
		// The deadline is cleared before intr is taken, as in Conn.serveLoop.
		if c.waitDirty {
			c.waitDirty = false
			_ = f.SetReadDeadline(time.Time{})
		}
		c.intr.Swap(false)
		c.fresh, c.done = true, false
		err := rc.Read(c.readFn)
		switch {
		case c.done:
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.waitDirty = true
		case err != nil:
			return errorf("serve completion channel: %w", ib.ErrClosed)
		}
	}
}

// serveRead is Serve's read function: it reads the events there are and runs the step,
// unless that was a spurious edge; it ends the Read when the step is done and parks otherwise.
func (c *compChannel) serveRead(uintptr) bool {
	for {
		c.fired = c.fired[:0]
		c.mu.Lock()
		c.readEventsLocked(c)
		c.mu.Unlock()
		for _, o := range c.also {
			o.mu.Lock()
			o.readEventsLocked(c)
			o.mu.Unlock()
		}
		if len(c.also) > 0 {
			c.ep.drain()
		}
		if len(c.fired) == 0 && !c.fresh {
			return false
		}
		c.fresh = false
		done := c.step(c.fired)
		clear(c.fired)
		if done {
			c.done = true
			return true
		}
		if !c.early {
			return false
		}
		c.early, c.fresh = false, true
	}
}

// Interrupt implements ib.CompChannel.
func (c *compChannel) Interrupt() {
	if !c.intr.Swap(true) {
		f := c.waitFile.Load()
		if f == nil {
			f = c.file
		}
		// Any time in the past ends the park (Conn.Interrupt).
		_ = f.SetReadDeadline(pastDeadline)
	}
}

// epollMember is the channel's descriptor as an epollSet holds it.
func (c *compChannel) epollMember() epollMember { return epollMember{file: c.file, fd: int32(c.ch.fd)} }
