package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

func TestWRID(t *testing.T) {
	for _, tt := range []struct{ queue, seq uint64 }{{queueSend, 0}, {queueRecv, 0}, {queueSend, 12345}, {queueRecv, 1<<62 - 1}} {
		q, s := decodeWRID(encodeWRID(tt.queue, tt.seq))
		require.Equal(t, tt.queue, q)
		require.Equal(t, tt.seq, s)
	}
	require.Equal(t, uint64(0x15), encodeWRID(queueRecv, 5))
	for seq := range uint64(8) {
		require.NotEqual(t, uint64(srqTag), encodeWRID(queueRecv, seq)&3, "a QP's own wr_id never reads as an SRQ's")
	}
}

// TestSlotAccounting follows package ib's slot rules: unsignaled send work requests keep their
// slots until a later completion of the queue is polled.
func TestSlotAccounting(t *testing.T) {
	q := newQueues(ib.QPCaps{SendQueueDepth: 4, RecvQueueDepth: 2})
	require.Equal(t, 4, q.sq.free())
	// Three unsignaled RDMA WRITEs and a signaled SEND, as SRP posts a data-in response.
	seqs := []uint64{q.sq.push(100), q.sq.push(101), q.sq.push(102), q.sq.push(103)}
	require.Equal(t, []uint64{0, 1, 2, 3}, seqs)
	require.Equal(t, 0, q.sq.free(), "full until a completion is polled")

	c, err := q.complete(encodeWRID(queueSend, 3), uint32(ib.StatusSuccess), wcSend, 0)
	require.NoError(t, err)
	require.Equal(t, ib.Completion{ID: 103, Status: ib.StatusSuccess, Opcode: ib.OpSend}, c)
	require.Equal(t, 4, q.sq.free(), "the SEND's completion frees the WRITEs' slots too")

	// A refused post gives its slots back.
	q.sq.push(200)
	q.sq.push(201)
	q.sq.unpush(1)
	require.Equal(t, 3, q.sq.free())
	c, err = q.complete(encodeWRID(queueSend, 4), uint32(ib.StatusSuccess), wcRDMAWrite, 0)
	require.NoError(t, err)
	require.Equal(t, ib.Completion{ID: 200, Opcode: ib.OpRDMAWrite}, c)

	// Receives: the slot index wraps around the ring.
	for i := range 5 {
		seq := q.rq.push(uint64(300 + i))
		c, err := q.complete(encodeWRID(queueRecv, seq), uint32(ib.StatusSuccess), wcRecv, uint32(36+i))
		require.NoError(t, err)
		require.Equal(t, ib.Completion{ID: uint64(300 + i), ByteLen: uint32(36 + i), Opcode: ib.OpRecv}, c)
	}
	require.Equal(t, 2, q.rq.free())
}

func TestCompleteErrors(t *testing.T) {
	q := newQueues(ib.QPCaps{SendQueueDepth: 4, RecvQueueDepth: 4})
	q.sq.push(1)
	q.sq.push(2)
	q.rq.push(3)
	// Failed and flushed work requests: opcode and byte_len are undefined, the ID tells.
	c, err := q.complete(encodeWRID(queueSend, 0), uint32(ib.StatusRemoteAccessError), 0xdead, 77)
	require.NoError(t, err)
	require.Equal(t, ib.Completion{ID: 1, Status: ib.StatusRemoteAccessError}, c)
	c, err = q.complete(encodeWRID(queueRecv, 0), uint32(ib.StatusWRFlushError), wcSend, 77)
	require.NoError(t, err)
	require.Equal(t, ib.Completion{ID: 3, Status: ib.StatusWRFlushError}, c)
	c, err = q.complete(encodeWRID(queueSend, 1), uint32(ib.StatusWRFlushError), 0, 0)
	require.NoError(t, err)
	require.Equal(t, ib.Completion{ID: 2, Status: ib.StatusWRFlushError}, c)

	// Completions for work requests that were never posted, or were retired already.
	_, err = q.complete(encodeWRID(queueSend, 1), 0, wcSend, 0)
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	_, err = q.complete(encodeWRID(queueRecv, 9), 0, wcRecv, 0)
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
}
