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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// NewCompChannel implements ib.SharedQueues with ibv_create_comp_channel, its file descriptor
// non-blocking and in the Go netpoller.
func (p pdHandle) NewCompChannel() (ib.CompChannel, error) {
	d := p.d
	if err := d.acquire(); err != nil {
		return nil, errorf("create completion channel on %s: %w", d, err)
	}
	ch, cerr := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		d.release()
		return nil, errorf("create completion channel on %s: ibv_create_comp_channel: %w", d, errnoOr(cerr, errnoENOMEM))
	}
	f, rc, err := pollable(int(ch.fd), "completion channel")
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		d.release()
		return nil, errorf("create completion channel on %s: %w", d, err)
	}
	c := &compChannel{dev: d, ch: ch, file: f, rc: rc, epfd: -1}
	c.readFn = c.serveRead
	if err := d.join(c); err != nil {
		f.Close()
		C.ibv_destroy_comp_channel(ch)
		d.release()
		return nil, errorf("create completion channel on %s: %w", d, err)
	}
	return c, nil
}

// compChannel is an ib.CompChannel. Its goroutine parks in the netpoller on the channel's
// file (on an epoll set of several channels' when Serve has also) inside one RawConn.Read
// from one Interrupt to the next, and reads the events itself: no goroutine per CQ, no
// channel operation per wake-up, and, as Conn.Serve, no read() that finds the channel empty
// (EAGAIN) when no event can be pending: each CQ raises one event per ibv_req_notify_cq, so
// once every CQ armed since has had its event read (armed counts the others), the read stops.
type compChannel struct {
	dev  *devCtx
	ch   *C.struct_ibv_comp_channel
	file *os.File
	rc   syscall.RawConn

	mu      sync.Mutex // cqs, reading events, and destroying a CQ; a sharedCQ's mu nests inside
	cqs     []*sharedCQ
	armed   atomic.Int32 // its CQs armed and whose event is not read yet
	closed  bool
	removed bool
	freed   bool
	serving bool

	// Serve's, on the serving goroutine.
	intr      atomic.Bool
	waitFile  atomic.Pointer[os.File] // the file Serve reads: file, or epFile
	waitDirty bool
	readFn    func(uintptr) bool
	step      func([]ib.CQ) bool
	also      []*compChannel
	fired     []ib.CQ
	fresh     bool
	done      bool
	early     bool // an Interrupt came before the Serve: its first step is followed by another
	// An epoll set of this channel's descriptor and also's, for a Serve of several devices.
	epfd    int
	epFile  *os.File
	epRC    syscall.RawConn
	members []*compChannel
}

// add records q, a CQ made on the channel.
func (c *compChannel) add(q *sharedCQ) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed || c.freed:
		return fmt.Errorf("completion channel: %w", ib.ErrClosed)
	case c.removed:
		return fmt.Errorf("completion channel: %w", ib.ErrDeviceRemoved)
	}
	c.cqs = append(c.cqs, q)
	return nil
}

// destroyCQ destroys q, made on the channel, under c.mu: no Serve reads its events meanwhile,
// and the kernel drops those not read yet with the CQ.
func (c *compChannel) destroyCQ(q *sharedCQ) {
	c.mu.Lock()
	for i, x := range c.cqs {
		if x == q {
			c.cqs = append(c.cqs[:i], c.cqs[i+1:]...)
			break
		}
	}
	if q.cq.armed.Load() {
		q.cq.armed.Store(false)
		c.armed.Add(-1)
	}
	q.destroy()
	c.mu.Unlock()
}

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
		if err := c.joinEpoll(); err != nil {
			return errorf("serve completion channel: %w", err)
		}
		rc, f = c.epRC, c.epFile
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
			c.drainEpoll()
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

// joinEpoll makes the epoll set hold this channel's descriptor and also's (several devices,
// one wait), made on first use. The set is level-triggered inside; the netpoller watches the
// set's own descriptor.
func (c *compChannel) joinEpoll() error {
	if c.epFile == nil {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return fmt.Errorf("epoll_create1: %w", err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return fmt.Errorf("epoll: set O_NONBLOCK: %w", err)
		}
		c.epfd = fd
		c.epFile = os.NewFile(uintptr(fd), "completion channels")
		rc, err := c.epFile.SyscallConn()
		if err != nil {
			c.epFile.Close()
			c.epFile, c.epfd = nil, -1
			return err
		}
		c.epRC = rc
		if err := c.epAdd(c); err != nil {
			return err
		}
	}
	want := append([]*compChannel{c}, c.also...)
	for _, m := range c.members {
		found := false
		for _, w := range want {
			found = found || w == m
		}
		if !found {
			_ = unix.EpollCtl(c.epfd, unix.EPOLL_CTL_DEL, int(m.ch.fd), nil)
		}
	}
	members := c.members[:0]
	for _, w := range want {
		found := false
		for _, m := range c.members {
			found = found || w == m
		}
		if !found {
			if err := c.epAdd(w); err != nil {
				return err
			}
		}
		members = append(members, w)
	}
	c.members = members
	_ = c.epFile.SetReadDeadline(time.Time{})
	return nil
}

func (c *compChannel) epAdd(m *compChannel) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(m.ch.fd)}
	if err := unix.EpollCtl(c.epfd, unix.EPOLL_CTL_ADD, int(m.ch.fd), &ev); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("epoll_ctl: %w", err)
	}
	return nil
}

// drainEpoll takes the set's ready list after the channels were read, so that its descriptor
// is readable again only for events that come after.
func (c *compChannel) drainEpoll() {
	var evs [4]unix.EpollEvent
	for {
		n, err := unix.EpollWait(c.epfd, evs[:], 0)
		if err != nil || n < len(evs) {
			return
		}
	}
}

// deviceRemoved makes no new CQ on the channel. The channel itself stays until Close, so that
// its consumer's Serve goes on parking on it (its events stop) until the consumer, told of
// the removal by its connections, closes it; the device's context closes after that.
func (c *compChannel) deviceRemoved() {
	c.mu.Lock()
	c.removed = true
	c.mu.Unlock()
}

// Close implements ib.CompChannel.
func (c *compChannel) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	if n := len(c.cqs); n > 0 {
		c.mu.Unlock()
		return errorf("close completion channel: %d CQs use it: %w", n, ib.ErrInvalidArgument)
	}
	if c.serving {
		c.mu.Unlock()
		return errorf("close completion channel: it is being served: %w", ib.ErrInvalidArgument)
	}
	c.closed = true
	c.mu.Unlock()
	c.release()
	return nil
}

// release destroys everything, once.
func (c *compChannel) release() {
	c.mu.Lock()
	if c.freed {
		c.mu.Unlock()
		return
	}
	c.freed = true
	c.mu.Unlock()
	c.dev.leave(c)
	if c.epFile != nil {
		c.epFile.Close()
	}
	c.file.Close()
	C.ibv_destroy_comp_channel(c.ch)
	c.dev.release()
}
