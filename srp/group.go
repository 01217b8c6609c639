package srp

import (
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
)

func newPollGroup(t *Target, idx int) *pollGroup {
	g := &pollGroup{
		t:      t,
		idx:    idx,
		log:    t.log.With(zap.Int("poll_group", idx)),
		wake:   make(chan struct{}, 1),
		exited: make(chan struct{}),
		wcs:    make([]ib.Completion, pollBatch),
		work:   newWorkSet(),
	}
	g.io.init(g)
	g.addSource(&g.io)
	return g
}

// groupFor returns the group a new channel joins: the one with the fewest channels.
func (t *Target) groupFor() *pollGroup {
	if t.scriptGroups {
		g := newPollGroup(t, 0)
		g.script = true
		return g
	}
	best := t.groups[0]
	for _, g := range t.groups[1:] {
		if g.load.Load() < best.load.Load() {
			best = g
		}
	}
	return best
}

// start hands an accepted channel to the group, starting its goroutine if needed; a channel
// whose connection is nil was not accepted after all and is forgotten.
func (g *pollGroup) start(ch *channel) {
	g.mu.Lock()
	g.inStart = append(g.inStart, ch)
	run := !g.running && !g.script
	g.running = g.running || run
	g.mu.Unlock()
	if run {
		go g.run()
	}
	g.notify()
}

// pass does everything the group can do without waiting: the inbox, every completion of its
// CQs, then each channel with work (stop requests, claims, buffer waiters, owed credits,
// closing, and its posts: one PostSend per channel), then the shared receives given back. It
// reports whether it found anything to do.
func (g *pollGroup) pass() (worked bool) {
	worked = g.takeInbox()
	g.wait.recvs = 0
	for _, p := range g.polls {
		if g.pollPair(p) {
			worked = true
		}
	}
	for _, s := range g.sources {
		if s.reap() {
			worked = true
		}
	}
	if !worked && len(g.active) == 0 {
		// Nothing came and no channel ran: nothing to post, give back or release.
		return false
	}
	for i := 0; i < len(g.active); i++ {
		ch := g.active[i]
		ch.touched = false
		if ch.started && ch.phase != phaseClosed && ch.service() {
			g.teardown(ch)
		}
	}
	clear(g.active)
	g.active = g.active[:0]
	for _, s := range g.sources {
		s.submit()
	}
	g.flushShared()
	g.flushCaches()
	if len(g.workQ) > 0 {
		g.feedWorkers()
	}
	if !g.serving {
		g.retireDevs()
	}
	return worked
}

// flushShared posts the shared receive buffers given back in this pass.
func (g *pollGroup) flushShared() {
	for _, d := range g.ldevs {
		if d.srq == nil || len(d.srq.q) == 0 {
			continue
		}
		if lost, err := d.srq.flush(nil); err != nil && !d.removed() {
			g.log.Error("posting shared receive buffers failed", zap.Int("lost", lost), zap.Error(err))
		}
	}
}

// flushCaches gives the cached data buffers back to their pools when a channel waits for
// buffers: one atomic load per device per pass otherwise.
func (g *pollGroup) flushCaches() {
	for _, d := range g.ldevs {
		if c := d.cache; c != nil && c.p.waiting.Load() > 0 && !c.empty() {
			c.flush()
		}
	}
}

// run is the group goroutine: passes of work and, between them, the wait: in the Serve of
// its devices' completion channels, or on its inbox alone while it has none.
func (g *pollGroup) run() {
	defer close(g.exited)
	for !g.serve() {
	}
	g.stopWorkers()
	g.io.close()
	g.yield.close()
	g.releaseDevs()
}

// loop runs passes until sleep says to stop: after each, what waits in the inbox is taken at
// once; otherwise idle decides whether the group polls on or sleeps (after arming its CQs, and
// one more pass). Production's sleep blocks until something arrives; a script's
// reports that the channels have settled.
// It returns true when the group is over, false when its completion channels changed (a
// production group then serves them instead).
func (g *pollGroup) loop(sleep func() (stop bool)) bool {
	for {
		if g.pass() {
			g.wait.noteWork()
		}
		if g.over() {
			return true
		}
		if g.chansChanged && !g.script {
			return false
		}
		if g.any.Load() || !g.idle() {
			continue
		}
		if sleep() {
			return true
		}
		g.woke()
	}
}

// over reports whether the group is stopping with no channel left.
func (g *pollGroup) over() bool {
	if g.script || g.load.Load() > 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopping && len(g.inStart) == 0
}

// stop makes the group goroutine end once its channels are gone, and waits for it.
func (g *pollGroup) stop() {
	g.mu.Lock()
	g.stopping = true
	running := g.running
	g.mu.Unlock()
	if !running {
		g.releaseDevs()
		return
	}
	g.notify()
	<-g.exited
}

// releaseDevs closes the group's queues on every device.
func (g *pollGroup) releaseDevs() {
	g.mu.Lock()
	devs := g.devs
	g.devs = nil
	g.mu.Unlock()
	for _, d := range devs {
		d.release(g.log)
	}
}

// serve runs the group's loop until it stops (true) or its devices changed (false): inside
// the Serve of its completion channels, which parks the goroutine in the netpoller until a CQ
// raises an event or notify interrupts it. A device dropped in a pass is released after the
// Serve (its channel may be the one served).
func (g *pollGroup) serve() (stop bool) {
	g.takeInbox() // the devices as they are now: one dropped may be released already
	g.chansChanged = false
	if len(g.chans) == 0 {
		g.waitOn.Store(nil)
		return g.loop(g.block)
	}
	g.waitOn.Store(&waitChan{g.chans[0]})
	g.serving = true
	first := true
	err := g.chans[0].Serve(g.chans[1:], func(fired []ib.CQ) bool {
		if !first {
			g.sleeping.Store(false)
			g.woke()
		}
		first = false
		if len(fired) > 0 {
			g.wait.armed = false // an event spent its CQ's arm
		}
		for {
			if g.pass() {
				g.wait.noteWork()
			}
			if g.over() {
				stop = true
				return true
			}
			if g.chansChanged || len(g.retired) > 0 {
				return true
			}
			if g.any.Load() || !g.idle() {
				continue
			}
			g.sleeping.Store(true)
			if !g.any.Load() {
				return false
			}
			g.sleeping.Store(false)
		}
	})
	g.serving = false
	g.sleeping.Store(false)
	g.retireDevs()
	if err != nil && !stop {
		// Not expected: the group closes its channels only here, after the Serve.
		g.log.Error("waiting for completion events failed", zap.Error(err))
		g.chansChanged = true
	}
	return stop
}
