//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
)

// A connection on shared queues: how Accept takes them, and how a torn-down connection leaves
// them.

// sharedQueues are the shared queues a connection was accepted with.
type sharedQueues struct {
	cq, sendCQ *sharedCQ // sendCQ nil: cq takes the sends too
	srq        *sharedRQ
}

// sharedOf returns the verbs CQs and SRQ of AcceptParams, which must be of dev.
func sharedOf(p *ib.AcceptParams, dev *devCtx) (sharedQueues, error) {
	var sh sharedQueues
	for _, x := range []struct {
		in  ib.CQ
		out **sharedCQ
	}{{p.CQ, &sh.cq}, {p.SendCQ, &sh.sendCQ}} {
		if x.in == nil {
			continue
		}
		q, ok := x.in.(*sharedCQ)
		if !ok || q.dev != dev {
			return sh, fmt.Errorf("CQ %T not of device %s: %w", x.in, dev, ib.ErrInvalidArgument)
		}
		*x.out = q
	}
	if p.SRQ != nil {
		var ok bool
		if sh.srq, ok = p.SRQ.(*sharedRQ); !ok || sh.srq.dev != dev {
			return sh, fmt.Errorf("SRQ %T not of device %s: %w", p.SRQ, dev, ib.ErrInvalidArgument)
		}
	}
	return sh, nil
}

// newSharedQP finishes newConn for a QP on a shared CQ (and maybe an SRQ): no completion
// channel or CQ of its own.
func (c *Conn) newSharedQP(id *C.struct_rdma_cm_id) (*Conn, error) {
	var srq *C.struct_ibv_srq
	if c.srq != nil {
		srq = c.srq.srq
	}
	send := c.shq
	if c.sendq != nil {
		send = c.sendq
	}
	if err := c.createQP(id, send.cq.cq, c.shq.cq.cq, srq); err != nil {
		return nil, err
	}
	if err := c.shq.attach(c); err != nil {
		c.shq, c.sendq = nil, nil // not attached: nothing to detach
		c.teardown(false)
		return nil, err
	}
	if c.sendq != nil {
		if err := c.sendq.attach(c); err != nil {
			c.sendq = nil
			c.teardown(false)
			return nil, err
		}
	}
	if c.srq != nil {
		if err := c.srq.attach(c); err != nil {
			c.srq = nil
			c.teardown(false)
			return nil, err
		}
	}
	return c, nil
}

// sendShared is the shared CQ of c's send queue, nil for a QP with CQs of its own.
func (c *Conn) sendShared() *sharedCQ {
	if c.sendq != nil {
		return c.sendq
	}
	return c.shq
}

// leaveShared detaches a torn-down connection (its QP destroyed) from its shared queues.
func (c *Conn) leaveShared() {
	if s := c.sendShared(); s != nil {
		c.mu.Lock()
		out := c.q.sq.tail - c.q.sq.head
		c.q.sq.head = c.q.sq.tail
		c.mu.Unlock()
		if out > 0 {
			s.sendOut.Add(-int64(out))
			s.stale.Store(true)
		}
	}
	if c.srq != nil {
		c.srq.detach(c)
	}
	if c.shq != nil {
		c.shq.detach(c)
	}
	if c.sendq != nil {
		c.sendq.detach(c)
	}
}
