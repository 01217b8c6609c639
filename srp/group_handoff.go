package srp

import "github.com/srptarget/srptarget/ib"

// signal asks the group to run the channel (from any goroutine).
func (ch *channel) signal() { ch.g.signal(ch) }

// sendsAwaited reports whether the channel must be woken by its next send-queue completion:
// when anything but responses on their way is outstanding (RDMA READs of data-out or of a
// descriptor table, a control IU), something waits for what a send completion gives back
// (send-queue slots, a context, data buffers, here or on another channel sharing the pool),
// credits are owed (an SRP_CRED_REQ waits for all contexts to be free), or the channel is not
// live. Otherwise the completions of its responses only release their contexts and buffers,
// and are reaped on the group's next wake-up, usually the next command's arrival: one wake-up
// per command instead of two.
func (ch *channel) sendsAwaited() bool {
	return ch.phase != phaseLive || ch.sendBatches > ch.sent ||
		!ch.bufQ.empty() || !ch.sqQ.empty() || len(ch.waitRecv) > 0 ||
		ch.ledger.pending > 0 || ch.pool.waiting.Load() > 0
}

// scratch returns the group's scratch for a chain of n work requests, made on first use; the
// login goroutine asks for it (under mu) before the channel runs.
func (g *pollGroup) scratch(n int) ([]ib.SendWR, []ib.SGE) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cap(g.wrs) < n {
		g.wrs, g.sges = make([]ib.SendWR, 0, n), make([]ib.SGE, 0, n)
	}
	return g.wrs, g.sges
}

// addSource makes the group serve s; call it on the group goroutine (or before the group
// runs). The returned function wakes the group.
func (g *pollGroup) addSource(s pollSource) (wake func()) {
	g.sources = append(g.sources, s)
	return g.notify
}

// notify wakes the group goroutine if it sleeps, after an item was put in the inbox. The
// group stores sleeping before its last look at any, and notify loads it after storing any:
// one of the two sees the other's.
func (g *pollGroup) notify() {
	g.any.Store(true)
	if !g.sleeping.Load() && !g.script {
		return
	}
	if w := g.waitOn.Load(); w != nil {
		w.ch.Interrupt()
		return
	}
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// handBack gives a context back from a worker or a task management goroutine.
func (g *pollGroup) handBack(c *cmdCtx) {
	g.mu.Lock()
	g.inDone = append(g.inDone, c)
	g.mu.Unlock()
	g.notify()
}

// signal asks the group to run ch in its next pass (from any goroutine).
func (g *pollGroup) signal(ch *channel) {
	if !ch.queued.Swap(true) {
		g.mu.Lock()
		g.inChans = append(g.inChans, ch)
		g.mu.Unlock()
	}
	g.notify()
}

// touch puts ch in the pass's list of channels to run.
func (g *pollGroup) touch(ch *channel) {
	if !ch.touched {
		ch.touched = true
		g.active = append(g.active, ch)
	}
}

// nanos is the group's monotonic clock (a script's when scripted).
func (g *pollGroup) nanos() int64 {
	if g.clock != nil {
		return int64(g.clock.now.Sub(clockBase))
	}
	return nanotime()
}

// busyPassesMax bounds the passes a group makes in a row before it arms and sleeps.
const busyPassesMax = 4

// noteSends keeps the count of channels whose send completions must wake the group, after a
// channel ran.
func (g *pollGroup) noteSends(ch *channel) {
	want := ch.sendBatches > 0 && ch.sendsAwaited()
	if want != ch.wantSends {
		ch.wantSends = want
		if want {
			g.wait.sendsWanted++
		} else {
			g.wait.sendsWanted--
		}
	}
}
