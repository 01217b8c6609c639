package srp

import (
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
)

// pollGroup runs the data path of the channels assigned to it on one goroutine, as SPDK's poll
// groups do (doc/nvmf_tgt_pg.md): it polls the completion queues it shares with them on each
// device (groupDev), hands each completion to its channel by QP number, runs the channels that
// have work, and posts once per channel per pass. A channel is assigned at login to the group
// with the fewest channels and stays there. The group polls while it finds work and, when it
// finds none, waits as Limits.Completion says: the whole group polls or sleeps, not each
// channel.
//
// Other goroutines reach a group only through its inbox (under mu): contexts that workers and
// task management give back (handBack), channels to look at (signal: a stop request, the
// timer, a connection event, buffers freed), QP numbers of channels being accepted and channels
// started. Each puts its item there, sets any and wakes the group if it sleeps (notify).
type pollGroup struct {
	t   *Target
	idx int
	log *zap.Logger
	// load counts the channels assigned (groupFor picks the least loaded).
	load atomic.Int32

	// The inbox and the devices, shared with other goroutines.
	mu          sync.Mutex
	devs        []*groupDev
	devsChanged bool
	inDone      []*cmdCtx
	inChans     []*channel
	inQPs       []qpReg
	inStart     []*channel
	stopping    bool
	running     bool
	any         atomic.Bool
	wake        chan struct{}
	exited      chan struct{}
	// sleeping: the group is parked, or about to, in its completion channels' Serve (waitOn
	// the one it serves) or on wake (waitOn nil); notify interrupts it then.
	sleeping atomic.Bool
	waitOn   atomic.Pointer[waitChan]

	// Owned by the group goroutine (or by a script's, which calls its steps).
	cqs   []*groupCQ // every CQ of every device, receive CQs first
	polls []cqPair   // the same CQs as each pass polls them: a device's receive and send CQ in one call
	ldevs []*groupDev
	chans []ib.CompChannel // the completion channel of each of ldevs; Serve waits on all
	// chansChanged: chans is not what the group serves (a device came or went); serving:
	// the pass runs inside Serve, where devices are not released (retireDevs after it).
	chansChanged bool
	serving      bool
	retired      []*groupDev // dropped in this pass, released at its end (retireDevs)
	sources      []pollSource
	active       []*channel // channels to run in this pass
	takeDone     []*cmdCtx
	takeCh       []*channel
	takeQPs      []qpReg
	takeNew      []*channel
	wcs          []ib.Completion
	pollNow      int64
	// Where the channels build one command's chain of work requests (channel.wrs, sges):
	// the group runs one channel at a time.
	wrs   []ib.SendWR
	sges  []ib.SGE
	wait  groupWait
	yield netYield // spin's park in the netpoller
	io    groupIO  // the io_uring of its file and block LUNs (group_io.go)
	// Workers: the goroutines that run commands of logical units that block (file, block,
	// rbd), started as needed, shared by the group's channels.
	work    *workSet
	workQ   []*cmdCtx    // what did not fit in work
	workers int          // in work
	queued  atomic.Int32 // commands handed to workers and not taken by one yet
	// script: driven by a test (Target.ScriptChannels): no goroutine, and what would go to a
	// worker or a task management goroutine waits in scriptWork and scriptTMF.
	script     bool
	scriptWork []*cmdCtx
	scriptTMF  []*cmdCtx
	clock      *manualClock
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

// pollSource is a source of completions other than the CQs, which a group serves on its
// goroutine: the io_uring of its backstores' requests (groupIO). reap, in every pass, takes
// what has completed without blocking, hands it to the channels (channel.onDone, or what the
// source's own requests need; group.touch for each channel it moved on) and reports whether
// it found anything; submit, at the end of every pass, hands the source's device what the
// pass started. Before the group sleeps arm makes the source's completions wake it (the
// function addSource returns wakes it, from any goroutine: one parked on the source's
// eventfd, say) and reports whether it had to, so that the group looks once more for what
// completed before; disarm undoes that once the group is awake.
type pollSource interface {
	reap() bool
	submit()
	arm() bool
	disarm()
}

// addSource makes the group serve s; call it on the group goroutine (or before the group
// runs). The returned function wakes the group.
func (g *pollGroup) addSource(s pollSource) (wake func()) {
	g.sources = append(g.sources, s)
	return g.notify
}

// qpReg records that QP qpn of dev is channel ch's (ib.AcceptParams.OnQP).
type qpReg struct {
	dev *groupDev
	qpn uint32
	ch  *channel
}

// workQueue is the capacity of a group's work channel; more waits in workQ.
const workQueue = 1024

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

// cqPair is what one poll of a pass takes: a receive CQ and a send CQ of one device (b nil:
// a CQ alone).
type cqPair struct{ a, b *groupCQ }

// waitChan is the completion channel a sleeping group is parked in (pollGroup.waitOn).
type waitChan struct{ ch ib.CompChannel }

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

// touch puts ch in the pass's list of channels to run.
func (g *pollGroup) touch(ch *channel) {
	if !ch.touched {
		ch.touched = true
		g.active = append(g.active, ch)
	}
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
	for _, ch := range q.dev.byQPN {
		if ch.started {
			ch.abandon("completion queue failed")
			g.touch(ch)
		}
	}
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

// nanos is the group's monotonic clock (a script's when scripted).
func (g *pollGroup) nanos() int64 {
	if g.clock != nil {
		return int64(g.clock.now.Sub(clockBase))
	}
	return nanotime()
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
