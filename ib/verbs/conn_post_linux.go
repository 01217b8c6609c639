//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"syscall"

	"github.com/srptarget/srptarget/ib"
)

// A connection's data path: work requests written into its C arrays and posted as chains,
// completions polled from its own completion queues.

// usableLocked reports why the data path cannot be used, under c.mu.
func (c *Conn) usableLocked(what string) error {
	switch {
	case c.phase.closed():
		return errorf("%s on %v: %w", what, c, ib.ErrClosed)
	case c.phase.released():
		return errorf("%s on %v: %w", what, c, ib.ErrDeviceRemoved)
	}
	return nil
}

// PostSend implements ib.Conn: the work requests are written into the connection's C work
// request array and posted as one linked chain with one ibv_post_send (more than the send
// queue depth only if the queue has room, in chunks of that depth).
func (c *Conn) PostSend(wrs []ib.SendWR) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("post send"); err != nil {
		return 0, err
	}
	lim := ib.SendLimits{
		MaxSGE:         c.caps.MaxSendSGE,
		MaxReadSGE:     c.dev.limits.MaxReadSGE,
		MaxInline:      c.caps.MaxInlineData,
		InitiatorDepth: c.rdDepth,
	}
	n, err := c.postChains(&sendChain, len(wrs),
		func(i int) uint64 { return wrs[i].ID },
		func(i int) error { return ib.CheckSendWR(&wrs[i], lim) },
		func(i, k int, wrid uint64) error { return c.bufs.fillSend(k, &wrs[i], wrid, c.dev) },
		func(k int) C.int { return C.srpt_post_send(c.qp, &c.bufs.swr[0], C.int(k), c.bufs.bad) })
	if s := c.sendShared(); s != nil && n > 0 {
		s.sendOut.Add(int64(n)) // before the unlock: its completions are retired under mu
	}
	return n, err
}

// PostRecv implements ib.Conn like PostSend, with one ibv_post_recv per chain.
func (c *Conn) PostRecv(wrs []ib.RecvWR) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("post receive"); err != nil {
		return 0, err
	}
	if c.srq != nil {
		return 0, errorf("post receive on %v: its receive queue is an SRQ: %w", c, ib.ErrInvalidArgument)
	}
	return c.postChains(&recvChain, len(wrs),
		func(i int) uint64 { return wrs[i].ID },
		func(i int) error { return ib.CheckRecvWR(&wrs[i], c.caps.MaxRecvSGE) },
		func(i, k int, wrid uint64) error { return c.bufs.fillRecv(k, &wrs[i], wrid, c.dev) },
		func(k int) C.int { return C.srpt_post_recv(c.qp, &c.bufs.rwr[0], C.int(k), c.bufs.bad) })
}

// chainQueue is the queue PostSend or PostRecv posts to, with the names its errors carry.
type chainQueue struct {
	what, call string // "post send", "ibv_post_send"
	queue      uint64 // queueSend or queueRecv, in the wr_id
}

var (
	sendChain = chainQueue{what: "post send", call: "ibv_post_send", queue: queueSend}
	recvChain = chainQueue{what: "post receive", call: "ibv_post_recv", queue: queueRecv}
)

// postChains is the loop PostSend and PostRecv share: n work requests, as many per verbs
// call as the queue's C work request array holds. The steps on request i of the caller's
// slice are theirs: id, check (against the device's and the QP's limits), fill (into slot k
// of the C array under wrid) and post (slots 0..k-1 as one chain; the errno, and the index
// of the refused request in *c.bufs.bad). The closures are only called, never kept, so
// they stay on the caller's stack: posting allocates nothing.
//
// A request that fails its check, finds the queue full or cannot be written ends the
// posting: those before it are posted and counted, and the error names it. When the
// provider refuses a chain, the requests from the refused one on are forgotten again and
// not counted.
func (c *Conn) postChains(cq *chainQueue, n int, id func(i int) uint64, check func(i int) error,
	fill func(i, k int, wrid uint64) error, post func(k int) C.int) (int, error) {
	q, slots := &c.q.sq, len(c.bufs.swr)
	if cq.queue == queueRecv {
		q, slots = &c.q.rq, len(c.bufs.rwr)
	}
	posted := 0
	for posted < n {
		k := 0
		var verr error
		for posted+k < n && k < slots {
			i := posted + k
			if verr = check(i); verr != nil {
				break
			}
			if q.free() == 0 {
				verr = fmt.Errorf("%d outstanding: %w", len(q.ids), ib.ErrQueueFull)
				break
			}
			if verr = fill(i, k, encodeWRID(cq.queue, q.tail)); verr != nil {
				break
			}
			q.push(id(i))
			k++
		}
		if k > 0 {
			if e := post(k); e != 0 {
				bad := int(*c.bufs.bad)
				q.unpush(k - bad)
				i := posted + bad
				return i, errorf("%s on %v: work request %d (id %#x): %s: %w",
					cq.what, c, i, id(i), cq.call, postError(syscall.Errno(e)))
			}
			posted += k
		}
		if verr != nil {
			return posted, errorf("%s on %v: work request %d (id %#x): %w", cq.what, c, posted, id(posted), verr)
		}
	}
	return posted, nil
}

// PollCompletions implements ib.Conn: up to wcBatch completions per call into C, each call
// taking the send CQ's first and then the receive CQ's. After the device's removal it returns
// nothing: the CQs are gone and the contract says not to wait for flushes.
func (c *Conn) PollCompletions(wcs []ib.Completion) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase.closed() {
		return 0, errorf("poll on %v: %w", c, ib.ErrClosed)
	}
	if c.shq != nil {
		return 0, errorf("poll on %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	}
	if c.phase.released() {
		return 0, nil
	}
	n := 0
	for n < len(wcs) {
		want := min(len(wcs)-n, len(c.bufs.wcs))
		got := int(C.srpt_poll_cqs(c.scq.cq, c.rcq.cq, C.int(want), &c.bufs.wcs[0]))
		failed := got < 0
		if failed {
			got = -got - 1
		}
		for j := 0; j < got; j++ {
			w := &c.bufs.wcs[j]
			comp, err := c.q.complete(uint64(w.wr_id), uint32(w.status), uint32(w.opcode), uint32(w.byte_len))
			if err != nil {
				return n, errorf("poll on %v: %w", c, err)
			}
			wcs[n] = comp
			n++
		}
		if failed {
			return n, errorf("poll on %v: ibv_poll_cq: %w", c, syscall.EIO)
		}
		if got < want {
			break
		}
	}
	return n, nil
}
