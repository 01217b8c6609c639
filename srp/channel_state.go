package srp

import (
	"fmt"

	"go.uber.org/zap"
)

// chPhase is where a channel is in its life. It only moves forward, and only through
// setPhase, which checks the move against phaseMoves. docs/design.md draws it.
type chPhase uint8

const (
	// phaseLive: serving commands.
	phaseLive chPhase = iota
	// phaseDraining: the target shuts down. SRP_T_LOGOUT is sent, new commands are answered
	// BUSY, and the channel closes once the commands it works on are done.
	phaseDraining
	// phaseClosing: disconnected (the queue pair is in the error state). Every work request
	// still posted comes back as a completion (most of them flushed); the channel waits for
	// them and for the commands in the workers' hands, then tears down.
	phaseClosing
	// phaseAbandoned: closing, and no flush completion will come (the device was removed, a
	// post or the completion queue failed, or the drain deadline passed). The queue pair must
	// be closed before the contexts its work requests name can be released.
	phaseAbandoned
	// phaseQPClosed: the queue pair is closed; nothing of the channel's memory is in use by
	// the device. Only the workers' commands are waited for.
	phaseQPClosed
	// phaseClosed: torn down (teardown).
	phaseClosed
)

var phaseNames = [...]string{"live", "draining", "closing", "abandoned", "qp-closed", "closed"}

func (p chPhase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// phaseMoves lists the phases each phase may move to (bit i: phase i).
var phaseMoves = [...]uint8{
	phaseLive:      1<<phaseDraining | 1<<phaseClosing,
	phaseDraining:  1 << phaseClosing,
	phaseClosing:   1<<phaseAbandoned | 1<<phaseClosed,
	phaseAbandoned: 1 << phaseQPClosed,
	phaseQPClosed:  1 << phaseClosed,
	phaseClosed:    0,
}

// setPhase moves the channel to phase p. The workers and the task management goroutine read
// whether the channel is closing (closingNow) without a lock.
func (ch *channel) setPhase(p chPhase) {
	if phaseMoves[ch.phase]&(1<<p) == 0 {
		illegalMove(ch, fmt.Sprintf("channel phase %v -> %v", ch.phase, p))
		return
	}
	ch.phase = p
	if p >= phaseClosing {
		ch.closing.Store(true)
	}
}

// closed reports whether the channel is closing: it takes no new work and its queue pair is
// (being) disconnected.
func (ch *channel) closed() bool { return ch.phase >= phaseClosing }

// flushesExpected reports whether every posted work request will still come back as a
// completion: false once the channel is abandoned.
func (ch *channel) flushesExpected() bool { return ch.phase < phaseAbandoned }

// qpOpen reports whether the queue pair is still open (completions and events to poll).
func (ch *channel) qpOpen() bool { return ch.phase < phaseQPClosed }

// strictMoves makes an illegal phase or stage move panic; the package's tests set it, so
// that a move the tables do not allow fails the test that made it. In production the move is
// refused and logged: the channel goes on as well as it can.
var strictMoves = false

func illegalMove(ch *channel, what string) {
	if strictMoves {
		panic("srp: illegal " + what)
	}
	ch.log.Error("internal error: illegal move refused", zap.String("move", what))
}

// cmdStage is where a context is in its life; only the channel goroutine reads and writes it
// (a worker owns the context while it is in stageExec or stageTMF). It moves only through
// setStage, checked against stageMoves; docs/design.md draws the stages.
type cmdStage uint8

const (
	stageNone      cmdStage = iota // free, or just received
	stageNeedBuf                   // waiting for a data buffer (channel's buffer wait queue)
	stageTableRead                 // RDMA READ of an external descriptor table to post or in flight
	stageDataRead                  // RDMA READs of data-out to post or in flight
	stageWaitTMF                   // data ready, held while task management of the channel runs
	stageExec                      // with a worker, in the logical unit
	stageTMF                       // with the task management goroutine
	stageRespond                   // response to post (maybe waiting for send-queue slots)
	stageSent                      // response posted, waiting for the SEND completion
	numStages
)

var stageNames = [...]string{"none", "need-buf", "table-read", "data-read", "wait-tmf", "exec", "tmf", "respond", "sent"}

func (s cmdStage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// stageMoves lists the stages each stage may move to (bit i: stage i). Every stage may go back
// to stageNone: finish releases a context wherever it is (an abort, a failed work request,
// closing). One entry per value of a cmdStage, so that indexing needs no bounds check; the
// values from numStages on are no stage, and setStageSlow lets them go to stageNone only.
var stageMoves = [256]uint16{
	stageNone:      1<<stageNone | 1<<stageNeedBuf | 1<<stageRespond | 1<<stageExec | 1<<stageWaitTMF | 1<<stageTMF,
	stageNeedBuf:   1<<stageNone | 1<<stageTableRead | 1<<stageDataRead | 1<<stageExec | 1<<stageWaitTMF | 1<<stageRespond,
	stageTableRead: 1<<stageNone | 1<<stageDataRead | 1<<stageExec | 1<<stageWaitTMF | 1<<stageRespond,
	stageDataRead:  1<<stageNone | 1<<stageExec | 1<<stageWaitTMF,
	stageWaitTMF:   1<<stageNone | 1<<stageExec,
	stageExec:      1<<stageNone | 1<<stageRespond,
	stageTMF:       1<<stageNone | 1<<stageRespond,
	stageRespond:   1<<stageNone | 1<<stageSent,
	stageSent:      1 << stageNone,
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

// fastMoves are the moves of stageMoves that neither enter nor leave stageSent.
var fastMoves = func() (m [256]uint16) {
	for s := range m {
		if cmdStage(s) != stageSent {
			m[s] = stageMoves[s] &^ (1 << stageSent)
		}
	}
	return m
}()

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

// ctxQueue is a FIFO of contexts linked through cmdCtx.next: the commands waiting for a data
// buffer, for send-queue slots, or for the channel's task management to finish. A context is
// in at most one queue at a time.
type ctxQueue struct {
	head, tail *cmdCtx
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
