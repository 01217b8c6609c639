package srp

import (
	"sync/atomic"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// Command context states. The state lives in the low byte of cmdCtx.sg, with a generation
// number above it that changes every time the context starts a new IU, so that task
// management running on another goroutine can claim a command with one compare-and-swap and
// never claims the next command that reused the context.
const (
	ctxFree         uint64 = iota
	ctxCmd                 // an SRP_CMD in progress: abortable
	ctxTMF                 // an SRP_TSK_MGMT in progress
	ctxAbortedTMF          // claimed by task management: ends without a response; the claimer waits
	ctxAbortedLocal        // aborted by the logical unit (nexus loss, another nexus's CLEAR TASK SET)
	ctxResponded           // response posted: no longer abortable
)

func sgState(v uint64) uint64           { return v & 0xFF }
func sgNext(v uint64, st uint64) uint64 { return v&^0xFF | st }

// cmdCtx is the preallocated state of one IU (SRP_CMD or SRP_TSK_MGMT) from its receive to
// its response's send completion. A channel has 2 × credits of them: a response's context is
// busy until its SEND completes, and the initiator may already have sent the next IU into the
// receive buffer the response gave back.
type cmdCtx struct {
	ch  *channel
	idx uint32

	// Read by task management on other goroutines.
	sg        atomic.Uint64 // generation << 8 | state
	seq       atomic.Uint64 // arrival order (Target.seq), so that task management spares later IUs
	tag       atomic.Uint64
	lun       atomic.Uint64
	lu        atomic.Pointer[scsi.LogicalUnit]
	abortDone chan struct{} // signalled when a ctxAbortedTMF context is released

	// Owned by the channel goroutine (and the worker while stageExec / stageTMF).
	stage     cmdStage
	recv      int32 // receive buffer holding the IU, -1 when none
	out, in   iu.DataBuf
	buf       poolBuf // data buffer
	table     poolBuf // external descriptor table
	batchWRs  int     // work requests of the batch in flight (0: none)
	real      bool    // a command the target works on (not answered by the transport)
	xportFail bool    // answered by the transport: no residuals
	lunMap    *scsi.LUNMap
	mapping   *scsi.Mapping     // lunMap's mapping of the command's LUN, nil when none
	luHold    *scsi.LogicalUnit // the logical unit this command holds (Hold), released when its response is posted or in finish
	cmd       scsi.Command
	tm        tmReq
	next      *cmdCtx // wait lists
	waitSince int64   // monotonic nanoseconds, buffer waits
	sendOff   uint64  // send buffer offset in the channel's region
	// Per-logical-unit statistics (scsi.LUStats): the unit the command counts against (nil:
	// none, or not an SRP_CMD), when its IU arrived (channel.pollNow), its operation class,
	// and the data-in bytes its response carried.
	statLU  *scsi.LogicalUnit
	arrived int64
	class   scsi.OpClass
	written uint32
}

// tmReq is a task management request and its outcome.
type tmReq struct {
	seq     uint64 // arrival number: commands that arrived later are not affected
	fn      iu.TskMgmtFunc
	lun     uint64
	taskTag iu.Tag
	code    iu.TskMgmtRspCode
}

// state returns the current state.
func (c *cmdCtx) state() uint64 { return sgState(c.sg.Load()) }

// activate starts a new generation in state st. The arrival number, tag and LUN are published
// before the state, so a claimer that sees the state sees them.
func (c *cmdCtx) activate(st uint64, seq uint64, tag iu.Tag, lun uint64, lu *scsi.LogicalUnit) {
	c.seq.Store(seq)
	c.tag.Store(uint64(tag))
	c.lun.Store(lun)
	c.lu.Store(lu)
	v := c.sg.Load()
	c.sg.Store((v>>8+1)<<8 | st)
}

// free moves the context to ctxFree, waking the task management function that claimed it, if
// one did (waitClaimed).
func (c *cmdCtx) free() {
	v := c.sg.Swap(sgNext(c.sg.Load(), ctxFree))
	if sgState(v) == ctxAbortedTMF {
		select {
		case c.abortDone <- struct{}{}:
		default:
		}
	}
}

// discardAbortSignal drops a wake-up left from an earlier generation, which nobody waited for.
// A task management function may still be about to wait for that generation: waitClaimed
// checks the state word, so the dropped signal only costs it a retry tick.
func (c *cmdCtx) discardAbortSignal() {
	if len(c.abortDone) == 0 {
		return // nearly always: without the runtime's non-blocking receive
	}
	select {
	case <-c.abortDone:
	default:
	}
}

// transition moves from state from to state to; false when someone else moved it first.
func (c *cmdCtx) transition(from, to uint64) bool {
	v := c.sg.Load()
	if sgState(v) != from {
		return false
	}
	return c.sg.CompareAndSwap(v, sgNext(v, to))
}

// scsiAttr maps the SRP task attribute to SAM's; false for reserved values.
func scsiAttr(a iu.TaskAttr) (scsi.TaskAttribute, bool) {
	switch a {
	case iu.TaskAttrSimple:
		return scsi.TaskSimple, true
	case iu.TaskAttrHeadOfQueue:
		return scsi.TaskHeadOfQueue, true
	case iu.TaskAttrOrdered:
		return scsi.TaskOrdered, true
	case iu.TaskAttrACA:
		return scsi.TaskACA, true
	}
	return 0, false
}

// dataBuf returns the direction of c that moves data (SRP_CMDs with both are refused).
func (c *cmdCtx) dataBuf() *iu.DataBuf {
	if c.out.Present() {
		return &c.out
	}
	return &c.in
}
