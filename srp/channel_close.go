package srp

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
)

// checkStop acts on a stop request from another goroutine.
func (ch *channel) checkStop() {
	req := ch.stop.Load()
	if req == nil || ch.closed() {
		return
	}
	if req.mode == stopGraceful {
		if ch.phase == phaseLive {
			ch.setPhase(phaseDraining)
			ch.log.Info("draining channel", zap.String("reason", req.why))
			ch.sendTLogout(req.logout)
		}
		return
	}
	ch.sendTLogout(req.logout)
	ch.beginClose(req.why)
}

func (ch *channel) close(why string, flushes bool) {
	if ch.closed() {
		if !flushes && ch.phase == phaseClosing {
			ch.setPhase(phaseAbandoned)
		}
		return
	}
	if flushes {
		ch.flushSends() // before the QP leaves RTS: queued work then completes or flushes
		if ch.closed() {
			return // the post failed and abandoned the channel
		}
	} else {
		ch.batch, ch.batchSGEs = ch.batch[:0], ch.batchSGEs[:0]
		ch.dropRecvs()
	}
	ch.setPhase(phaseClosing)
	ch.closeReason = why
	ch.log.Info("closing channel", zap.String("reason", why))
	if err := ch.conn.Disconnect(); err != nil {
		if errors.Is(err, ib.ErrDeviceRemoved) {
			flushes = false
		} else if !errors.Is(err, ib.ErrClosed) {
			ch.log.Warn("disconnect failed", zap.Error(err))
		}
	}
	if !flushes {
		ch.setPhase(phaseAbandoned)
	}
	release := func(c *cmdCtx) { ch.finish(c, false) }
	all := func(*cmdCtx) bool { return true }
	ch.bufQ.removeIf(all, release)
	ch.noteBufQueue()
	ch.sqQ.removeIf(all, release)
	ch.tmfWaitQ.removeIf(all, release)
	ch.waitRecv = ch.waitRecv[:0]
	if last := ch.sess.remove(ch); last && !ch.detached.Load() {
		if m := ch.sess.lunMap.Load(); m != nil {
			sess := ch.sess
			done := sess.startReset()
			// On a goroutine of its own: the reset waits for the commands of the nexus to
			// leave the logical units, which may need this group to go on. The channel is
			// torn down only after (drained).
			ch.resetting.Store(true)
			go func() {
				defer ch.signal()
				defer ch.resetting.Store(false)
				defer close(done)
				m.NexusReset(sess.nexus)
			}()
			ch.log.Info("last channel of the I_T nexus closed: nexus reset")
		}
	}
	ch.drainAt = ch.now().Add(ch.t.lim.DrainTimeout)
	ch.armTimer(ch.drainAt)
}

// drained reports whether a closing channel may be torn down.
func (ch *channel) drained() bool {
	if ch.handedOff > 0 || ch.resetting.Load() {
		return false
	}
	if !ch.flushesExpected() {
		return true
	}
	return ch.sendBatches == 0 && ch.recvPosted == 0 && ch.ctxInUse() == 0
}

// forceRelease closes the queue pair when no flush completions will come (device removed, a
// failed post, or the drain timeout) and releases every context that is not with a worker:
// after Close the queue pair no longer uses their memory.
func (ch *channel) forceRelease() {
	ch.batch, ch.batchSGEs = ch.batch[:0], ch.batchSGEs[:0]
	ch.dropRecvs()
	if err := ch.conn.Close(); err != nil {
		ch.log.Warn("closing the queue pair", zap.Error(err))
	}
	ch.setPhase(phaseQPClosed)
	ch.ctxs.forMade(func(c *cmdCtx) {
		if c.stage == stageExec || c.stage == stageTMF {
			return
		}
		if c.state() != ctxFree || c.buf.valid() || c.table.valid() || c.recv >= 0 {
			ch.finish(c, false)
		}
	})
	ch.sendBatches, ch.recvPosted = 0, 0
}

// teardown releases everything once the channel is drained.
func (ch *channel) teardown() {
	if ch.qpOpen() {
		if err := ch.conn.Close(); err != nil {
			ch.log.Warn("closing the queue pair", zap.Error(err))
		}
	}
	ch.setPhase(phaseClosed)
	// After Close nothing of ours is in use by the queue pair: release what flushes did not.
	ch.ctxs.forMade(func(c *cmdCtx) {
		if c.state() != ctxFree || c.buf.valid() || c.table.valid() || c.recv >= 0 {
			ch.finish(c, false)
		}
	})
	ch.timer.t.Stop()
	ch.pool.unregister(ch)
	ch.noteBufQueue()
	ch.release()
	ch.t.stats.channelsOpen.Add(-1)
	ch.t.stats.channelsClosed.Add(1)
	ch.log.Info("channel closed", zap.String("reason", ch.closeReason))
	close(ch.closedCh)
	ch.t.reg.removeChannel(ch)
}

// onTimer expires buffer waits and the drain deadline.
func (ch *channel) onTimer() {
	now := ch.now()
	if ch.closed() {
		if !ch.drainAt.IsZero() && !now.Before(ch.drainAt) && ch.phase == phaseClosing {
			ch.log.Error("flush completions did not arrive in time: closing the queue pair anyway",
				zap.Int("receives", ch.recvPosted), zap.Int("send_batches", ch.sendBatches),
				zap.Duration("drain_timeout", ch.t.lim.DrainTimeout))
			ch.setPhase(phaseAbandoned)
		}
		if ch.handedOff > 0 {
			ch.log.Warn("still waiting for commands to leave the logical units", zap.Int("commands", ch.handedOff))
			ch.armTimer(now.Add(ch.t.lim.DrainTimeout))
		}
		if ch.phase == phaseClosing && now.Before(ch.drainAt) {
			// The timer fired for something armed before the close (a buffer wait, the
			// watchdog): the drain deadline still needs it.
			ch.armTimer(ch.drainAt)
		}
		return
	}
	if !ch.watch.at.IsZero() && !now.Before(ch.watch.at) {
		ch.watchdog(now)
		if ch.closed() {
			return
		}
	}
	if !ch.idle.at.IsZero() && !now.Before(ch.idle.at) {
		ch.idleCheck(now)
		if ch.closed() {
			return
		}
	}
	clock := ch.nanos()
	deadline := clock - int64(ch.t.lim.BufferWait)
	for c := ch.bufQ.front(); c != nil && c.waitSince <= deadline; c = ch.bufQ.front() {
		ch.popBuf()
		ch.t.stats.bufferBusy.Add(1)
		ch.logs.busyCount++
		ch.uncount(c)
		ch.answerTransport(c, scsi.StatusBusy, scsi.ReasonNone, "")
	}
	// Silent BUSY answers hide a starved target: say so, at most once per busyLogEvery, with
	// the count since the last line.
	if ch.logs.busyCount > 0 {
		if ok, _ := ch.logs.busy.Allow(time.Duration(clock)); ok {
			ch.log.Warn("commands answered BUSY: no data buffer within buffer_wait",
				zap.Int("commands", ch.logs.busyCount), zap.Duration("buffer_wait", ch.t.lim.BufferWait),
				zap.Int64("channel_buffer_bytes", ch.bufHeld), zap.Int64("initiator_buffer_bytes", ch.sess.buf.inUse.Load()),
				zap.Int64("source_buffer_bytes", ch.src.buf.inUse.Load()), zap.Int64("max_initiator_buffer", ch.t.lim.MaxInitiatorBuffer),
				zap.Int64("pool_in_use", ch.pool.inUse.Load()), zap.Int64("pool_size", ch.pool.size()))
			ch.logs.busyCount = 0
		}
	}
	if c := ch.bufQ.front(); c != nil {
		ch.armTimer(now.Add(time.Duration(c.waitSince - deadline)))
	}
	if !ch.watch.at.IsZero() {
		ch.armTimer(ch.watch.at)
	}
	if !ch.idle.at.IsZero() {
		ch.armTimer(ch.idle.at)
	}
}
