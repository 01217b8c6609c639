package srp

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
)

// channelOf returns the channel of QP number qpn, or nil (group goroutine).
// The last channel found answers first: a group with one busy channel, or a burst of one
// channel's completions, skips the table.
func (d *groupDev) channelOf(qpn uint32) *channel {
	if d.lastQPN == qpn && d.last != nil {
		return d.last
	}
	return d.lookupQPN(qpn)
}

// lookupQPN is channelOf past the last channel found, apart so that channelOf is inlined.
func (d *groupDev) lookupQPN(qpn uint32) *channel {
	ch := d.byQPN.get(qpn)
	if ch != nil {
		d.last, d.lastQPN = ch, qpn
	}
	return ch
}

// setQPN makes ch the channel of QP number qpn (group goroutine).
func (d *groupDev) setQPN(qpn uint32, ch *channel) {
	d.byQPN.set(qpn, ch)
	d.last = nil
}

// dropQPN forgets the channel of QP number qpn (group goroutine).
func (d *groupDev) dropQPN(qpn uint32) {
	d.byQPN.remove(qpn)
	d.last = nil
}

// cqChunk is the size of the completion queues a group makes when none has room (the
// device's max_cqe permitting): many channels per CQ, so that a pass polls few.
const cqChunk = 1 << 16

// devLocked returns the group's queues on pd, making them; g.mu held.
func (g *pollGroup) devLocked(pd ib.ProtectionDomain) (*groupDev, error) {
	for _, d := range g.devs {
		if d.pd == pd {
			return d, nil
		}
	}
	sq, ok := pd.(ib.SharedQueues)
	if !ok {
		return nil, fmt.Errorf("srp: protection domain %T makes no shared queues", pd)
	}
	ch, err := sq.NewCompChannel()
	if err != nil {
		return nil, fmt.Errorf("srp: completion channel: %w", err)
	}
	d := &groupDev{g: g, pd: pd, sq: sq, ch: ch}
	lim := sq.SharedLimits()
	if depth := min(g.t.lim.SRQDepth, lim.MaxSRQWR); depth > 0 && lim.MaxSRQSGE >= 1 {
		srq, err := sq.NewSRQ(depth, 1)
		if err != nil && !errors.Is(err, ib.ErrNotSupported) {
			_ = ch.Close()
			return nil, fmt.Errorf("srp: shared receive queue of %d: %w", depth, err)
		}
		if err == nil {
			rq, err := newSharedRing(pd, srq, depth, g.t.lim.MaxITIULen)
			if err != nil {
				_ = srq.Close()
				_ = ch.Close()
				return nil, err
			}
			d.srq = rq
		}
	}
	g.devs = append(g.devs, d)
	g.devsChanged = true
	return d, nil
}

// reserveLocked finds room for n entries in a CQ of d (send or receive), making one if none
// has it; g.mu held.
func (d *groupDev) reserveLocked(n int, recvs bool) (*groupCQ, error) {
	cqs := &d.send
	if recvs {
		cqs = &d.recv
	}
	for _, q := range *cqs {
		if q.room >= n {
			q.room -= n
			return q, nil
		}
	}
	lim := d.sq.SharedLimits()
	need := n
	if recvs && d.srq != nil {
		need += d.srq.depth
	}
	size := min(max(cqChunk, need), lim.MaxCQE)
	if size < need {
		return nil, fmt.Errorf("srp: %d completion queue entries exceed the device's max_cqe %d", need, lim.MaxCQE)
	}
	cq, err := d.sq.NewCQ(d.ch, size, d.g.idx)
	if err != nil {
		return nil, fmt.Errorf("srp: completion queue of %d: %w", size, err)
	}
	// With an SRQ, its receives complete on the CQ of whichever QP takes them: any receive
	// CQ may get all of them.
	q := &groupCQ{dev: d, cq: cq, room: size - need, recvs: recvs}
	*cqs = append(*cqs, q)
	d.g.devsChanged = true
	return q, nil
}

// release closes what d holds, once no channel uses it (group goroutine, at the group's stop or
// when the device is gone). Receives still posted to the SRQ never complete.
func (d *groupDev) release(log *zap.Logger) {
	d.cache.flush()
	if d.srq != nil {
		if err := d.srq.srq.Close(); err != nil {
			log.Warn("closing a shared receive queue", zap.Error(err))
		}
		d.srq.release(log)
	}
	for _, q := range append(d.send, d.recv...) {
		if err := q.cq.Close(); err != nil {
			log.Warn("closing a completion queue", zap.Error(err))
		}
	}
	if d.ch != nil {
		if err := d.ch.Close(); err != nil {
			log.Warn("closing a completion channel", zap.Error(err))
		}
	}
}

// removed reports whether d's device is gone.
func (d *groupDev) removed() bool {
	rn, ok := d.pd.(ib.RemovalNotifier)
	if !ok {
		return false
	}
	select {
	case <-rn.Removed():
		return true
	default:
		return false
	}
}

// teardown ends a drained channel and forgets it.
func (g *pollGroup) teardown(ch *channel) {
	ch.teardown()
	g.forget(ch)
}

// forget drops ch from the group: its QP number, its reservations in the CQs, and the
// device's queues once no channel uses them (released at the end of the pass, retireDevs, as
// the pass may still look at them), so that an idle daemon holds no CQ or SRQ; the next
// login makes them again.
func (g *pollGroup) forget(ch *channel) {
	d := ch.dev
	if q := ch.queues; q != nil && q.qpn != 0 && d.byQPN.get(q.qpn) == ch {
		d.dropQPN(q.qpn)
	}
	for _, wc := range ch.early {
		if wc.ID&idKindMask == idRecv && wc.ID&idShared != 0 {
			d.srq.queue(int32(wc.ID & idIndexMask))
		}
	}
	ch.early = nil
	if ch.wantSends {
		ch.wantSends = false
		g.wait.sendsWanted--
	}
	g.mu.Lock()
	g.unreserveLocked(ch.queues)
	last := d.chans == 0
	if last {
		for i, x := range g.devs {
			if x == d {
				g.devs = append(g.devs[:i:i], g.devs[i+1:]...)
				break
			}
		}
		g.devsChanged = true
		g.any.Store(true)
	}
	g.mu.Unlock()
	if last {
		g.retired = append(g.retired, d)
	}
	if g.load.Add(-1) == 0 {
		g.retireWorkers()
	}
}

// retireDevs releases the queues of the devices forget dropped in this pass, at its end: the
// next pass's takeInbox no longer polls them (forget set devsChanged and the inbox's flag).
func (g *pollGroup) retireDevs() {
	for i, d := range g.retired {
		d.release(g.log)
		g.retired[i] = nil
	}
	g.retired = g.retired[:0]
}

// reserve assigns a new channel to the group on pd: its device's queues (made on first use),
// room in its CQs, and the shared receive queue when the channel can use it (immOff: the
// immediate data offset it was granted, which the shared buffers are padded for). Called on
// the login goroutine before the channel is made.
func (g *pollGroup) reserve(pd ib.ProtectionDomain, pool *bufPool, sqDepth, nrecv int, immOff uint16) (*channelQueues, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, err := g.devLocked(pd)
	if err != nil {
		return nil, err
	}
	if d.cache == nil || d.cache.p != pool {
		d.cache = newBufCache(pool)
	}
	cq := &channelQueues{dev: d}
	if d.srq != nil && (immOff == 0 || immPad(immOff) == d.srq.pad) {
		cq.srq = d.srq
		nrecv = 0
	}
	if cq.recv, err = d.reserveLocked(nrecv, true); err != nil {
		return nil, err
	}
	if cq.send, err = d.reserveLocked(sqDepth, false); err != nil {
		cq.recv.room += nrecv
		return nil, err
	}
	cq.sqDepth, cq.nrecv = sqDepth, nrecv
	d.chans++
	g.load.Add(1)
	return cq, nil
}

// unreserveLocked gives back what reserve took; g.mu held.
func (g *pollGroup) unreserveLocked(q *channelQueues) {
	q.send.room += q.sqDepth
	q.recv.room += q.nrecv
	q.dev.chans--
}

// registerQP records, from the login goroutine inside Accept (ib.AcceptParams.OnQP), that
// QP qpn is ch's: before the QP can receive, so before any completion names it.
func (g *pollGroup) registerQP(ch *channel, qpn uint32) {
	g.mu.Lock()
	g.inQPs = append(g.inQPs, qpReg{dev: ch.dev, qpn: qpn, ch: ch})
	g.mu.Unlock()
	g.any.Store(true)
}
