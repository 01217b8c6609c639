package scsi

import "slices"

// How a command comes to run on a logical unit: the checks it passes first, in the order the
// standards give them (admit), then the task set (enterAndRun), and the answers of a command
// that fails them.

// Execute runs c on the logical unit and returns when it is complete or aborted. It is called by
// LUNMap.Execute, which resolves the LUN and sets the mapping's read-only flag.
func (lu *LogicalUnit) Execute(c *Command) {
	op := lu.admit(c)
	if op == nil {
		return
	}
	lu.enterAndRun(c, op)
}

// enterAndRun waits in the task set until c may run, runs it and leaves. A SIMPLE READ or WRITE
// of a logical unit that never blocks runs untracked when the task set allows it: it ends in
// microseconds, so task management can wait for it to end instead of finding it.
func (lu *LogicalUnit) enterAndRun(c *Command, op *opInfo) {
	if c.Attr == TaskSimple && op.flags&opUntracked != 0 && lu.nonBlocking && !c.aborted.Load() && lu.tasks.enterUntracked() {
		op.run(lu, c)
		lu.tasks.leaveUntracked()
		return
	}
	if !lu.tasks.enter(c) {
		c.taskAborted()
		return
	}
	op.run(lu, c)
	lu.tasks.leave(c)
}

// taskAborted ends a command that task management aborted before it ran.
func (c *Command) taskAborted() {
	c.Status = StatusTaskAborted
	c.SenseLength, c.DataInLength = 0, 0
}

// admit makes the checks every command passes before it may enter the task set, in their
// order (SAM-5, SPC-4): unit attentions, the CDB's operation code and length, a sanitize in
// progress, the CONTROL byte, the port's access state, reservations, write protection. It
// returns the command's description, or nil when c is complete (failed) already.
func (lu *LogicalUnit) admit(c *Command) *opInfo {
	c.lu = lu
	c.Status = StatusGood
	if len(c.CDB) == 0 {
		c.fail(ReasonInvalidFieldInCommandIU)
		return nil
	}
	op := lookupCommand(c.CDB)

	// Unit attentions come first: every command but INQUIRY, REPORT LUNS and REQUEST SENSE
	// reports a pending one instead of running (SPC-4 5.14).
	if op == nil || op.flags&opReportsNoUA == 0 {
		if r := lu.takeUA(c.Nexus); r != ReasonNone {
			c.fail(r)
			return nil
		}
	}
	if op == nil {
		c.unsupported()
		return nil
	}
	if len(c.CDB) < op.cdbLength {
		c.fail(ReasonInvalidFieldInCommandIU)
		return nil
	}
	// A sanitize operation in progress, or one that failed, leaves only INQUIRY, REPORT LUNS
	// and REQUEST SENSE (SBC-4 4.32.1; SANITIZE itself after a failure).
	if op.flags&opReportsNoUA == 0 {
		if r, info := lu.sanitizeBlocked(); r != ReasonNone && !(r == ReasonSanitizeCommandFailed && op.opcode == opSanitize) {
			c.failInfo(r, info)
			return nil
		}
	}
	// The CONTROL byte, the same for every command: no ACA, no linked commands.
	if c.failOn(checkControl(c.CDB, op.cdbLength-1)) {
		return nil
	}
	if c.Attr == TaskACA {
		c.fail(ReasonInvalidFieldInCommandIU)
		return nil
	}
	// Then the asymmetric access state of the port the command came through (SPC-4
	// 5.15.2.4): a standby, unavailable or transitioning port runs only the few commands an
	// initiator needs to find a better path.
	if st, ok := lu.accessState(c); ok && !st.allows(op.flags) {
		r, _ := st.notAccessible()
		c.fail(r)
		return nil
	}
	// Then reservations: a logical unit without registrations or SPC-2 reservation pays one atomic load here.
	if s := lu.pr.state.Load(); s.active {
		if s.stale && !Unavailable.allows(op.flags) {
			// Shared reservations not known current: as if the port were unavailable (prshare.go).
			c.fail(ReasonLUNotAccessibleTargetPortUnavailable)
			return nil
		}
		if s.conflicts(c.Nexus.id(), op, c.CDB) {
			c.reservationConflict()
			return nil
		}
	}
	if op.flags&opWriteProtected != 0 && lu.writeProtected(c) {
		c.fail(ReasonWriteProtected)
		return nil
	}
	return op
}

// invalidOpcode answers a CDB whose operation code is not supported: ILLEGAL REQUEST, INVALID
// COMMAND OPERATION CODE (SPC-4 4.2.5.1), without a field pointer (the whole CDB is unknown).
func (c *Command) invalidOpcode() {
	c.fail(ReasonInvalidCommandOperationCode)
}

// invalidServiceAction answers a CDB whose operation code is supported but whose service action
// is not: ILLEGAL REQUEST, INVALID FIELD IN CDB with the field pointer on the SERVICE ACTION
// field (SPC-4 4.2.5.1, and each service action command's text, e.g. PERSISTENT RESERVE IN
// 6.15.1). Initiator tools read INVALID COMMAND OPERATION CODE as "the whole command is not
// implemented": a PERSISTENT RESERVE IN with a reserved service action answered that way says
// that persistent reservations are missing.
func (c *Command) invalidServiceAction() {
	c.invalidCDBField(saFieldOff, saFieldBit)
}

// unsupported answers a CDB that lookupCommand did not find: an unsupported service action of an
// operation code that has supported ones, or else an unsupported operation code. An operation
// code none of whose service actions is supported (MAINTENANCE OUT, SERVICE ACTION OUT(16)) is
// itself unsupported: SET TARGET PORT GROUPS is MAINTENANCE OUT's only one, and only where it
// is offered.
func (c *Command) unsupported() {
	if slices.ContainsFunc(commandTable[c.CDB[0]].bySA, func(op *opInfo) bool { return c.lu.offers(op, c) }) {
		c.invalidServiceAction()
		return
	}
	c.invalidOpcode()
}
