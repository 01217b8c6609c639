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
	"syscall"
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

// Arm implements ib.CQ.
func (q *sharedCQ) Arm() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return errorf("arm CQ: %w", ib.ErrClosed)
	case q.removed:
		return errorf("arm CQ: %w", ib.ErrDeviceRemoved)
	}
	if e := q.ch.arm(q); e != 0 {
		return errorf("arm CQ: ibv_req_notify_cq: %w", e)
	}
	return nil
}

// Poll implements ib.CQ. A completion of a QP no longer attached (closed) is dropped, unless it
// is a receive of an SRQ, whose buffer the consumer gets back under the ID it posted.
func (q *sharedCQ) Poll(wcs []ib.Completion) (int, error) {
	return q.PollPair(q, wcs)
}

// PollPair implements ib.CQ: both CQs in one srpt_poll_cq_pair per wcBatch completions, the
// other only while a send work request of its QPs is outstanding (sendOut).
func (q *sharedCQ) PollPair(other ib.CQ, wcs []ib.Completion) (int, error) {
	o, ok := other.(*sharedCQ)
	if !ok || o.dev != q.dev {
		return 0, errorf("poll CQ pair: %T not of device %s: %w", other, q.dev, ib.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if o != q {
		o.mu.Lock()
		defer o.mu.Unlock()
	}
	switch {
	case q.closed || o.closed:
		return 0, errorf("poll CQ: %w", ib.ErrClosed)
	case q.removed:
		return 0, nil
	}
	pollOther := 0
	if o != q && !o.removed && (o.sendOut.Load() > 0 || o.stale.Swap(false)) {
		pollOther = 1
	}
	n := 0
	for n < len(wcs) {
		want := min(len(wcs)-n, len(q.wcs))
		got := int(C.srpt_poll_cq_pair(q.cq.cq, o.cq.cq, C.int(pollOther), C.int(want), &q.wcs[0]))
		var perr error
		if got < 0 {
			got, perr = -got-1, errorf("poll CQ: ibv_poll_cq: %w", syscall.EIO)
		}
		for j := 0; j < got; j++ {
			w := &q.wcs[j]
			comp, ok, err := q.complete(o, uint32(w.qp_num), uint64(w.wr_id), uint32(w.status), uint32(w.opcode), uint32(w.byte_len))
			if err != nil {
				return n, errorf("poll CQ: %w", err)
			}
			if ok {
				wcs[n] = comp
				n++
			}
		}
		if perr != nil {
			return n, perr
		}
		if got < want {
			return n, nil
		}
	}
	if pollOther == 1 {
		o.stale.Store(true) // full: there may be more of the other's
	}
	return n, nil
}

// complete turns one struct ibv_wc of QP qpn into a completion, under q.mu (and o's, the
// other CQ polled with it).
func (q *sharedCQ) complete(o *sharedCQ, qpn uint32, wrID uint64, status, opcode, byteLen uint32) (ib.Completion, bool, error) {
	var comp ib.Completion
	var err error
	if s := q.srqOf(wrID); s != nil {
		comp, err = s.complete(wrID, status, opcode, byteLen)
	} else if c := q.conns[qpn]; c != nil || o.conns[qpn] != nil {
		if c == nil {
			c = o.conns[qpn]
		}
		c.mu.Lock()
		head := c.q.sq.head
		comp, err = c.q.complete(wrID, status, opcode, byteLen)
		if done := c.q.sq.head - head; done > 0 {
			c.sendShared().sendOut.Add(-int64(done))
		}
		c.mu.Unlock()
	} else {
		return comp, false, nil
	}
	comp.QPNum = qpn
	return comp, err == nil, err
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

var (
	srqMu  sync.Mutex
	srqs   = map[uint64]*sharedRQ{}
	srqSeq atomic.Uint64
)

func registerSRQ(s *sharedRQ) uint64 {
	id := srqSeq.Add(1)
	srqMu.Lock()
	srqs[id] = s
	srqMu.Unlock()
	return id
}

// srqCache is the SRQ a CQ's last SRQ completion named, valid while srqGen is gen.
type srqCache struct {
	id, gen uint64
	s       *sharedRQ
}

// srqGen moves when an SRQ is released (under srqMu).
var srqGen atomic.Uint64

// srqOf is srqOf through q's cache (q.mu held): an atomic load per completion instead of a
// lock and a map lookup.
func (q *sharedCQ) srqOf(wrID uint64) *sharedRQ {
	if wrID&3 != srqTag {
		return nil
	}
	if c := &q.srq; c.s != nil && c.id == wrID>>srqShift && c.gen == srqGen.Load() {
		return c.s
	}
	srqMu.Lock()
	s, gen := srqs[wrID>>srqShift], srqGen.Load()
	srqMu.Unlock()
	if s != nil {
		q.srq = srqCache{id: wrID >> srqShift, gen: gen, s: s}
	}
	return s
}

// PostRecv implements ib.SRQ: the work requests are written into the SRQ's C array and posted
// as one chain with one ibv_post_srq_recv.
func (s *sharedRQ) PostRecv(wrs []ib.RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return 0, errorf("post receive on SRQ: %w", ib.ErrClosed)
	case s.removed:
		return 0, errorf("post receive on SRQ: %w", ib.ErrDeviceRemoved)
	}
	posted := 0
	for posted < len(wrs) {
		k := 0
		var verr error
		for posted+k < len(wrs) && k < len(s.bufs.rwr) {
			wr := &wrs[posted+k]
			if verr = ib.CheckRecvWR(wr, s.maxSGE); verr != nil {
				break
			}
			if len(s.free) == 0 {
				verr = fmt.Errorf("%d outstanding: %w", len(s.ids), ib.ErrQueueFull)
				break
			}
			slot := s.free[len(s.free)-1]
			if verr = s.bufs.fillRecv(k, wr, s.id<<srqShift|uint64(slot)<<2|srqTag, s.dev); verr != nil {
				break
			}
			s.free = s.free[:len(s.free)-1]
			s.ids[slot], s.used[slot] = wr.ID, true
			k++
		}
		if k > 0 {
			if e := C.srpt_post_srq_recv(s.srq, &s.bufs.rwr[0], C.int(k), s.bufs.bad); e != 0 {
				bad := int(*s.bufs.bad)
				for j := bad; j < k; j++ {
					slot := uint32(uint64(s.bufs.rwr[j].wr_id) >> 2 & (1<<(srqShift-2) - 1))
					s.used[slot] = false
					s.free = append(s.free, slot)
				}
				i := posted + bad
				return i, errorf("post receive on SRQ: work request %d (id %#x): ibv_post_srq_recv: %w",
					i, wrs[i].ID, postError(syscall.Errno(e)))
			}
			posted += k
		}
		if verr != nil {
			return posted, errorf("post receive on SRQ: work request %d (id %#x): %w", posted, wrs[posted].ID, verr)
		}
	}
	return posted, nil
}

// complete frees the slot of a receive whose completion was polled.
func (s *sharedRQ) complete(wrID uint64, status, opcode, byteLen uint32) (ib.Completion, error) {
	slot := wrID >> 2 & (1<<(srqShift-2) - 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if slot >= uint64(len(s.used)) || !s.used[slot] {
		return ib.Completion{}, fmt.Errorf("SRQ completion with wr_id %#x for a slot not posted: %w", wrID, ib.ErrInvalidArgument)
	}
	s.used[slot] = false
	s.free = append(s.free, uint32(slot))
	c := ib.Completion{ID: s.ids[slot], Status: ib.Status(status)}
	if c.Status == ib.StatusSuccess && opcode == wcRecv {
		c.Opcode, c.ByteLen = ib.OpRecv, byteLen
	}
	return c, nil
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
