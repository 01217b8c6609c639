//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/srptarget/srptarget/ib"
)

// A completion channel that many shared CQs use: its making, the CQs made on it, and its
// closing. Waiting on it (Serve) is in compchannel_serve_linux.go, the epoll set that one
// Serve of several devices' channels parks on in compchannel_epoll_linux.go.

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
	c := &compChannel{dev: d, ch: ch, file: f, rc: rc, ep: epollSet{fd: -1}}
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
	// ep holds this channel's descriptor and also's, for a Serve of several devices.
	ep epollSet
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
	c.ep.close()
	c.file.Close()
	C.ibv_destroy_comp_channel(c.ch)
	c.dev.release()
}
