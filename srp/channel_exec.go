package srp

// dispatch hands c to a worker. While a task management function of this channel is in
// progress, commands that arrived after it wait: they must not be caught by it in the logical
// unit (the initiator sent them later, on the same channel).
func (ch *channel) dispatch(c *cmdCtx) {
	if ch.tmfActive > 0 {
		c.stage = stageHeld
		c.next = nil
		if ch.heldTail == nil {
			ch.heldHead = c
		} else {
			ch.heldTail.next = c
		}
		ch.heldTail = c
		return
	}
	c.stage = stageExec
	ch.execCount++
	if lu := c.lu.Load(); lu == nil || lu.NonBlocking() {
		// RAM and null logical units never wait for I/O: running the command here saves two
		// goroutine hand-offs. A command can still wait in the logical unit (for an older
		// ORDERED command, or the LBA range of a COMPARE AND WRITE), but only for commands
		// already executing on other goroutines, which finish without this one.
		if c.state() == ctxCmd && !ch.closing.Load() {
			c.lunMap.Execute(&c.cmd)
		}
		ch.onDone(c)
		return
	}
	ch.work <- c
}

// releaseHeld dispatches the commands held while task management ran.
func (ch *channel) releaseHeld() {
	for ch.heldHead != nil && ch.tmfActive == 0 {
		c := ch.heldHead
		ch.heldHead = c.next
		if ch.heldHead == nil {
			ch.heldTail = nil
		}
		c.next = nil
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			continue
		}
		ch.dispatch(c)
	}
}

// onDone takes back a context from a worker or the task management goroutine.
func (ch *channel) onDone(c *cmdCtx) {
	ch.execCount--
	if ch.state == chClosing {
		if c.stage == stageTMF {
			ch.tmfActive--
		}
		ch.finish(c, false)
		return
	}
	if c.stage == stageTMF {
		ch.tmfActive--
		c.stage = stageRespond
		ch.newSQWork(c)
		ch.releaseHeld()
		return
	}
	if c.cmd.Aborted() {
		c.transition(ctxCmd, ctxAbortedLocal)
	}
	if c.state() != ctxCmd {
		ch.finishAborted(c)
		return
	}
	c.stage = stageRespond
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
		if ch.state != chClosing {
			ch.repost(c.recv)
			if owed {
				ch.ledger.owe()
			}
		}
		c.recv = -1
	}
	if c.real {
		c.real = false
		ch.active--
	}
	c.cmd.DataIn, c.cmd.DataOut, c.cmd.CDB = nil, nil, nil
	c.lunMap = nil
	if c.held != nil {
		c.held.Release()
		c.held = nil
	}
	c.statLU = nil
	c.stage = stageNone
	c.free()
	ch.busy--
	ch.free = append(ch.free, c)
	if len(ch.waitRecv) > 0 && ch.state != chClosing {
		p := ch.waitRecv[0]
		copy(ch.waitRecv, ch.waitRecv[1:])
		ch.waitRecv = ch.waitRecv[:len(ch.waitRecv)-1]
		ch.startIU(ch.allocCtx(), p.recv, int(p.n), p.at)
	}
}

// scanAborted finds commands claimed by task management while they waited in a list and ends
// them.
func (ch *channel) scanAborted() {
	var keep, keepTail *cmdCtx
	for c := ch.bufHead; c != nil; {
		next := c.next
		c.next = nil
		if c.state() != ctxCmd {
			ch.finishAborted(c)
		} else {
			if keepTail == nil {
				keep = c
			} else {
				keepTail.next = c
			}
			keepTail = c
		}
		c = next
	}
	ch.bufHead, ch.bufTail = keep, keepTail
	if ch.bufHead == nil && ch.bufWaiting {
		ch.bufWaiting = false
		ch.pool.waiting.Add(-1)
	}
	keep, keepTail = nil, nil
	for c := ch.sqHead; c != nil; {
		next := c.next
		c.next = nil
		if st := c.state(); st == ctxAbortedTMF || st == ctxAbortedLocal {
			ch.finishAborted(c)
		} else {
			if keepTail == nil {
				keep = c
			} else {
				keepTail.next = c
			}
			keepTail = c
		}
		c = next
	}
	ch.sqHead, ch.sqTail = keep, keepTail
	keep, keepTail = nil, nil
	for c := ch.heldHead; c != nil; {
		next := c.next
		c.next = nil
		if c.state() != ctxCmd {
			ch.finishAborted(c)
		} else {
			if keepTail == nil {
				keep = c
			} else {
				keepTail.next = c
			}
			keepTail = c
		}
		c = next
	}
	ch.heldHead, ch.heldTail = keep, keepTail
	ch.serviceSQ()
}
