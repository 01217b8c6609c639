package srp

// dispatch hands c to a worker. While a task management function of this channel is in
// progress, commands that arrived after it wait: they must not be caught by it in the logical
// unit (the initiator sent them later, on the same channel).
func (ch *channel) dispatch(c *cmdCtx) {
	if ch.tmfActive > 0 {
		c.setStage(stageWaitTMF)
		ch.tmfWaitQ.push(c)
		return
	}
	c.setStage(stageExec)
	if lu := c.lu.Load(); lu == nil || lu.NonBlockingFor(c.cmd.CDB) {
		// RAM and null logical units never wait for I/O: running the command here saves two
		// goroutine hand-offs. A command can still wait in the logical unit (for an older
		// ORDERED command, or the LBA range of a COMPARE AND WRITE), but only for commands
		// already executing on other goroutines, which finish without this one.
		if c.state() == ctxCmd && !ch.closed() {
			c.lunMap.Execute(&c.cmd)
		}
		ch.executed(c)
		return
	}
	ch.handedOff++
	ch.work <- c
}

// releaseTMFWaiters dispatches the commands held while task management ran.
func (ch *channel) releaseTMFWaiters() {
	for !ch.tmfWaitQ.empty() && ch.tmfActive == 0 {
		c := ch.tmfWaitQ.pop()
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			continue
		}
		ch.dispatch(c)
	}
}

// onDone takes back a context from a worker or the task management goroutine.
func (ch *channel) onDone(c *cmdCtx) {
	ch.handedOff--
	ch.executed(c)
}

// executed moves on a command that has run in its logical unit, or a task management
// function that has run: to its response, or to its end without one (aborted).
func (ch *channel) executed(c *cmdCtx) {
	if c.stage == stageTMF {
		ch.tmfActive--
	}
	if ch.closed() {
		ch.finish(c, false)
		return
	}
	if c.stage == stageTMF {
		c.setStage(stageRespond)
		ch.newSQWork(c)
		ch.releaseTMFWaiters()
		return
	}
	if c.cmd.Aborted() {
		c.transition(ctxCmd, ctxAbortedLocal)
	}
	if c.state() != ctxCmd {
		ch.finishAborted(c)
		return
	}
	c.setStage(stageRespond)
	ch.newSQWork(c)
}

// finishAborted ends a command that gets no response: its credit is owed to the initiator
// and returned with the next response (LIO's srpt_aborted_task).
func (ch *channel) finishAborted(c *cmdCtx) {
	ch.t.stats.aborted.Add(1)
	ch.finish(c, true)
}

// finish releases c: buffers back to the pool, its receive buffer re-posted (unless closing),
// and the context back on the free list, then starts an IU parked for want of a context.
func (ch *channel) finish(c *cmdCtx, owed bool) {
	ch.releaseBuffers(c)
	if c.recv >= 0 {
		if !ch.closed() {
			ch.repost(c.recv)
			if owed {
				ch.ledger.owe()
			}
		}
		c.recv = -1
	}
	ch.uncount(c)
	c.cmd.DataIn, c.cmd.DataOut, c.cmd.CDB = nil, nil, nil
	c.lunMap = nil
	if c.luHold != nil {
		c.luHold.Release()
		c.luHold = nil
	}
	c.statLU = nil
	c.setStage(stageNone)
	c.free()
	ch.free = append(ch.free, c)
	if len(ch.waitRecv) > 0 && !ch.closed() {
		p := ch.waitRecv[0]
		copy(ch.waitRecv, ch.waitRecv[1:])
		ch.waitRecv = ch.waitRecv[:len(ch.waitRecv)-1]
		ch.startIU(ch.allocCtx(), p.recv, int(p.n), p.at)
	}
}

// uncount ends c's count in ch.commands, if it was counted.
func (ch *channel) uncount(c *cmdCtx) {
	if c.real {
		c.real = false
		ch.commands--
		if c.stage == stageSent {
			ch.answered--
		}
	}
}

// scanAborted finds commands claimed by task management while they waited in a queue and ends
// them.
func (ch *channel) scanAborted() {
	notCmd := func(c *cmdCtx) bool { return c.state() != ctxCmd }
	ch.bufQ.removeIf(notCmd, ch.finishAborted)
	ch.noteBufQueue()
	// A command waiting to post its response (ctxResponded comes only after) or its RDMA:
	// claimed by task management, or aborted by the logical unit.
	ch.sqQ.removeIf(func(c *cmdCtx) bool {
		st := c.state()
		return st == ctxAbortedTMF || st == ctxAbortedLocal
	}, ch.finishAborted)
	ch.tmfWaitQ.removeIf(notCmd, ch.finishAborted)
	ch.serviceSQ()
}
