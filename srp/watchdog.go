package srp

import (
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/srp/iu"
)

// stallWatch is the state of the stall watchdog, which closes a channel whose oldest
// outstanding work request is older than Limits.RDMATimeout. It knows that age without a
// clock read per post: each check (every RDMATimeout/watchSteps while work is outstanding)
// records a mark, the number of batches posted by then. Send-queue work completes in the
// order it was posted on a reliable connection, so when fewer batches have completed than a
// mark taken RDMATimeout ago counted, a batch posted before that mark is still outstanding:
// the channel is stalled. Whether anything completed meanwhile does not matter: an initiator
// that trickles receive buffers lets a response through now and then, but the work queued
// behind keeps ageing. The stall is noticed at most RDMATimeout/watchSteps late.
type stallWatch struct {
	posted uint64    // send-queue batches posted; completed = posted - sendBatches
	at     time.Time // the next check; zero: not armed (nothing outstanding)
	// marks is a ring of the checks' marks, oldest first, none older than needed.
	marks      [watchSteps + 2]watchMark
	head, size int
}

// watchMark says that posted batches had been posted by at.
type watchMark struct {
	at     time.Time
	posted uint64
}

// watchSteps is the number of checks per RDMATimeout.
const watchSteps = 8

func (w *stallWatch) push(at time.Time, posted uint64) {
	if w.size == len(w.marks) {
		w.head = (w.head + 1) % len(w.marks)
		w.size--
	}
	w.marks[(w.head+w.size)%len(w.marks)] = watchMark{at, posted}
	w.size++
}

// oldest returns the newest mark taken at or before cutoff, dropping the marks before it
// (it is the strongest evidence a later check can have), or ok false if there is none.
func (w *stallWatch) oldest(cutoff time.Time) (m watchMark, ok bool) {
	for w.size > 1 && !w.marks[(w.head+1)%len(w.marks)].at.After(cutoff) {
		w.head = (w.head + 1) % len(w.marks)
		w.size--
	}
	if w.size == 0 || w.marks[w.head].at.After(cutoff) {
		return watchMark{}, false
	}
	return w.marks[w.head], true
}

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

// watchdog closes the channel when a work request has been outstanding for
// Limits.RDMATimeout (stallWatch). An initiator that posts no receive buffers leaves the
// response SENDs in RNR retry for ever (ib_srp asks for infinite RNR retries), and with them
// the data buffers of its commands. Disconnecting moves the queue pair to the error state;
// the flushed work requests give the buffers back, and the commands end without a response.
func (ch *channel) watchdog(now time.Time) {
	ch.pub.lastClock = now.UnixNano()
	if ch.sendBatches == 0 {
		ch.watch.at = time.Time{}
		return
	}
	mark, ok := ch.watch.oldest(now.Add(-ch.t.lim.RDMATimeout))
	stalled := func() bool { return ok && ch.watch.posted-uint64(ch.sendBatches) < mark.posted }
	if stalled() && ch.qpOpen() {
		// An idle channel reaps its responses' completions only when it wakes up
		// (sendsAwaited): take those that came before calling it a stall.
		ch.reap()
		if ch.closed() || ch.sendBatches == 0 {
			ch.watch.at = time.Time{}
			return
		}
	}
	if stalled() {
		age := now.Sub(mark.at)
		ch.t.stats.rdmaStalls.Add(1)
		ch.log.Warn("RDMA stalled: a work request outstanding for longer than rdma_timeout; closing the channel and aborting its commands",
			zap.Duration("oldest_work_request_age", age), zap.Duration("rdma_timeout", ch.t.lim.RDMATimeout),
			zap.Int("work_batches_outstanding", ch.sendBatches), zap.Int("commands", ch.commands),
			zap.Int64("buffer_bytes", ch.bufHeld),
			zap.String("hint", "the initiator stopped taking responses, or takes them too slowly (no receive buffers posted, or hung); a healthy initiator reconnects"))
		ch.watch.at = time.Time{}
		ch.beginClose("RDMA stalled: a work request outstanding for " + age.Round(time.Millisecond).String())
		return
	}
	ch.watch.push(now, ch.watch.posted)
	ch.watch.at = now.Add(ch.watchPeriod())
}

// startIdleWatch starts the idle checks when Limits.IdleTimeout is set: four per timeout.
func (ch *channel) startIdleWatch() {
	if ch.t.lim.IdleTimeout <= 0 {
		return
	}
	ch.idle.at = ch.now().Add(ch.t.lim.IdleTimeout / 4)
	ch.armTimer(ch.idle.at)
}

// idleCheck closes the channel once it has received nothing and held nothing (no context in
// use, no data buffer, no work request outstanding) for Limits.IdleTimeout: an initiator, or
// a host that forged many, cannot keep channels that do nothing for ever. It is noticed at
// most a quarter of the timeout late. The initiator is told why (SRP_T_LOGOUT, inactive RDMA
// channel) before the disconnect.
func (ch *channel) idleCheck(now time.Time) {
	ch.idle.at = now.Add(ch.t.lim.IdleTimeout / 4)
	if ch.sendBatches > 0 && ch.qpOpen() {
		ch.reap() // the completions of the last responses, which an idle channel leaves unreaped
		if ch.closed() {
			return
		}
	}
	holds := ch.ctxInUse() > 0 || ch.bufHeld > 0 || ch.sendBatches > 0 || len(ch.waitRecv) > 0
	if holds || ch.idle.iusIn != ch.idle.seen || ch.phase != phaseLive {
		ch.idle.seen, ch.idle.from = ch.idle.iusIn, time.Time{}
		return
	}
	if ch.idle.from.IsZero() {
		// Idle since at least the previous check: counted from this one, the timeout ends
		// at most a check late.
		ch.idle.from = now.Add(-ch.t.lim.IdleTimeout / 4)
	}
	if idle := now.Sub(ch.idle.from); idle >= ch.t.lim.IdleTimeout {
		ch.t.stats.idleClosed.Add(1)
		ch.idle.at = time.Time{}
		ch.sendTLogout(iu.TLogoutInactive)
		ch.beginClose("idle for " + idle.Round(time.Millisecond).String() + " (limits.idle_timeout): nothing received, nothing held")
	}
}
