package srp

import (
	"fmt"
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

// strictMoves makes an illegal phase or stage move panic; the package's tests set it, so
// that a move the tables do not allow fails the test that made it. In production the move is
// refused and logged: the channel goes on as well as it can.
var strictMoves = false

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

// fastMoves are the moves of stageMoves that neither enter nor leave stageSent.
var fastMoves = func() (m [256]uint16) {
	for s := range m {
		if cmdStage(s) != stageSent {
			m[s] = stageMoves[s] &^ (1 << stageSent)
		}
	}
	return m
}()
