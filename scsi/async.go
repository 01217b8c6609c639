package scsi

import (
	"errors"

	"github.com/srptarget/srptarget/backstore"
)

// Asynchronous execution: the commands that move data on a file or block logical unit (READ,
// WRITE, WRITE AND VERIFY, VERIFY, COMPARE AND WRITE, SYNCHRONIZE CACHE) can run on a
// backstore.Queue instead of a goroutine that blocks in the backstore. The transport's poll
// loop calls LUNMap.Start, which makes every check Execute makes and starts the command's
// first request on the queue (Pending); when the queue reports that request's completion the
// loop hands it to LUNMap.Complete, which answers the command or starts its next request. A
// command that would have to wait on its way (behind an ORDERED command, for an LBA range a
// COMPARE AND WRITE holds, for room in the queue), or that has no asynchronous path, comes
// back Blocked: the transport then runs LUNMap.Continue on a goroutine that may block, which
// finishes it as Execute would have.
//
// Both paths share their steps (readPrep and readDone, the verification walk, ...), so that a
// command gets the same status, sense data and data either way. A pending command is in the
// task set and running: task management waits for it as for a command a worker executes.

// Progress is where Start and Complete leave a command.
type Progress uint8

const (
	// Done: the command is complete; its results are set.
	Done Progress = iota
	// Pending: a request of the command is in flight on the queue, carrying the tag given to
	// Start. Its completion goes to Complete.
	Pending
	// Blocked: the command cannot go on without waiting. Run Continue on a goroutine that may
	// block.
	Blocked
)

func (p Progress) String() string {
	switch p {
	case Done:
		return "done"
	case Pending:
		return "pending"
	}
	return "blocked"
}

// asyncStep is what the request in flight of a pending command does.
type asyncStep uint8

const (
	stepNone  asyncStep = iota
	stepRead            // READ: into DataIn
	stepWrite           // WRITE: from DataOut
	stepFlush           // SYNCHRONIZE CACHE
	stepWalk            // a read of the verification walk (verifyWalk)
	stepWAV             // WRITE AND VERIFY's write, before its walk
	stepCAW             // COMPARE AND WRITE's write, after its walk
)

// asyncIO is the state of a command that Start took.
type asyncIO struct {
	q    *backstore.Queue
	tag  uint64
	op   *opInfo // nil: Start left the command untouched
	step asyncStep
	// entered: c is in the task set (a Blocked command then only has to run).
	entered bool
	// slot is the LBA range held, plus one (0: none).
	slot int
	lba  uint64
	fit  uint64 // READ: the bytes read
	walk verifyWalk
}

// asyncEntry starts a command that passed the checks and runs now (it is in the task set).
type asyncEntry func(lu *LogicalUnit, c *Command) Progress

// asyncEntries are the commands with an asynchronous path, by operation code (none of them
// has service actions).
var asyncEntries = [256]asyncEntry{
	opRead6: startRead, opRead10: startRead, opRead12: startRead, opRead16: startRead,
	opWrite6: startWrite, opWrite10: startWrite, opWrite12: startWrite, opWrite16: startWrite,
	opWriteAndVerify10: startWriteAndVerify, opWriteAndVerify12: startWriteAndVerify, opWriteAndVerify16: startWriteAndVerify,
	opVerify10: startVerify, opVerify12: startVerify, opVerify16: startVerify,
	opCompareAndWrite:  startCompareAndWrite,
	opSynchronizeCache: startSynchronizeCache, opSynchronizeCache16: startSynchronizeCache,
}

// Async reports whether the logical unit's backstore can be driven by a backstore.Queue: its
// data commands may go to Start.
func (lu *LogicalUnit) Async() bool { return lu.async != nil }

// AsyncFor reports whether the command with cdb has an asynchronous course on the logical unit
// (Start may take it); for any other a transport calls Execute where it may block.
func (lu *LogicalUnit) AsyncFor(cdb []byte) bool {
	return lu.async != nil && len(cdb) > 0 && asyncEntries[cdb[0]] != nil
}

// Start begins c on the queue q of the goroutine that calls it, which also calls Complete and
// Submit; the requests of c carry tag. It never blocks. Done: c is complete (it failed a
// check, or there was nothing to move); Pending: its completion goes to Complete; Blocked:
// Continue must finish it.
func (m *LUNMap) Start(c *Command, q *backstore.Queue, tag uint64) Progress {
	mp := m.Lookup(c.LUN)
	if mp == nil || mp.LU.async == nil || len(c.CDB) == 0 || asyncEntries[c.CDB[0]] == nil {
		return Blocked
	}
	c.lunMap = m
	c.readOnly = mp.ReadOnly
	lu := mp.LU
	op := lu.admit(c)
	if op == nil {
		return Done
	}
	c.io = asyncIO{q: q, tag: tag, op: op}
	entered, aborted := lu.tasks.tryEnter(c)
	switch {
	case aborted:
		c.taskAborted()
		return Done
	case !entered:
		return Blocked
	}
	c.io.entered = true
	return lu.settle(c, asyncEntries[c.CDB[0]](lu, c))
}

// Complete takes the completion of c's request in flight (err: its error) and returns where
// that leaves c: Done, Pending again with its next request, or Blocked.
func (m *LUNMap) Complete(c *Command, err error) Progress {
	lu := c.lu
	return lu.settle(c, lu.asyncDone(c, err))
}

// Continue finishes on the calling goroutine, which may block, a command Start returned
// Blocked: as Execute would have, from where Start stopped.
func (m *LUNMap) Continue(c *Command) {
	switch {
	case c.io.op == nil:
		m.Execute(c)
	case !c.io.entered:
		c.lu.enterAndRun(c, c.io.op)
	default:
		// Start's requests, if any, ended without an answer (the queue was full): the command
		// runs from its beginning.
		c.Status, c.SenseLength, c.DataInLength = StatusGood, 0, 0
		c.io.op.run(c.lu, c)
		c.lu.tasks.leave(c)
	}
}

// Abandon ends a command that Start returned Blocked without running it (its transport gave it
// up: the channel closed, task management claimed it): what Start took, the task set
// included, is let go, and c ends with TASK ABORTED. A command Start never took is left as it
// is.
func (m *LUNMap) Abandon(c *Command) {
	if c.io.op == nil {
		return
	}
	if c.io.entered {
		c.io.entered = false
		c.lu.tasks.leave(c)
	}
	c.io.op = nil
	c.taskAborted()
}

// settle releases what c held when p ends its asynchronous course: Done leaves the task set,
// Blocked hands it to Continue.
func (lu *LogicalUnit) settle(c *Command, p Progress) Progress {
	if p == Pending {
		return p
	}
	c.io.step = stepNone
	if c.io.slot != 0 {
		lu.ranges.unlock(c.io.slot - 1)
		c.io.slot = 0
	}
	if c.io.walk.scratch != nil {
		putScratch(c.io.walk.scratch)
		c.io.walk.scratch = nil
	}
	if p == Done {
		lu.tasks.leave(c)
	}
	return p
}

// started turns the answer of starting a request for step into c's progress: Pending; Blocked
// for a full queue; or, for a request refused at once, what its completion with that error
// would have made of c.
func (lu *LogicalUnit) started(c *Command, step asyncStep, err error) Progress {
	if err == nil {
		c.io.step = step
		return Pending
	}
	if errors.Is(err, backstore.ErrQueueFull) {
		return Blocked
	}
	c.io.step = step
	return lu.asyncDone(c, err)
}

// lockRange takes c's LBA range for a write, without waiting; false: it is not free now.
func (lu *LogicalUnit) lockRange(c *Command, lba, n uint64, exclusive bool) bool {
	slot := lu.ranges.tryLock(lba, n, exclusive)
	if slot < 0 {
		return false
	}
	c.io.slot = slot + 1
	return true
}

// lockWalk goes on from the prep of a command that writes and walks (WRITE AND VERIFY,
// COMPARE AND WRITE), which described the walk w or (ok false) completed c: it takes the walk's
// LBA range, exclusive or not, and gives c the walk. false: c does not go on now, p says why.
func (lu *LogicalUnit) lockWalk(c *Command, w verifyWalk, ok, exclusive bool) (p Progress, goOn bool) {
	if !ok {
		return Done, false
	}
	if !lu.lockRange(c, w.lba, w.n, exclusive) {
		return Blocked, false
	}
	c.io.walk = w
	return Pending, true
}

// asyncDone takes the answer err to c's request in flight.
func (lu *LogicalUnit) asyncDone(c *Command, err error) Progress {
	a := &c.io
	switch a.step {
	case stepRead:
		lu.readDone(c, a.lba, a.fit, err)
	case stepWrite:
		lu.ranges.unlock(a.slot - 1)
		a.slot = 0
		lu.writeDone(c, a.lba, err)
	case stepFlush:
		lu.flushDone(c, err)
	case stepWAV:
		if lu.writeAndVerifyWritten(c, &a.walk, err) {
			return lu.walkOn(c)
		}
	case stepWalk:
		if !lu.walkRead(c, &a.walk, err) {
			return lu.walkOn(c)
		}
		if c.Status == StatusGood && c.CDB[0] == opCompareAndWrite {
			// the first half compared equal: the second goes in its place
			return lu.started(c, stepCAW, lu.async.StartWrite(a.q, lu.compareAndWriteData(c), lu.byteOffset(a.walk.lba), lu.compareAndWriteFUA(c), a.tag))
		}
	case stepCAW:
		lu.compareAndWriteDone(c, a.walk.lba, err)
	}
	return Done
}

// walkOn starts the next read of c's verification walk, or ends c (Done) when the walk is over.
func (lu *LogicalUnit) walkOn(c *Command) Progress {
	w := &c.io.walk
	if w.scratch == nil {
		w.scratch = getScratch()
	}
	p, lba, ok := lu.walkNext(c, w)
	if !ok {
		return Done
	}
	return lu.started(c, stepWalk, lu.async.StartRead(c.io.q, p, lu.byteOffset(lba), c.io.tag))
}

func startRead(lu *LogicalUnit, c *Command) Progress {
	b, f := decodeRW(c.CDB)
	if c.failOn(f) {
		return Done
	}
	fit := lu.readPrep(c, b.lba, b.blocks, b.lengthOff)
	if fit == 0 {
		return Done
	}
	c.io.lba, c.io.fit = b.lba, fit
	return lu.started(c, stepRead, lu.async.StartRead(c.io.q, c.DataIn[:fit], lu.byteOffset(b.lba), c.io.tag))
}

func startWrite(lu *LogicalUnit, c *Command) Progress {
	b, f := decodeRW(c.CDB)
	if c.failOn(f) || !lu.writePrep(c, b.lba, b.blocks, b.lengthOff) {
		return Done
	}
	if !lu.lockRange(c, b.lba, uint64(b.blocks), false) {
		return Blocked
	}
	c.io.lba = b.lba
	return lu.started(c, stepWrite, lu.async.StartWrite(c.io.q, c.DataOut, lu.byteOffset(b.lba), lu.writeFUA(writeFUABit(c.CDB)), c.io.tag))
}

func startSynchronizeCache(lu *LogicalUnit, c *Command) Progress {
	if !lu.synchronizeCachePrep(c) {
		return Done
	}
	return lu.started(c, stepFlush, lu.async.StartFlush(c.io.q, c.io.tag))
}

func startVerify(lu *LogicalUnit, c *Command) Progress {
	w, ok := lu.verifyPrep(c)
	if !ok {
		return Done
	}
	c.io.walk = w
	return lu.walkOn(c)
}

func startWriteAndVerify(lu *LogicalUnit, c *Command) Progress {
	w, ok := lu.writeAndVerifyPrep(c)
	if p, ok := lu.lockWalk(c, w, ok, false); !ok {
		return p
	}
	return lu.started(c, stepWAV, lu.async.StartWrite(c.io.q, c.DataOut, lu.byteOffset(w.lba), true, c.io.tag))
}

func startCompareAndWrite(lu *LogicalUnit, c *Command) Progress {
	w, ok := lu.compareAndWritePrep(c)
	if p, ok := lu.lockWalk(c, w, ok, true); !ok {
		return p
	}
	return lu.walkOn(c)
}
