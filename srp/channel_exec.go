package srp

// dispatch hands c to a worker of the group (or runs it here: see below). While a task management function of this channel is in
// progress, commands that arrived after it wait: they must not be caught by it in the logical
// unit (the initiator sent them later, on the same channel).
func (ch *channel) dispatch(c *cmdCtx) {
	if ch.tmf.active > 0 {
		c.setStage(stageWaitTMF)
		ch.tmfWaitQ.push(c)
		return
	}
	c.setStage(stageExec)
	if mp := c.mapping; mp == nil || mp.LU.NonBlockingFor(c.cmd.CDB) {
		// RAM and null logical units never wait for I/O: running the command here saves two
		// goroutine hand-offs. A command can still wait in the logical unit (for an older
		// ORDERED command, or the LBA range of a COMPARE AND WRITE), but only for commands
		// already executing on other goroutines, which finish without this one.
		if c.state() == ctxCmd && !ch.closed() {
			if mp != nil {
				c.lunMap.ExecuteMapped(mp, &c.cmd)
			} else {
				c.lunMap.Execute(&c.cmd)
			}
		}
		ch.executed(c)
		return
	}
	if ch.g.io.start(c) {
		return // on the group's io_uring, or done
	}
	ch.handedOff++
	ch.g.execute(c)
}

// releaseTMFWaiters dispatches the commands held while task management ran.
func (ch *channel) releaseTMFWaiters() {
	for !ch.tmfWaitQ.empty() && ch.tmf.active == 0 {
		c := ch.tmfWaitQ.pop()
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			continue
		}
		ch.dispatch(c)
	}
}

// onDone takes back a context from a worker or a task management goroutine.
func (ch *channel) onDone(c *cmdCtx) {
	ch.handedOff--
	tmf := c.stage == stageTMF
	ch.executed(c)
	if tmf {
		ch.tmf.busy = false
		ch.runNextTMF()
	}
}

// executed moves on a command that has run in its logical unit, or a task management
// function that has run: to its response, or to its end without one (aborted).
func (ch *channel) executed(c *cmdCtx) {
	if c.stage == stageTMF {
		ch.tmf.active--
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
