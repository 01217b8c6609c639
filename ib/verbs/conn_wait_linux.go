//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/srptarget/srptarget/ib"
)

// A connection's own completion queues and how its consumer waits for them: Ready (a goroutine
// parked on the completion channel) or Serve (the consumer's own goroutine parked there),
// with the consumer arming them (ib.NotifyArmer) or not.

// cq is one of a connection's completion queues.
type cq struct {
	cq *C.struct_ibv_cq
	// armed: armed and its event not yet read. Stored before ibv_req_notify_cq (the event
	// may be read before the call returns) and cleared by waitCQ before it signals.
	armed   atomic.Bool
	unacked int // events read and not yet acknowledged; waitCQ's until waitDone
}

// create makes the CQ of n entries on the completion channel and arms it.
func (q *cq) create(ctx *C.struct_ibv_context, n int, ch *C.struct_ibv_comp_channel, what string) error {
	p, cerr := C.ibv_create_cq(ctx, C.int(n), nil, ch, 0)
	if p == nil {
		return fmt.Errorf("ibv_create_cq(%d) for the %s queue: %w", n, what, errnoOr(cerr, errnoENOMEM))
	}
	q.cq = p
	if e := q.arm(); e != 0 {
		return fmt.Errorf("ibv_req_notify_cq on the %s queue: %w", what, e)
	}
	return nil
}

// event counts an event read from the completion channel, acknowledging them in batches.
func (q *cq) event() {
	q.unacked++
	if q.unacked == cqAckBatch {
		C.ibv_ack_cq_events(q.cq, C.uint(q.unacked))
		q.unacked = 0
	}
}

// arm arms the CQ unless it is armed with its event unread.
func (q *cq) arm() syscall.Errno {
	if q.armed.Load() {
		return 0
	}
	q.armed.Store(true)
	if e := C.srpt_req_notify_cq(q.cq); e != 0 {
		q.armed.Store(false)
		return syscall.Errno(e)
	}
	return 0
}

// destroy acknowledges what is left and destroys the CQ (after waitCQ ended).
func (q *cq) destroy() {
	if q.cq == nil {
		return
	}
	if q.unacked > 0 {
		C.ibv_ack_cq_events(q.cq, C.uint(q.unacked))
	}
	C.ibv_destroy_cq(q.cq)
}

// Ready implements ib.Conn. The first call starts the goroutine that reads the completion
// channel for it (waitCQ), unless Serve runs.
func (c *Conn) Ready() <-chan struct{} {
	if !c.readyMode.Load() {
		c.startWaitCQ()
	}
	return c.ready
}

// startWaitCQ starts waitCQ, once, unless the connection is released or Serve runs.
func (c *Conn) startWaitCQ() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readyMode.Load() || c.serving || c.phase.released() {
		return
	}
	c.readyMode.Store(true)
	if c.shq != nil {
		return // the CQ is the consumer's to wait for; connection events signal Ready
	}
	go c.waitCQ(c.cqRC)
}

// signal signals Ready, and interrupts Serve.
func (c *Conn) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
	if c.waitMode.Load() {
		c.Interrupt()
	}
}

// waitCQ waits, parked in the netpoller, for completion events. Per event it re-arms the CQ
// that raised it (unless the consumer arms, ArmNotify) and then signals Ready: a completion
// that arrives after the re-arm raises a new event, and one that arrived before it is seen by
// the consumer's drain, which starts after the signal. So no wake-up is lost without polling
// the CQ here. When the consumer arms, the CQ's armed is cleared before the signal, so that an
// ArmNotify that still saw it set is followed by a wake-up, after which the consumer arms for
// real; an event of the send CQ the consumer did not ask for (ArmNotify(false)) signals
// nothing.
//
// It makes one RawConn.Read for its whole life: the function reads events (readEventsLocked,
// as Serve does) and returns false to park. Read forgets the descriptor's readiness only when it is called, so an event that
// arrives while the function runs wakes the next park, and the function may park without the
// read() that finds the channel empty (EAGAIN) when no event can be pending: a CQ raises one
// event per ibv_req_notify_cq, and each CQ's has been read since it was last armed. That is
// one system call less per event when the consumer arms.
func (c *Conn) waitCQ(rc syscall.RawConn) {
	defer close(c.waitDone)
	read := func(uintptr) bool {
		c.mu.Lock()
		got := c.readEventsLocked()
		c.mu.Unlock()
		if got {
			c.signal()
		}
		return false
	}
	// Returns when teardown closes the File.
	_ = rc.Read(read)
}

// cqEvent handles an event of the send queue's CQ (sends) or the receive queue's, read by
// waitCQ or Serve, and reports whether it wakes the consumer.
func (c *Conn) cqEvent(sends bool) bool {
	q := &c.rcq
	if sends {
		q = &c.scq
	}
	q.event()
	if !c.consumerArms.Load() {
		C.srpt_req_notify_cq(q.cq)
		return true
	}
	// Cleared before wantSends is read; ArmNotify stores wantSends before it reads armed.
	q.armed.Store(false)
	return !sends || c.wantSends.Load()
}

// Serve implements ib.Waiter: the calling goroutine parks in the netpoller on the completion
// channel, as waitCQ does, and reads the events itself, which saves a goroutine switch and a
// channel operation per wake-up. The consumer's step runs inside RawConn.Read's read
// function, so that one Read lasts from one Interrupt to the next: Read forgets the
// descriptor's readiness when it starts (internal/poll's prepareRead), and only a Read that
// stays open can park without first trying a read() that finds the channel empty. Interrupt
// moves the file's read deadline into the past, which ends the Read (internal/poll's
// pollDesc); the next round clears it.
//
// A step may close the connection: teardown then leaves the completion channel's file to
// Serve, which closes it after the Read (closing it inside would wait for the Read to end).
func (c *Conn) Serve(step func(ready bool) bool) error {
	c.mu.Lock()
	switch {
	case c.readyMode.Load():
		c.mu.Unlock()
		return errorf("serve %v: Ready is in use: a consumer waits with one or the other", c)
	case c.shq != nil:
		c.mu.Unlock()
		return errorf("serve %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	case c.phase.released():
		c.mu.Unlock()
		return c.waitErr()
	}
	c.serving = true
	c.waitMode.Store(true)
	c.mu.Unlock()

	c.serveStep = step
	err := c.serveLoop()
	c.serveStep = nil

	c.mu.Lock()
	c.serving = false
	c.waitMode.Store(false)
	closeFile := c.fileToServe
	c.mu.Unlock()
	if closeFile {
		c.cqFile.Close()
	}
	return err
}

// serveLoop runs Reads until the step is done or the connection is released.
func (c *Conn) serveLoop() error {
	for {
		// The deadline is cleared before intr is taken: an Interrupt whose flag this round
		// takes may still move the deadline after the clear (one spurious round); one whose
		// flag it does not take moves it after the clear, and ends the Read.
		if c.waitDirty {
			c.waitDirty = false
			_ = c.cqFile.SetReadDeadline(time.Time{})
		}
		c.intr.Swap(false) // the step this round starts with looks at everything
		c.serveFresh, c.serveDone, c.serveOver = true, false, false
		err := c.cqRC.Read(c.serveFn)
		switch {
		case c.serveDone:
			return nil
		case c.serveOver:
			return c.waitErr()
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.waitDirty = true
		case err != nil:
			return c.waitErr()
		}
	}
}

// serveRead is Serve's read function (RawConn.Read). It reads the events that are there,
// then runs the step unless that was a spurious edge; it ends the Read when the step is
// done or the connection released, and parks otherwise.
func (c *Conn) serveRead(uintptr) bool {
	c.mu.Lock()
	if c.phase.released() {
		c.mu.Unlock()
		c.serveOver = true
		return true
	}
	got := c.readEventsLocked()
	c.mu.Unlock()
	if !got && !c.serveFresh {
		// The edge of an event read before, or an event of the send queue's CQ the
		// consumer did not ask for: park again.
		return false
	}
	c.serveFresh = false
	if c.serveStep(got) {
		c.serveDone = true
		return true
	}
	return false
}

// readEventsLocked reads completion events until the channel is empty or no CQ can have
// raised another (each raises one per arm), under c.mu (teardown destroys the channel), and
// reports whether one wakes the consumer.
func (c *Conn) readEventsLocked() (got bool) {
	for {
		e := C.srpt_cq_event(c.ch, c.scq.cq)
		if e <= 0 {
			// Empty. An error is not expected: the step polls anyway, and the next
			// event's edge comes back here.
			return got
		}
		if c.cqEvent(e == C.SRPT_CQ_EVENT_SEND) {
			got = true
		}
		if !c.rcq.armed.Load() && !c.scq.armed.Load() {
			return got
		}
	}
}

// waitErr is the error of Serve on a released connection.
func (c *Conn) waitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase.removed() {
		return errorf("serve %v: %w", c, ib.ErrDeviceRemoved)
	}
	return errorf("serve %v: %w", c, ib.ErrClosed)
}

// Interrupt implements ib.Waiter.
func (c *Conn) Interrupt() {
	if !c.intr.Swap(true) {
		// Any time in the past ends the park; an error means the file is closed, which
		// ends it too.
		_ = c.cqFile.SetReadDeadline(pastDeadline)
	}
}

// pastDeadline is a read deadline that has passed.
var pastDeadline = time.Unix(1, 0)

// ArmNotify implements ib.NotifyArmer: the next receive completion raises an event (and
// Ready), and so does the next send completion if sends. It costs an ibv_req_notify_cq per
// CQ whose last event has been read since it was armed.
func (c *Conn) ArmNotify(sends bool) error {
	if c.shq != nil {
		return errorf("arm completion notification on %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	}
	c.consumerArms.Store(true)
	c.wantSends.Store(sends)
	if c.rcq.armed.Load() && (!sends || c.scq.armed.Load()) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("arm completion notification"); err != nil {
		return err
	}
	if e := c.rcq.arm(); e != 0 {
		return errorf("arm completion notification on %v: receive queue: ibv_req_notify_cq: %w", c, e)
	}
	if !sends {
		return nil
	}
	if e := c.scq.arm(); e != 0 {
		return errorf("arm completion notification on %v: send queue: ibv_req_notify_cq: %w", c, e)
	}
	return nil
}
