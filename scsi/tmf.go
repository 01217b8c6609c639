package scsi

// Task management functions (SAM-5 7). The transport calls them on every logical unit the
// function covers. Each returns only when the commands it aborts have stopped: after that the
// transport may tell the initiator and must never touch those commands' buffers again.

// AbortTask aborts the command of nexus n with tag. It reports FUNCTION COMPLETE whether or not
// the command was found, as SAM-5 says (the command may have completed already).
func (lu *LogicalUnit) AbortTask(n *Nexus, tag uint64) TMFResponse {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	lu.tasks.abortLocked(func(c *Command) bool { return c.Nexus == n && c.Tag == tag })
	return TMFComplete
}

// AbortTaskSet aborts every command that nexus n has on the logical unit.
func (lu *LogicalUnit) AbortTaskSet(n *Nexus) TMFResponse {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	lu.tasks.abortLocked(func(c *Command) bool { return c.Nexus == n })
	return TMFComplete
}

// ClearTaskSet aborts every command on the logical unit, from every nexus. Other nexuses that
// lost commands get COMMANDS CLEARED BY ANOTHER INITIATOR (TAS is 0).
func (lu *LogicalUnit) ClearTaskSet(n *Nexus) TMFResponse {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	lu.clearAllLocked(n, ReasonCommandsClearedByAnotherInitiator)
	return TMFComplete
}

// Reset performs a LOGICAL UNIT RESET: every command is aborted, mode parameters return to
// their defaults, and every nexus gets the unit attention BUS DEVICE RESET FUNCTION OCCURRED.
// A reset also ends an SPC-2 reservation (SPC-2 5.5.1); persistent reservations stay.
func (lu *LogicalUnit) Reset(n *Nexus) TMFResponse {
	lu.mu.Lock()
	lu.tasks.abortLocked(func(*Command) bool { return true })
	lu.mode.reset()
	lu.nexuses.establishUALocked(nil, nil, ReasonBusDeviceResetFunctionOccurred)
	lu.mu.Unlock()
	lu.pr.dropSPC2(nil)
	return TMFComplete
}

// resetNexus is LOGICAL UNIT RESET from a write-protected mapping (see
// LUNMap.LogicalUnitReset): the part of a reset that concerns only nexus n. Its commands are
// aborted and it gets BUS DEVICE RESET FUNCTION OCCURRED, so that to n it looks like the reset
// it asked for; other nexuses' commands, their unit attentions and the mode parameters are
// left alone.
func (lu *LogicalUnit) resetNexus(n *Nexus) TMFResponse {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	lu.tasks.abortLocked(func(c *Command) bool { return c.Nexus == n })
	lu.nexuses.establishUALocked(n, nil, ReasonBusDeviceResetFunctionOccurred)
	return TMFComplete
}

// NexusReset handles an I_T NEXUS RESET, or the loss of the nexus (logout, disconnect): the
// nexus's commands are aborted and it gets the unit attention I_T NEXUS LOSS OCCURRED when it
// comes back. An SPC-2 reservation the nexus held ends with it (SPC-2 5.5.1).
func (lu *LogicalUnit) NexusReset(n *Nexus) TMFResponse {
	lu.mu.Lock()
	lu.tasks.abortLocked(func(c *Command) bool { return c.Nexus == n })
	if lu.nexuses.known(n) {
		lu.nexuses.establishUALocked(n, nil, ReasonITNexusLossOccurred)
	}
	lu.mu.Unlock()
	id := n.id()
	lu.pr.dropSPC2(&id)
	return TMFComplete
}

// QueryTask reports FUNCTION SUCCEEDED when the command of nexus n with tag is in the task set,
// and FUNCTION COMPLETE when it is not.
func (lu *LogicalUnit) QueryTask(n *Nexus, tag uint64) TMFResponse {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	if lu.tasks.findLocked(n, tag) != nil {
		return TMFSucceeded
	}
	return TMFComplete
}

// clearAllLocked aborts every command; nexuses other than n that lost one get reason.
func (lu *LogicalUnit) clearAllLocked(n *Nexus, reason Reason) {
	lu.tasks.quiesceLocked()
	defer lu.tasks.reopen()
	for t := lu.tasks.list.head; t != nil; t = t.next {
		if t.Nexus != n {
			lu.nexuses.getLocked(t.Nexus).ua.add(reason)
		}
	}
	lu.tasks.abortLocked(func(*Command) bool { return true })
}
