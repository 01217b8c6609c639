package srp

import (
	"runtime"

	"go.uber.org/zap"
)

// block sleeps until the inbox has something: the wait of a group with no device, hence no
// completion channel. It reports whether the group is to stop.
func (g *pollGroup) block() bool {
	g.sleeping.Store(true)
	if !g.any.Load() {
		<-g.wake
	}
	g.sleeping.Store(false)
	return false
}

// woke is what the group does when a sleep ends: its wait's, and its sources' disarm.
func (g *pollGroup) woke() {
	g.wait.woke()
	for _, s := range g.sources {
		s.disarm()
	}
}

// idle decides, when a pass found nothing to do, whether the group may sleep now: a polling
// group goes round again instead, and before sleeping the CQs are armed and polled once more,
// since a completion that arrived before the arm raises no event.
func (g *pollGroup) idle() bool {
	w := &g.wait
	mode := g.t.lim.Completion
	if g.script {
		mode = CompletionEvent // a script's clock moves only when it says
	}
	switch mode {
	case CompletionPoll:
		g.spin()
		return false
	case CompletionAdaptive:
		// Keep polling for PollWindow after the last work: a window longer than the
		// initiator's round trip catches its next command without a wake-up, and a group
		// with no I/O for that long sleeps and costs nothing.
		if g.pollWindowOpen() {
			g.spin()
			return false
		}
	case CompletionEvent:
		if w.recvs > 1 && w.busyPasses < busyPassesMax {
			// The pass took more than one request: an initiator is streaming. Another pass
			// before arming takes those that arrived meanwhile, without an arm, an event
			// and a wake-up.
			w.busyPasses++
			return false
		}
	}
	return !g.arm()
}

// spin yields while a group polls with nothing to do, so that the goroutines it readied on
// its P (workers, task management) run at once. runtime.Gosched alone does not let the
// network poller run: it puts the group on the global run queue, which a P looks at before the
// netpoller, so groups spinning on every P would keep RDMA/CM events and the control socket
// waiting for sysmon (10 ms). Target.New leaves a P without a group for that by default; when
// the groups take every P anyway (poll_groups, GOMAXPROCS), a group also parks in the
// netpoller every clockEvery idle passes (netYield).
func (g *pollGroup) spin() {
	g.wait.spins++
	if g.t.groupsFillPs && g.wait.spins%clockEvery == 0 {
		g.yield.yield()
		return
	}
	runtime.Gosched()
}

// arm arms the CQs before the group sleeps, unless they are armed already, and reports
// whether it did: the caller then polls once more. The send CQs are armed only when a channel
// waits for a send completion (sendsAwaited): otherwise the completions of responses only
// release their contexts, and are reaped at the next wake-up.
func (g *pollGroup) arm() bool {
	w := &g.wait
	sends := w.sendsWanted > 0
	sourcesArmed := false
	for _, s := range g.sources {
		if s.arm() {
			sourcesArmed = true
		}
	}
	if w.armed && (!sends || w.sendsArmed) {
		return sourcesArmed
	}
	for _, q := range g.cqs {
		if !q.recvs && !sends {
			continue
		}
		if err := q.cq.Arm(); err != nil {
			g.log.Debug("arming a completion queue failed", zap.Error(err))
		}
	}
	w.armed, w.sendsArmed = true, sends
	return true
}

// pollWindowOpen counts an idle pass of an adaptive group and reports whether its poll window
// is still open. The clock is read once per clockEvery passes, not on every one: in a VM whose
// clocksource is the HPET each read is a system call and a trapped device access.
func (g *pollGroup) pollWindowOpen() bool {
	w := &g.wait
	if w.lastWork < 0 {
		return false
	}
	w.idleSpins++
	if w.idleSpins%clockEvery != 0 {
		return true
	}
	now := g.nanos()
	if w.lastWork == 0 {
		w.lastWork = now
	}
	if now-w.lastWork < int64(g.t.lim.PollWindow) {
		return true
	}
	w.lastWork = -1
	return false
}
