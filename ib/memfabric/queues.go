package memfabric

import (
	"github.com/srptarget/srptarget/ib"
)

// The queues of a connection end: its send queue, receive queue and completion queue, each a
// ring of slots, and the states its send queue's head can wait in.

type qpState uint8

const (
	qpReady qpState = iota // RTS
	qpError
)

type blockKind uint8

const (
	blockNone  blockKind = iota
	blockRNR             // head SEND found no receive posted at the peer
	blockRetry           // peer does not answer
)

type sendSlot struct {
	wr        ib.SendWR // wr.SGL aliases sges
	sges      []ib.SGE
	inline    []byte
	inlineLen int
}

// slotRing is the slots of a work queue: [head, tail) hold posted work requests, each until
// its completion is polled. The queues below split the range where they stand.
type slotRing[T any] struct {
	slots      []T
	head, tail uint64
}

func newSlotRing[T any](depth int) slotRing[T] { return slotRing[T]{slots: make([]T, depth)} }

func (q *slotRing[T]) slot(i uint64) *T { return &q.slots[i%uint64(len(q.slots))] }
func (q *slotRing[T]) full() bool       { return q.tail-q.head == uint64(len(q.slots)) }

// sendQueue: [head, exec) executed and waiting for their slots to be retired by a polled
// completion; [exec, tail) waiting to execute.
type sendQueue struct {
	slotRing[sendSlot]
	exec uint64
}

type recvSlot struct {
	id   uint64
	sges []ib.SGE
}

// recvQueue: [head, next) consumed and waiting for their completion to be polled;
// [next, tail) posted and free to receive.
type recvQueue struct {
	slotRing[recvSlot]
	next uint64
}

type cqEntry struct {
	c   ib.Completion
	sq  bool   // from the send queue (else the receive queue)
	idx uint64 // the slot it retires when polled
	srq *srq   // a receive of this SRQ: polling it frees a slot there instead
}

// compQueue holds at most one entry per occupied queue slot, so sized SQ+RQ it cannot overrun.
type compQueue struct {
	ring       []cqEntry
	head, tail uint64
}
