package srp

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
)

// Test hooks for the external test package.

// WaitPoolsIdle waits until every data buffer of every device pool is back.
func (t *Target) WaitPoolsIdle(ctx context.Context) error { return t.waitIdle(ctx) }

// PoolsIdle reports whether every data buffer is back in its pool.
func (t *Target) PoolsIdle() bool { return t.poolsIdle() }

// SessionCount is the number of I_T nexuses the target remembers, with or without channels.
func (t *Target) SessionCount() int {
	t.reg.mu.Lock()
	defer t.reg.mu.Unlock()
	return len(t.reg.sessions)
}

// ChannelMemoryBytes is the memory the live channels map outside the heap (their receive and
// send buffers, registered), in whole pages.
func (t *Target) ChannelMemoryBytes() int64 {
	page := os.Getpagesize()
	var n int64
	for _, ch := range t.reg.channelList() {
		n += int64(roundUp(len(ch.mem), page))
	}
	return n
}

// Scripted is a channel driven by a test instead of its goroutines (Target.ScriptChannels):
// every step the goroutines would take happens when the test says, on the test's goroutine,
// with a clock that moves only when the test says.
type Scripted struct {
	ch    *channel
	clock manualClock
	// The task management function the script runs (TMF), waiting for the commands it
	// claimed to be released by their channels.
	tmf     *cmdCtx
	claimed []claimedCmd
	code    iu.TskMgmtRspCode
	evented bool // Woken took a completion event: the next Step arms again
}

// ScriptChannels makes t hand every channel it accepts from now on to the returned channel,
// each in a poll group of its own that runs no goroutine: the test drives the group's loop
// (Step). Call it before the first login.
func (t *Target) ScriptChannels() <-chan *Scripted {
	out := make(chan *Scripted, 16)
	t.scriptGroups = true
	t.startHook = func(ch *channel) {
		s := &Scripted{ch: ch, clock: manualClock{now: time.Now()}}
		ch.fake = &s.clock
		ch.g.clock = &s.clock
		out <- s
	}
	return out
}

// Step runs the channel's group until it has nothing more to do without waiting: the group's
// loop, as its goroutine runs it, whose sleep ends the step, unless the task management
// function the script runs can end (its claimed commands are released). It reports whether
// the channel is drained and torn down.
func (s *Scripted) Step() (over bool) {
	g := s.ch.g
	drain(g.wake)
	if s.evented || takeEvents(g) {
		s.evented = false
		g.wait.armed = false // its event is taken: the group arms again before it sleeps
	}
	g.loop(func() bool {
		if s.ch.resetting.Load() || s.ch.phase != phaseClosed && s.ch.closed() && s.ch.drained() {
			// The nexus reset of its close runs on a goroutine of its own, which clears
			// resetting and then signals the channel: a step waits for the signal, as the
			// channel's teardown does. A closing channel found drained here was not
			// serviced since, so that signal is still on its way. The loop sleeps only
			// with g.any clear, and the signal's notify sets it.
			deadline := time.Now().Add(10 * time.Second)
			for s.ch.resetting.Load() || !g.any.Load() {
				if time.Now().After(deadline) {
					panic("srp: the nexus reset of a closing channel never signalled it")
				}
				time.Sleep(time.Millisecond)
			}
			return false
		}
		if s.tmf != nil && s.claimedReleased() {
			s.tmf.tm.code = s.code
			c := s.tmf
			s.tmf, s.claimed = nil, nil
			g.handBack(c)
			return false
		}
		if takeEvents(g) {
			// Raised while the group was awake: its Serve would run it again at once.
			g.wait.armed = false
			return false
		}
		return true
	})
	return s.ch.phase == phaseClosed
}

func drain(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (s *Scripted) claimedReleased() bool {
	for i := range s.claimed {
		if !s.claimed[i].released() {
			return false
		}
	}
	return true
}

// Exec runs the oldest command handed to the workers, as a worker would (a claimed command
// or a closing channel's is not executed), and gives it back; it returns its tag, false if
// none was waiting.
func (s *Scripted) Exec() (tag uint64, ok bool) {
	g := s.ch.g
	if len(g.scriptWork) == 0 {
		return 0, false
	}
	c := g.scriptWork[0]
	g.scriptWork = g.scriptWork[1:]
	if c.state() == ctxCmd && !s.ch.closing.Load() {
		c.lunMap.Execute(&c.cmd)
	}
	tag = c.tag.Load()
	g.handBack(c)
	return tag, true
}

// TMF starts the oldest task management function handed to a task management goroutine: it
// claims the commands it covers and calls the logical units; Step ends it once they are
// released. It returns how many commands it claimed, false if none was waiting.
func (s *Scripted) TMF() (claimed int, ok bool) {
	if s.tmf != nil {
		panic("srp: scripted TMF: one task management function at a time")
	}
	g := s.ch.g
	if len(g.scriptTMF) == 0 {
		return 0, false
	}
	c := g.scriptTMF[0]
	g.scriptTMF = g.scriptTMF[1:]
	s.tmf = c
	s.claimed, s.code = s.ch.beginTMF(&c.tm)
	return len(s.claimed), true
}

// Advance moves the channel's clock by d and fires its timer if it is due.
func (s *Scripted) Advance(d time.Duration) {
	s.clock.now = s.clock.now.Add(d)
	ch := s.ch
	if ch.timer.armed && !ch.timer.at.After(s.clock.now) {
		ch.timer.armed = false
		ch.onTimer()
	}
}

// Stop asks the channel to close, as Target.Shutdown (graceful) or a reload (hard) does.
func (s *Scripted) Stop(graceful bool, why string) {
	mode := stopHard
	if graceful {
		mode = stopGraceful
	}
	s.ch.requestStop(mode, why, iu.TLogoutNoReason)
}

// Woken reports whether something would wake the channel's group from its sleep since its
// last step: a signal of one of its armed completion queues, or of its inbox.
func (s *Scripted) Woken() bool {
	g := s.ch.g
	if takeEvents(g) {
		s.evented = true // for the next Step
	}
	return s.evented || len(g.wake) > 0
}

// takeEvents takes the events raised on the group's completion channels without waiting (an
// Interrupt ends the park of the Serve that takes them) and reports whether there were any.
func takeEvents(g *pollGroup) bool {
	got := false
	for _, c := range g.chans {
		c.Interrupt()
		calls := 0
		_ = c.Serve(nil, func(fired []ib.CQ) bool {
			calls++
			got = got || len(fired) > 0
			return calls == 2
		})
	}
	return got
}

// State describes the channel: its phase, counters, queues, and every context in use.
func (s *Scripted) State() string {
	ch := s.ch
	var b strings.Builder
	fmt.Fprintf(&b, "phase %v, commands %d, contexts in use %d, handed off %d, task management %d\n",
		ch.phase, ch.commands, ch.ctxInUse(), ch.handedOff, ch.tmf.active)
	recvs := fmt.Sprintf("receives posted %d", ch.recvPosted)
	if ch.rq.shared() {
		recvs = fmt.Sprintf("shared receives held %d", ch.rqHeld)
	}
	fmt.Fprintf(&b, "credits granted %d, owed %d, %s, send batches %d, send-queue free %d/%d\n",
		ch.ledger.granted, ch.ledger.pending, recvs, ch.sendBatches, ch.sqFree, ch.sqDepth)
	for _, q := range []struct {
		name string
		q    *ctxQueue
	}{{"buffer", &ch.bufQ}, {"send-queue", &ch.sqQ}, {"task-management wait", &ch.tmfWaitQ}} {
		if q.q.empty() {
			continue
		}
		fmt.Fprintf(&b, "%s queue:", q.name)
		for c := q.q.front(); c != nil; c = c.next {
			fmt.Fprintf(&b, " %d", c.tag.Load())
		}
		b.WriteString("\n")
	}
	ch.ctxs.forMade(func(c *cmdCtx) {
		if c.state() != ctxFree {
			fmt.Fprintf(&b, "tag %d: %v, %s\n", c.tag.Load(), c.stage, ctxStateNames[c.state()])
		}
	})
	return b.String()
}

var ctxStateNames = [...]string{
	ctxFree: "free", ctxCmd: "command", ctxTMF: "task management", ctxAbortedTMF: "claimed by task management",
	ctxAbortedLocal: "aborted by the logical unit", ctxResponded: "responded",
}

// FinishScripted closes the channels (hard stop), runs what their workers still hold and
// steps them all until each is drained, then tears each down as its goroutine would. They
// are finished together: a task management function of one may wait for commands of another.
func FinishScripted(ss ...*Scripted) {
	for _, s := range ss {
		s.Stop(false, "script over")
	}
	left := slices.Clone(ss)
	for range 1000 {
		for i := 0; i < len(left); i++ {
			s := left[i]
			for {
				if _, ok := s.Exec(); !ok {
					break
				}
			}
			if s.tmf == nil {
				s.TMF()
			}
			if s.Step() {
				left = slices.Delete(left, i, i+1)
				i--
			}
		}
		if len(left) == 0 {
			return
		}
		for _, s := range left {
			s.Advance(s.ch.t.lim.DrainTimeout)
		}
	}
	var b strings.Builder
	for _, s := range left {
		b.WriteString(s.State())
	}
	panic("srp: scripted channels never drained:\n" + b.String())
}

// HoldBackstoreIO makes t's poll groups stop reaping their io_uring (hold) or reap again:
// commands with a request in flight stay pending in their logical units meanwhile, as on a
// slow disk.
func (t *Target) HoldBackstoreIO(hold bool) {
	for _, g := range t.groups {
		g.io.holdReap.Store(hold)
		if !hold {
			g.notify()
		}
	}
}

// BackstoreIOCounts returns the commands t's poll groups started on their io_uring, and
// those with a request in flight now.
func (t *Target) BackstoreIOCounts() (started uint64, inFlight int) {
	for _, g := range t.groups {
		started += g.io.started.Load()
		inFlight += int(g.io.inFlight.Load())
	}
	return started, inFlight
}

// SetGroupIODepth makes the poll groups' io_uring made from now on hold n requests and
// commands; the returned function restores the depth.
func SetGroupIODepth(n int) (restore func()) {
	old := groupIODepth
	groupIODepth = n
	return func() { groupIODepth = old }
}

// FailGroupIOQueue makes the poll groups' io_uring fail to be made with err from now on; the
// returned function undoes it.
func FailGroupIOQueue(err error) (restore func()) {
	old := newGroupQueue
	newGroupQueue = func(int, bool) (*backstore.Queue, error) { return nil, err }
	return func() { newGroupQueue = old }
}
