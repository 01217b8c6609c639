package verbs

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
)

// Slot accounting. Package ib's contract says a work request occupies its queue slot until its
// completion is polled, and an unsignaled send-queue work request until a later completion of
// the same queue is polled. Providers differ (rxe frees a send slot when the work request is
// done, mlx5 when a later completion is polled), so the accounting is kept here, in Go, the
// same for every provider. It also guarantees that the CQ, sized send+receive depth, never
// overruns: every outstanding work request produces at most one completion.
//
// To know which slot a completion retires, the wr_id handed to verbs is not the caller's ID
// but a sequence number per queue with the queue in the low bit; the caller's ID is kept in a
// ring indexed by that number. This also tells send from receive completions when the status
// is an error, where ibv_wc.opcode is undefined.

const (
	queueSend = 0
	queueRecv = 1
)

// Bit 1 is always clear: a shared receive queue's wr_ids set it (srqTag).
func encodeWRID(queue, seq uint64) uint64 { return seq<<2 | queue }

func decodeWRID(w uint64) (queue, seq uint64) { return w & 1, w >> 2 }

// SRQ receive wr_ids: srqTag in the low two bits (encodeWRID's queue bit is queueRecv, and bit
// 1 tells it from a QP's own sequence numbers, which are even in the send queue and odd with
// bit 1 set or not in the receive queue: so a QP with an SRQ never posts receives of its own),
// the SRQ's number in bits 40 and up, the slot in between.
const (
	srqTag   = 3
	srqShift = 40
)

// ring is one queue's outstanding work requests: sequence numbers [head, tail).
type ring struct {
	ids        []uint64
	head, tail uint64
}

func newRing(depth int) ring { return ring{ids: make([]uint64, depth)} }

func (r *ring) free() int { return len(r.ids) - int(r.tail-r.head) }

// push records a work request about to be posted and returns its sequence number. The caller
// has checked free().
func (r *ring) push(id uint64) uint64 {
	seq := r.tail
	r.ids[seq%uint64(len(r.ids))] = id
	r.tail++
	return seq
}

// unpush forgets the last n pushes (work requests the provider refused).
func (r *ring) unpush(n int) { r.tail -= uint64(n) }

// retire frees the slot of seq and of everything before it, and returns the caller's ID.
func (r *ring) retire(seq uint64) (uint64, bool) {
	if seq < r.head || seq >= r.tail {
		return 0, false
	}
	r.head = seq + 1
	return r.ids[seq%uint64(len(r.ids))], true
}

// enum ibv_wc_opcode values that can appear on an RC QP used as this package uses it.
const (
	wcSend      = 0
	wcRDMAWrite = 1
	wcRDMARead  = 2
	wcRecv      = 128
)

// queues is the send and receive accounting of one QP.
type queues struct {
	sq, rq ring
}

func newQueues(caps ib.QPCaps) queues {
	return queues{sq: newRing(caps.SendQueueDepth), rq: newRing(caps.RecvQueueDepth)}
}

// complete turns the fields of one struct ibv_wc into an ib.Completion and retires its slot.
// An error means a completion this QP never asked for: a bug, not a condition to recover from.
func (q *queues) complete(wrID uint64, status, opcode, byteLen uint32) (ib.Completion, error) {
	queue, seq := decodeWRID(wrID)
	r := &q.sq
	if queue == queueRecv {
		r = &q.rq
	}
	id, ok := r.retire(seq)
	if !ok {
		return ib.Completion{}, fmt.Errorf("completion with wr_id %#x (queue %d, sequence %d) outside the outstanding range [%d, %d): %w",
			wrID, queue, seq, r.head, r.tail, ib.ErrInvalidArgument)
	}
	c := ib.Completion{ID: id, Status: ib.Status(status)}
	if c.Status != ib.StatusSuccess {
		return c, nil
	}
	switch opcode {
	case wcSend:
		c.Opcode = ib.OpSend
	case wcRDMAWrite:
		c.Opcode = ib.OpRDMAWrite
	case wcRDMARead:
		c.Opcode = ib.OpRDMARead
	case wcRecv:
		c.Opcode = ib.OpRecv
		c.ByteLen = byteLen
	}
	return c, nil
}
