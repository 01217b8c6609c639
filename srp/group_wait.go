package srp

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// execute hands c to a worker: a command of a logical unit that may block.
func (g *pollGroup) execute(c *cmdCtx) {
	if g.script {
		g.scriptWork = append(g.scriptWork, c)
		return
	}
	queued := g.queued.Add(1)
	if len(g.workQ) > 0 {
		g.workQ = append(g.workQ, c)
	} else {
		select {
		case g.work.ch <- c:
		default:
			g.workQ = append(g.workQ, c)
		}
	}
	// One more worker when the idle ones will not take all that waits: each may block in
	// its logical unit as long as it likes.
	if g.work.idle.Load() < queued && g.workers < g.t.lim.WorkersPerChannel*max(int(g.load.Load()), 1) {
		g.workers++
		go g.worker(g.work)
	}
}

// feedWorkers moves what waits in workQ to the work channel as room allows.
func (g *pollGroup) feedWorkers() {
	for len(g.workQ) > 0 {
		select {
		case g.work.ch <- g.workQ[0]:
			g.workQ[0] = nil
			g.workQ = g.workQ[1:]
		default:
			return
		}
	}
}

// workSet is the workers of a group between two retirements: where they take commands from,
// and how many wait there. A new set after a retirement, so that workers on their way out are
// not counted as idle ones of the next.
type workSet struct {
	ch   chan *cmdCtx
	idle atomic.Int32
}

func newWorkSet() *workSet { return &workSet{ch: make(chan *cmdCtx, workQueue)} }

// worker runs commands in their logical units, taken from ws until it is closed.
func (g *pollGroup) worker(ws *workSet) {
	for {
		ws.idle.Add(1)
		c, ok := <-ws.ch
		ws.idle.Add(-1)
		if !ok {
			return
		}
		g.queued.Add(-1)
		if c.state() == ctxCmd && !c.ch.closing.Load() {
			c.lunMap.Continue(&c.cmd) // Execute, or the rest of what groupIO started
		} else {
			c.lunMap.Abandon(&c.cmd)
		}
		g.handBack(c)
	}
}

// stopWorkers ends the workers (the group's channels are gone, so none holds a command).
func (g *pollGroup) stopWorkers() {
	close(g.work.ch)
}

// retireWorkers ends the workers once the group has no channel left, so that an idle daemon
// keeps none (the next command starts them again); group goroutine. No worker holds a command
// then: a closing channel waits for the contexts it handed off.
func (g *pollGroup) retireWorkers() {
	if g.workers == 0 || len(g.workQ) > 0 {
		return
	}
	close(g.work.ch)
	g.work = newWorkSet()
	g.workers = 0
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

// groupWait is how a group waits (Limits.Completion): its poll window, and whether its CQs are
// armed.
type groupWait struct {
	// Adaptive: the idle passes since the last work, and the clock when the first of them
	// read it (0: not read yet; -1: the window is over).
	idleSpins int
	lastWork  int64
	// busyPasses counts the passes since the group last slept that were followed by another
	// instead of the arm (event mode); recvs is the receive completions the last pass took.
	busyPasses int
	recvs      int
	// armed: the CQs are armed since the last sleep; sendsArmed: the send CQs too.
	armed      bool
	sendsArmed bool
	// sendsWanted counts the group's channels that must be woken by their send completions
	// (channel.sendsAwaited, kept by service).
	sendsWanted int
	spins       int // idle passes spinning (spin)
}

// noteWork opens a new poll window: the group found work.
func (w *groupWait) noteWork() { w.idleSpins, w.lastWork = 0, 0 }

// woke resets what a sleep ends: the budget of busy passes (the arms last until their CQ's
// event is taken: block, arm).
func (w *groupWait) woke() { w.busyPasses = 0 }

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

// busyPassesMax bounds the passes a group makes in a row before it arms and sleeps.
const busyPassesMax = 4

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

// netYield parks its goroutine in the netpoller on an eventfd of its own, made readable
// right after the park began: the P, finding nothing else to run, polls the network
// (findRunnable's non-blocking netpoll) and that same poll makes the goroutine runnable again.
// A timer would not do: the netpoller waits in whole milliseconds (epoll_pwait), so a
// microsecond's sleep on a P with nothing else to run lasts a millisecond.
type netYield struct {
	f      *os.File
	rc     syscall.RawConn
	fn     func(fd uintptr) bool // the RawConn.Read function, made once: no allocation per yield
	wrote  bool
	failed bool
	buf    [8]byte
}

// yield parks once, as above; runtime.Gosched when the eventfd could not be made.
func (y *netYield) yield() {
	if y.rc == nil && !y.open() {
		runtime.Gosched()
		return
	}
	y.wrote = false
	_ = y.rc.Read(y.fn)
}

// open makes the eventfd, once.
func (y *netYield) open() bool {
	if y.failed {
		return false
	}
	y.failed = true
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "poll group yield")
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // not in the netpoller
		f.Close()
		return false
	}
	// Read calls fn first and parks when it returns false: the write comes after Read began
	// to watch the descriptor, so the readiness it raises is not forgotten (an edge the
	// netpoller saw before a Read began would be).
	y.fn = func(fd uintptr) bool {
		if !y.wrote {
			y.wrote = true
			y.buf = [8]byte{1}
			_, _ = unix.Write(int(fd), y.buf[:])
			return false
		}
		_, err := unix.Read(int(fd), y.buf[:])
		return err != unix.EAGAIN
	}
	y.f, y.rc, y.failed = f, rc, false
	return true
}

// close releases the eventfd.
func (y *netYield) close() {
	if y.f != nil {
		y.f.Close()
		y.f, y.rc = nil, nil
	}
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
