package srp

import (
	"github.com/srptarget/srptarget/ib"
	"go.uber.org/zap"
)

// pollPair takes the completions of p's CQs to their channels, both CQs in one call; it
// reports whether there were any.
func (g *pollGroup) pollPair(p cqPair) bool {
	if p.b == nil {
		return g.pollCQ(p.a)
	}
	found := false
	for {
		n, err := p.a.cq.PollPair(p.b.cq, g.wcs)
		if n > 0 && g.t.cfg.MeasureLatency {
			g.pollNow = g.nanos()
		}
		for i := 0; i < n; i++ {
			g.dispatch(p.a, &g.wcs[i])
		}
		if err != nil {
			g.cqFailed(p.a, err)
			return true
		}
		found = found || n > 0
		if n < len(g.wcs) {
			return found
		}
	}
}

// pollCQ takes q's completions to their channels; it reports whether there were any.
func (g *pollGroup) pollCQ(q *groupCQ) bool {
	found := false
	for {
		n, err := q.cq.Poll(g.wcs)
		if err != nil {
			g.cqFailed(q, err)
			return true
		}
		if n > 0 && g.t.cfg.MeasureLatency {
			g.pollNow = g.nanos()
		}
		for i := 0; i < n; i++ {
			g.dispatch(q, &g.wcs[i])
		}
		found = found || n > 0
		if n < len(g.wcs) {
			return found
		}
	}
}

// dispatch hands one completion of q to its channel. One whose QP is not (or no longer) known
// gives back the shared receive buffer it carries, if it does.
func (g *pollGroup) dispatch(q *groupCQ, wc *ib.Completion) {
	d := q.dev
	ch := d.channelOf(wc.QPNum)
	if ch == nil && g.takeInbox() {
		ch = d.channelOf(wc.QPNum) // registered (OnQP) after the last look
	}
	shared := wc.ID&idKindMask == idRecv && wc.ID&idShared != 0
	if shared {
		d.srq.posted--
	}
	if ch == nil {
		if shared {
			d.srq.queue(int32(wc.ID & idIndexMask))
		}
		return
	}
	if shared {
		ch.rqHeld++
		g.wait.recvs++
	} else if wc.ID&idKindMask == idRecv {
		g.wait.recvs++
	}
	if !ch.started {
		ch.early = append(ch.early, *wc)
		return
	}
	ch.pollNow = g.pollNow
	ch.onCompletion(wc)
	g.touch(ch)
}

// cqFailed abandons every channel of a CQ that failed (overrun, device error): nothing it
// would have delivered can be trusted.
func (g *pollGroup) cqFailed(q *groupCQ, err error) {
	g.log.Error("polling a completion queue failed: closing its channels", zap.Error(err))
	q.dev.byQPN.each(func(ch *channel) {
		if ch.started {
			ch.abandon("completion queue failed")
			g.touch(ch)
		}
	})
}

// takeInbox moves what other goroutines left into the group's hands. It reports whether
// there was anything.
func (g *pollGroup) takeInbox() bool {
	if !g.any.Load() {
		return false
	}
	g.mu.Lock()
	g.any.Store(false)
	g.takeDone, g.inDone = g.inDone, g.takeDone[:0]
	g.takeCh, g.inChans = g.inChans, g.takeCh[:0]
	g.takeQPs, g.inQPs = g.inQPs, g.takeQPs[:0]
	g.takeNew, g.inStart = g.inStart, g.takeNew[:0]
	if g.devsChanged {
		// A new CQ was never armed: arm them all again before the next sleep.
		g.devsChanged = false
		g.wait.armed, g.wait.sendsArmed = false, false
		clear(g.cqs)
		g.cqs = g.cqs[:0]
		clear(g.ldevs) // a device dropped must not stay reachable past the slice's end
		g.ldevs = append(g.ldevs[:0], g.devs...)
		for _, d := range g.devs {
			g.cqs = append(g.cqs, d.recv...)
		}
		for _, d := range g.devs {
			g.cqs = append(g.cqs, d.send...)
		}
		g.pairCQs()
	}
	g.mu.Unlock()
	for _, r := range g.takeQPs {
		r.dev.setQPN(r.qpn, r.ch)
		r.ch.queues.qpn = r.qpn
	}
	for _, ch := range g.takeNew {
		g.adopt(ch)
	}
	for _, c := range g.takeDone {
		c.ch.onDone(c)
		g.touch(c.ch)
	}
	for _, ch := range g.takeCh {
		ch.queued.Store(false)
		g.touch(ch)
	}
	for _, s := range [][]*channel{g.takeCh, g.takeNew} {
		if len(s) > 0 {
			clear(s)
		}
	}
	if len(g.takeDone) > 0 {
		clear(g.takeDone)
	}
	if len(g.takeQPs) > 0 {
		clear(g.takeQPs)
	}
	return true
}

// adopt starts running an accepted channel: the completions that came before are handled
// now. A channel that was not accepted after all is forgotten.
func (g *pollGroup) adopt(ch *channel) {
	if ch.conn == nil {
		g.forget(ch)
		return
	}
	ch.started = true
	for i := range ch.early {
		ch.onCompletion(&ch.early[i])
	}
	ch.early = nil
	g.touch(ch)
}

// pairCQs makes the pass's polls and the channels to serve from the devices' CQs (group
// goroutine, after the devices changed).
func (g *pollGroup) pairCQs() {
	clear(g.polls) // nor its CQs
	g.polls = g.polls[:0]
	chans := g.chans[:0]
	for _, d := range g.ldevs {
		for i := range max(len(d.recv), len(d.send)) {
			p := cqPair{}
			if i < len(d.recv) {
				p.a = d.recv[i]
			}
			if i < len(d.send) {
				if p.a == nil {
					p.a = d.send[i]
				} else {
					p.b = d.send[i]
				}
			}
			g.polls = append(g.polls, p)
		}
		if d.ch != nil {
			chans = append(chans, d.ch)
		}
	}
	clear(chans[len(chans):cap(chans)])
	g.chans = chans
	g.chansChanged = true
}
