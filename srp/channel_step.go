package srp

import "github.com/srptarget/srptarget/ib"

// service does everything the channel can do in a pass of its group once its completions
// are handled: connection events, the timer, stop requests, commands claimed by task
// management, buffer waiters, owed credits, the moves of a closing channel, and the work
// requests queued meanwhile (one post). It reports whether the channel is drained and may be
// torn down.
func (ch *channel) service() (over bool) {
	if ch.events.Load() && ch.events.Swap(false) {
		ch.pollEvents()
	}
	if ch.fired.Load() && ch.fired.Swap(false) && ch.timer.armed && ch.fake == nil {
		ch.timer.armed = false
		ch.onTimer()
	}
	// The calls behind a flag only when it is set: a group runs this for every channel with
	// a completion in the pass, most of them with nothing but their posts to do.
	if ch.stop.Load() != nil {
		ch.checkStop()
	}
	if ch.abortScan.Load() && ch.abortScan.Swap(false) {
		ch.scanAborted()
	}
	if !ch.bufQ.empty() {
		ch.retryBufWaiters()
	}
	if ch.ledger.pending > 0 {
		ch.maybeCredReq()
	}
	if ch.phase == phaseDraining && ch.commands == 0 {
		ch.beginClose("target shutdown: all commands done")
	}
	if ch.phase == phaseAbandoned {
		ch.forceRelease()
	}
	if ch.closed() && ch.drained() {
		return true
	}
	if len(ch.rq.q) > 0 || len(ch.batch) > 0 {
		ch.flushSends()
	}
	ch.publish()
	ch.g.noteSends(ch)
	return false
}

// pollEvents takes the connection's events.
func (ch *channel) pollEvents() {
	if !ch.qpOpen() {
		return
	}
	for {
		ev, ok := ch.conn.PollEvent()
		if !ok {
			return
		}
		switch ev {
		case ib.EventEstablished:
			ch.log.Debug("connection established")
		case ib.EventDisconnected:
			ch.beginClose("initiator disconnected")
		case ib.EventDeviceRemoved:
			ch.abandon("RDMA device removed")
		}
	}
}
