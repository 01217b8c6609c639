//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"syscall"

	"github.com/srptarget/srptarget/ib"
)

// Polling a shared CQ: completions handed to the consumer under their connection's IDs, and
// arming it on its completion channel.

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
