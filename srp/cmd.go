package srp

import (
	"fmt"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
	"go.uber.org/zap"
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
		c.abortSignaled = true
		select {
		case c.abortDone <- struct{}{}:
		default:
		}
	}
}

// discardAbortSignal drops a wake-up left from an earlier generation, which nobody waited for.
// A task management function may still be about to wait for that generation: waitClaimed
// checks the state word, so the dropped signal only costs it a retry tick. Only a context
// that free signalled looks at the channel: the channel is an object of its own, a cache line
// more per command otherwise.
func (c *cmdCtx) discardAbortSignal() {
	if !c.abortSignaled {
		return
	}
	c.abortSignaled = false
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

func illegalMove(ch *channel, what string) {
	if strictMoves {
		panic("srp: illegal " + what)
	}
	ch.log.Error("internal error: illegal move refused", zap.String("move", what))
}

// setStage moves c to stage to. Small enough to inline, a command changes stage about eight
// times: moves the table allows that do not touch stageSent take the fast path.
func (c *cmdCtx) setStage(to cmdStage) {
	if fastMoves[c.stage]&(1<<to) == 0 {
		c.setStageSlow(to)
		return
	}
	c.stage = to
}

// setStageSent is setStage(stageSent), inline for the one legal move there, from
// stageRespond.
func (c *cmdCtx) setStageSent() {
	if c.stage != stageRespond {
		c.setStageSlow(stageSent)
		return
	}
	ch := c.ch
	c.stage = stageSent
	ch.sent++
	if c.real {
		ch.answered++
	}
}

// setStageNone is setStage(stageNone), which every stage may take, inline.
func (c *cmdCtx) setStageNone() {
	if c.stage == stageSent {
		c.ch.sent--
	}
	c.stage = stageNone
}

// setStageSlow is setStage for the moves that are refused, go back to stageNone from a stage
// beyond the table, or enter or leave stageSent (the channel counts the posted responses).
func (c *cmdCtx) setStageSlow(to cmdStage) {
	if to != stageNone && stageMoves[c.stage]&(1<<to) == 0 {
		illegalMove(c.ch, fmt.Sprintf("command stage %v -> %v (context %d)", c.stage, to, c.idx))
		return
	}
	if c.stage == stageSent {
		c.ch.sent--
	}
	if to == stageSent {
		c.ch.sent++
		if c.real {
			c.ch.answered++
		}
	}
	c.stage = to
}

func (q *ctxQueue) empty() bool    { return q.head == nil }
func (q *ctxQueue) front() *cmdCtx { return q.head }

// push appends c.
func (q *ctxQueue) push(c *cmdCtx) {
	c.next = nil
	if q.tail == nil {
		q.head = c
	} else {
		q.tail.next = c
	}
	q.tail = c
}

// pushFront puts c back at the head (it could not advance after all).
func (q *ctxQueue) pushFront(c *cmdCtx) {
	c.next = q.head
	q.head = c
	if q.tail == nil {
		q.tail = c
	}
}

// pop removes and returns the head, nil when empty.
func (q *ctxQueue) pop() *cmdCtx {
	c := q.head
	if c == nil {
		return nil
	}
	q.head = c.next
	if q.head == nil {
		q.tail = nil
	}
	c.next = nil
	return c
}

// removeIf takes out, in order, every context for which drop is true and hands each to then.
// then may push onto any queue, this one too (finish can start a parked IU that waits for a
// buffer): what it pushes goes after the contexts kept.
func (q *ctxQueue) removeIf(drop func(*cmdCtx) bool, then func(*cmdCtx)) {
	c := q.head
	*q = ctxQueue{}
	var keep ctxQueue
	for c != nil {
		next := c.next
		c.next = nil
		if drop(c) {
			then(c)
		} else {
			keep.push(c)
		}
		c = next
	}
	if keep.head == nil {
		return
	}
	keep.tail.next = q.head
	if q.tail != nil {
		keep.tail = q.tail
	}
	*q = keep
}
