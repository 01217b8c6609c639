package srp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/srptarget/srptarget/srp/iu"
)

// Test hooks for the external test package.

// WaitPoolsIdle waits until every data buffer of every device pool is back.
func (t *Target) WaitPoolsIdle(ctx context.Context) error { return t.waitIdle(ctx) }

// PoolsIdle reports whether every data buffer is back in its pool.
func (t *Target) PoolsIdle() bool { return t.poolsIdle() }

// SessionCount is the number of I_T nexuses the target remembers, with or without channels.
func (t *Target) SessionCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
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
}

// WaitOnReady makes the channels t accepts from now on wait on their connection's Ready even
// when it offers ib.Waiter (Serve). Call it before the first login.
func (t *Target) WaitOnReady() { t.readyWait = true }

// ScriptChannels makes t hand every channel it accepts from now on to the returned channel
// instead of starting its goroutines. Call it before the first login.
func (t *Target) ScriptChannels() <-chan *Scripted {
	out := make(chan *Scripted, 16)
	t.startHook = func(ch *channel) {
		s := &Scripted{ch: ch, clock: manualClock{now: time.Now()}}
		ch.fake = &s.clock
		out <- s
	}
	return out
}

// Step runs the channel until it has nothing more to do without waiting: passes of its loop,
// the contexts the script's workers gave back, and the task management function's end once
// its claimed commands are released. It reports whether the channel is drained (torn down
// by Finish).
func (s *Scripted) Step() (over bool) {
	for range 1000 {
		if s.tmf != nil && s.claimedReleased() {
			s.tmf.tm.code = s.code
			c := s.tmf
			s.tmf, s.claimed = nil, nil
			s.ch.handBack(c)
		}
		_, over = s.ch.pass()
		if over {
			return true
		}
		if s.ch.takeReady() {
			continue
		}
		// As run (in event mode): arm before sleeping, and go round once more after arming.
		if s.ch.qpOpen() && s.ch.arm() {
			continue
		}
		if s.tmf == nil || !s.claimedReleased() {
			return false
		}
	}
	panic("srp: scripted channel never settled")
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
	select {
	case c := <-s.ch.work:
		if c.state() == ctxCmd && !s.ch.closing.Load() {
			c.lunMap.Execute(&c.cmd)
		}
		tag = c.tag.Load()
		s.ch.handBack(c)
		return tag, true
	default:
		return 0, false
	}
}

// TMF starts the oldest task management function handed to the task management goroutine:
// it claims the commands it covers and calls the logical units; Step ends it once they are
// released. It returns how many commands it claimed, false if none was waiting.
func (s *Scripted) TMF() (claimed int, ok bool) {
	if s.tmf != nil {
		panic("srp: scripted TMF: one task management function at a time")
	}
	select {
	case c := <-s.ch.tmfWork:
		s.tmf = c
		s.claimed, s.code = s.ch.beginTMF(&c.tm)
		return len(s.claimed), true
	default:
		return 0, false
	}
}

// Advance moves the channel's clock by d and fires its timer if it is due.
func (s *Scripted) Advance(d time.Duration) {
	s.clock.now = s.clock.now.Add(d)
	ch := s.ch
	if ch.timerArmed && !ch.timerAt.After(s.clock.now) {
		ch.timerArmed = false
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

// Woken reports whether the connection's Ready holds a signal: what would wake the channel
// from its sleep. Step takes it.
func (s *Scripted) Woken() bool { return len(s.ch.conn.Ready()) > 0 }

// State describes the channel: its phase, counters, queues, and every context in use.
func (s *Scripted) State() string {
	ch := s.ch
	var b strings.Builder
	fmt.Fprintf(&b, "phase %v, commands %d, contexts in use %d, handed off %d, task management %d\n",
		ch.phase, ch.commands, ch.ctxInUse(), ch.handedOff, ch.tmfActive)
	fmt.Fprintf(&b, "credits granted %d, owed %d, receives posted %d, send batches %d, send-queue free %d/%d\n",
		ch.ledger.granted, ch.ledger.pending, ch.recvPosted, ch.sendBatches, ch.sqFree, ch.sqDepth)
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
	for i := range ch.ctxs {
		c := &ch.ctxs[i]
		if c.state() == ctxFree {
			continue
		}
		fmt.Fprintf(&b, "tag %d: %v, %s\n", c.tag.Load(), c.stage, ctxStateNames[c.state()])
	}
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
				s.ch.teardown()
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
