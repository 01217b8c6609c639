//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

var _ ib.SharedQueues = pdHandle{}

// SharedLimits implements ib.SharedQueues.
func (p pdHandle) SharedLimits() ib.SharedLimits { return p.d.shared }

// NewCQ implements ib.SharedQueues with ibv_create_cq on the completion channel ch, on
// completion vector vector modulo the device's count.
func (p pdHandle) NewCQ(ch ib.CompChannel, depth, vector int) (ib.CQ, error) {
	d := p.d
	if depth < 1 || depth > d.shared.MaxCQE || vector < 0 {
		return nil, errorf("create CQ of %d entries on vector %d on %s (max %d): %w", depth, vector, d, d.shared.MaxCQE, ib.ErrInvalidArgument)
	}
	c, ok := ch.(*compChannel)
	if !ok || c.dev != d {
		return nil, errorf("create CQ on %s: completion channel %T not of this device: %w", d, ch, ib.ErrInvalidArgument)
	}
	if err := d.acquire(); err != nil {
		return nil, errorf("create CQ on %s: %w", d, err)
	}
	q := &sharedCQ{dev: d, ch: c, conns: map[uint32]*Conn{}}
	fail := func(err error) (ib.CQ, error) {
		q.destroy()
		d.release()
		return nil, errorf("create CQ on %s: %w", d, err)
	}
	cq, cerr := C.ibv_create_cq(d.ctx, C.int(depth), nil, c.ch, C.int(vector%max(d.shared.CompVectors, 1)))
	if cq == nil {
		return fail(fmt.Errorf("ibv_create_cq(%d): %w", depth, errnoOr(cerr, errnoENOMEM)))
	}
	q.cq.cq = cq
	wcs := C.calloc(C.size_t(wcBatch), C.size_t(unsafe.Sizeof(C.struct_ibv_wc{})))
	if wcs == nil {
		return fail(errnoENOMEM)
	}
	q.wcs = unsafe.Slice((*C.struct_ibv_wc)(wcs), wcBatch)
	if err := c.add(q); err != nil {
		return fail(err)
	}
	if err := d.join(q); err != nil {
		c.destroyCQ(q)
		d.release()
		return nil, errorf("create CQ on %s: %w", d, err)
	}
	return q, nil
}

// sharedCQ is an ib.CQ: a CQ on a completion channel (compChannel), which reads its events.
// conns are the QPs using it, by number: polling retires their slots (queues, as
// Conn.PollCompletions does).
type sharedCQ struct {
	dev *devCtx
	ch  *compChannel
	cq  cq
	// sendOut counts the send work requests posted to QPs whose send queue completes here
	// and not retired yet: with none, PollPair skips the CQ. stale: a QP was destroyed with
	// some outstanding, whose completions may still be here: the next PollPair polls.
	sendOut atomic.Int64
	stale   atomic.Bool

	mu      sync.Mutex // the CQ and conns; Conn.mu nests inside
	wcs     []C.struct_ibv_wc
	conns   map[uint32]*Conn
	srq     srqCache
	closed  bool
	removed bool // the device is gone: the resources go once no QP uses them
	freed   bool
}

// attach and detach keep the QPs using the CQ.
func (q *sharedCQ) attach(c *Conn) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return fmt.Errorf("CQ: %w", ib.ErrClosed)
	case q.removed:
		return fmt.Errorf("CQ: %w", ib.ErrDeviceRemoved)
	}
	q.conns[c.qpn] = c
	return nil
}

func (q *sharedCQ) detach(c *Conn) {
	q.mu.Lock()
	if q.conns[c.qpn] == c {
		delete(q.conns, c.qpn)
	}
	last := q.removed && len(q.conns) == 0
	q.mu.Unlock()
	if last {
		q.release()
	}
}

// Close implements ib.CQ.
func (q *sharedCQ) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	if len(q.conns) > 0 {
		n := len(q.conns)
		q.mu.Unlock()
		return errorf("close CQ: %d queue pairs use it: %w", n, ib.ErrInvalidArgument)
	}
	q.closed = true
	q.mu.Unlock()
	q.release()
	return nil
}

// deviceRemoved releases the CQ once no QP uses it (they are being torn down too).
func (q *sharedCQ) deviceRemoved() {
	q.mu.Lock()
	q.removed = true
	last := len(q.conns) == 0
	q.mu.Unlock()
	if last {
		q.release()
	}
}

// release destroys everything, once.
func (q *sharedCQ) release() {
	q.mu.Lock()
	if q.freed {
		q.mu.Unlock()
		return
	}
	q.freed = true
	q.mu.Unlock()
	q.dev.leave(q)
	q.ch.destroyCQ(q)
	q.dev.release()
}

// destroy frees the C resources made so far (under the channel's mu once it knows the CQ).
func (q *sharedCQ) destroy() {
	q.cq.destroy()
	q.cq.cq = nil
	if q.wcs != nil {
		C.free(unsafe.Pointer(&q.wcs[0]))
		q.wcs = nil
	}
}

// NewSRQ implements ib.SharedQueues with ibv_create_srq.
func (p pdHandle) NewSRQ(depth, maxSGE int) (ib.SRQ, error) {
	d := p.d
	lim := d.shared
	if lim.MaxSRQWR == 0 {
		return nil, errorf("create SRQ on %s: %w", d, ib.ErrNotSupported)
	}
	if depth < 1 || depth > lim.MaxSRQWR || maxSGE < 1 || maxSGE > lim.MaxSRQSGE {
		return nil, errorf("create SRQ of %d receives of %d SGEs on %s (max %d, %d): %w",
			depth, maxSGE, d, lim.MaxSRQWR, lim.MaxSRQSGE, ib.ErrInvalidArgument)
	}
	if err := d.acquire(); err != nil {
		return nil, errorf("create SRQ on %s: %w", d, err)
	}
	s := &sharedRQ{dev: d, maxSGE: maxSGE, ids: make([]uint64, depth), used: make([]bool, depth), users: map[*Conn]struct{}{}}
	for i := depth - 1; i >= 0; i-- {
		s.free = append(s.free, uint32(i))
	}
	var err error
	if s.bufs, err = newWRBufs(ib.QPCaps{RecvQueueDepth: depth, MaxRecvSGE: maxSGE}); err != nil {
		d.release()
		return nil, errorf("create SRQ on %s: %w", d, err)
	}
	srq, cerr := C.srpt_create_srq(d.pd, C.uint32_t(depth), C.uint32_t(maxSGE))
	if srq == nil {
		s.bufs.free()
		d.release()
		return nil, errorf("create SRQ on %s: ibv_create_srq(%d): %w", d, depth, errnoOr(cerr, errnoENOMEM))
	}
	s.srq = srq
	if err := d.join(s); err != nil {
		s.destroy()
		d.release()
		return nil, errorf("create SRQ on %s: %w", d, err)
	}
	s.id = registerSRQ(s)
	return s, nil
}

// sharedRQ is an ib.SRQ. Its receives are taken by the QPs in any order, so each has a slot
// of its own, free again once its completion is polled: the wr_id handed to verbs names the
// SRQ (srqs) and the slot, which keeps the ID the consumer gave.
type sharedRQ struct {
	dev    *devCtx
	id     uint64
	maxSGE int
	srq    *C.struct_ibv_srq

	mu      sync.Mutex
	bufs    *wrBufs
	ids     []uint64 // the consumer's ID per slot
	used    []bool
	free    []uint32 // a stack of free slots
	users   map[*Conn]struct{}
	closed  bool
	removed bool
	freed   bool
}

func (s *sharedRQ) attach(c *Conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("SRQ: %w", ib.ErrClosed)
	case s.removed:
		return fmt.Errorf("SRQ: %w", ib.ErrDeviceRemoved)
	}
	s.users[c] = struct{}{}
	return nil
}

func (s *sharedRQ) detach(c *Conn) {
	s.mu.Lock()
	delete(s.users, c)
	last := s.removed && len(s.users) == 0
	s.mu.Unlock()
	if last {
		s.release()
	}
}

// Close implements ib.SRQ.
func (s *sharedRQ) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if len(s.users) > 0 {
		n := len(s.users)
		s.mu.Unlock()
		return errorf("close SRQ: %d queue pairs use it: %w", n, ib.ErrInvalidArgument)
	}
	s.closed = true
	s.mu.Unlock()
	s.release()
	return nil
}

func (s *sharedRQ) deviceRemoved() {
	s.mu.Lock()
	s.removed = true
	last := len(s.users) == 0
	s.mu.Unlock()
	if last {
		s.release()
	}
}

func (s *sharedRQ) release() {
	s.mu.Lock()
	if s.freed {
		s.mu.Unlock()
		return
	}
	s.freed = true
	s.mu.Unlock()
	srqMu.Lock()
	delete(srqs, s.id)
	srqGen.Add(1)
	srqMu.Unlock()
	s.dev.leave(s)
	s.destroy()
	s.dev.release()
}

func (s *sharedRQ) destroy() {
	C.ibv_destroy_srq(s.srq)
	s.bufs.free()
}
