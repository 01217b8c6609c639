package srp

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
)

// timerFire is the timer's function: the group runs onTimer (service).
func (ch *channel) timerFire() {
	ch.fired.Store(true)
	ch.signal()
}

// onEvent is the connection's event callback (ib.AcceptParams.OnEvent).
func (ch *channel) onEvent() {
	ch.events.Store(true)
	ch.signal()
}

// requestStop asks the channel to close: gracefully (SRP_T_LOGOUT, drain, disconnect) or at
// once. logout is the SRP_T_LOGOUT reason sent before disconnecting. A request never weakens
// an earlier one: a graceful request after a hard one stays hard.
func (ch *channel) requestStop(mode stopMode, why string, logout iu.TLogoutReason) {
	for {
		cur := ch.stop.Load()
		req := &stopReq{mode: mode, why: why, logout: logout}
		if cur != nil && cur.mode > mode {
			req.mode = cur.mode
		}
		if ch.stop.CompareAndSwap(cur, req) {
			break
		}
	}
	ch.signal()
}

// publish makes the channel's commands in progress and credits visible to Target.Sessions:
// two loads and, when a value changed, a store, once per pass.
func (ch *channel) publish() {
	if a := int32(ch.commands - ch.answered); ch.pub.active.Load() != a {
		ch.pub.active.Store(a)
	}
	if g := ch.ledger.granted; ch.pub.granted.Load() != g {
		ch.pub.granted.Store(g)
	}
}

// armTimer makes the timer fire at at, unless it is armed to fire earlier (onTimer re-arms it
// for whatever still needs it).
func (ch *channel) armTimer(at time.Time) {
	if ch.timer.armed && !at.Before(ch.timer.at) {
		return
	}
	ch.timer.at = at
	ch.timer.armed = true
	if ch.fake == nil {
		ch.timer.t.Reset(time.Until(at))
	}
}

// release frees the channel's memory; the queue pair must be closed (or never created).
func (ch *channel) release() {
	if err := ch.mr.Deregister(); err != nil {
		ch.log.Warn("deregistering channel memory", zap.Error(err))
	}
	if err := ch.slab.Close(); err != nil {
		ch.log.Warn("unmapping channel memory", zap.Error(err))
	}
}

// recvBuf returns receive buffer i (the bytes the IU lands in).
func (ch *channel) recvBuf(i int32) []byte { return ch.rq.buf(i) }

// accepted records, before the channel is added to its session (where Target.Sessions reads
// it), when its login was accepted and its queue pair number.
func (ch *channel) accepted(conn ib.Conn) {
	ch.pub.loginAt = time.Now()
	if q, ok := conn.(ib.QPNumberer); ok {
		ch.pub.qpn = q.QPNum()
	}
	ch.publish()
}

// now is the channel's wall clock: the real one, or a script's.
func (ch *channel) now() time.Time {
	if ch.fake != nil {
		return ch.fake.now
	}
	return time.Now()
}

// nanos is the channel's monotonic clock in nanoseconds (nanotime, or a script's).
func (ch *channel) nanos() int64 {
	if ch.fake != nil {
		return int64(ch.fake.now.Sub(clockBase))
	}
	return nanotime()
}

// ctxInUse is the number of contexts made and not on the free list.
func (ch *channel) ctxInUse() int { return ch.ctxs.n - len(ch.free) }

// setPhase moves the channel to phase p. The workers and the task management goroutine read
// whether the channel is closing (closingNow) without a lock.
func (ch *channel) setPhase(p chPhase) {
	if phaseMoves[ch.phase]&(1<<p) == 0 {
		illegalMove(ch, fmt.Sprintf("channel phase %v -> %v", ch.phase, p))
		return
	}
	ch.phase = p
	if p >= phaseClosing {
		ch.closing.Store(true)
	}
}

// closed reports whether the channel is closing: it takes no new work and its queue pair is
// (being) disconnected.
func (ch *channel) closed() bool { return ch.phase >= phaseClosing }

// flushesExpected reports whether every posted work request will still come back as a
// completion: false once the channel is abandoned.
func (ch *channel) flushesExpected() bool { return ch.phase < phaseAbandoned }

// qpOpen reports whether the queue pair is still open (completions and events to poll).
func (ch *channel) qpOpen() bool { return ch.phase < phaseQPClosed }

// watchPeriod is how often the watchdog looks at a channel with work outstanding.
func (ch *channel) watchPeriod() time.Duration { return ch.t.lim.RDMATimeout / watchSteps }

// batchPosted counts a batch of work requests queued for the send queue, and starts the
// watchdog if it is not running: a busy channel reads the clock once per watchPeriod, not per
// post.
func (ch *channel) batchPosted() {
	ch.sendBatches++
	ch.watch.posted++
	if !ch.watch.at.IsZero() {
		return
	}
	now := ch.now()
	ch.pub.lastClock = now.UnixNano()
	ch.watch.head, ch.watch.size = 0, 0
	ch.watch.push(now, ch.watch.posted)
	ch.watch.at = now.Add(ch.watchPeriod())
	ch.armTimer(ch.watch.at)
}
