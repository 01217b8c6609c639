package srp

import (
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/srp/iu"
)

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

// reap polls the group's completion queues, so that the channel's completions that have come
// are taken: the stall watchdog and the idle check look at the channel only after.
func (ch *channel) reap() {
	for _, q := range ch.g.cqs {
		ch.g.pollCQ(q)
	}
}
