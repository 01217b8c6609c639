package srp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

// recordConn is an ib.Conn that records the chains posted to its send queue, the IDs of each
// PostRecv's work requests, and the order of the two kinds of post ("recv", "send").
type recordConn struct {
	ibtest.NopConn
	posts    [][]ib.SendWR
	recvs    [][]uint64
	order    []string
	recvFail error
}

func (r *recordConn) PostRecv(wrs []ib.RecvWR) (int, error) {
	if r.recvFail != nil {
		return 0, r.recvFail
	}
	ids := make([]uint64, len(wrs))
	for i := range wrs {
		ids[i] = wrs[i].ID
	}
	r.recvs = append(r.recvs, ids)
	r.order = append(r.order, "recv")
	return len(wrs), nil
}

func (r *recordConn) PostSend(wrs []ib.SendWR) (int, error) {
	r.order = append(r.order, "send")
	chain := make([]ib.SendWR, len(wrs))
	for i, wr := range wrs {
		wr.SGL = append([]ib.SGE(nil), wr.SGL...)
		chain[i] = wr
	}
	r.posts = append(r.posts, chain)
	return len(wrs), nil
}

// TestPostBatches: the chains of several commands queued in one pass go out in one PostSend,
// in order, each work request with its own scatter/gather entry; a chain that does not fit in
// what is left of the batch first flushes the batch; the steady state allocates nothing.
func TestPostBatches(t *testing.T) {
	mr := &fakeMR{buf: make([]byte, 1<<16)}
	rec := &recordConn{}
	ch := testChannel(rec, 4)
	ctxs := make([]cmdCtx, 3)
	chain := func(c int, n int) []ib.SendWR {
		var wrs []ib.SendWR
		for i := 0; i < n; i++ {
			op := ib.OpRDMAWrite
			if i == n-1 {
				op = ib.OpSend
			}
			wrs = append(wrs, ib.SendWR{ID: idCmd | uint64(c), Op: op, Signaled: i == n-1,
				SGL: []ib.SGE{{MR: mr, Offset: uint64(c*1000 + i), Length: uint32(10 + i)}}})
		}
		return wrs
	}
	want0, want1, want2 := chain(0, 2), chain(1, 1), chain(2, 3)
	ch.post(&ctxs[0], want0)
	ch.post(&ctxs[1], want1)
	require.Empty(t, rec.posts, "nothing posted before the pass ends")
	// 3 work requests do not fit after 3 of 4: the batch goes first.
	ch.post(&ctxs[2], want2)
	require.Equal(t, [][]ib.SendWR{append(append([]ib.SendWR{}, want0...), want1...)}, rec.posts)
	ch.flushSends()
	require.Len(t, rec.posts, 2)
	require.Equal(t, want2, rec.posts[1])
	ch.flushSends()
	require.Len(t, rec.posts, 2, "an empty batch posts nothing")
	require.Equal(t, 100-6, ch.sqFree)
	require.Equal(t, 3, ch.sendBatches)
	require.Equal(t, []int{2, 1, 3}, []int{ctxs[0].batchWRs, ctxs[1].batchWRs, ctxs[2].batchWRs})
	st := ch.t.Stats()
	require.Equal(t, uint64(2), st.SendPosts)
	require.Equal(t, uint64(6), st.SendWRs)

	// Steady state: queueing into the batch allocates nothing (the recording conn does, so
	// measure post alone and empty the batch by hand).
	allocs := testing.AllocsPerRun(100, func() {
		ch.post(&ctxs[0], want0)
		ch.post(&ctxs[1], want1)
		ch.batch, ch.batchSGEs = ch.batch[:0], ch.batchSGEs[:0]
	})
	require.Zero(t, allocs)
}

// TestRecvRepostBatches: the receive buffers a pass gives back are posted together, with one
// PostRecv, and before the PostSend of the responses that grant their credits; they count as
// posted from the moment they are queued; a failed PostRecv closes the channel and forgets
// them; a channel closed without flushes drops the queued ones.
func TestRecvRepostBatches(t *testing.T) {
	newCh := func(rec *recordConn) *channel {
		ch := testChannel(rec, 4)
		ch.nctx = 1
		ch.initCtxs()
		return ch
	}
	rec := &recordConn{}
	ch := newCh(rec)
	ch.repost(2)
	ch.repost(0)
	ch.repost(-1) // a context without a receive buffer: nothing
	require.Equal(t, 2, ch.recvPosted, "counted as posted when queued")
	require.Empty(t, rec.recvs, "nothing posted before the pass ends")
	ch.post(ch.ctxs.at(0), []ib.SendWR{{ID: idCmd | idLast, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{Length: 36}}}})
	ch.flushSends()
	require.Equal(t, [][]uint64{{idRecv | 2, idRecv | 0}}, rec.recvs, "one PostRecv for the pass")
	require.Equal(t, []string{"recv", "send"}, rec.order, "receives before the responses granting their credits")
	ch.flushSends()
	require.Len(t, rec.recvs, 1, "nothing queued, nothing posted")
	require.Equal(t, 2, ch.recvPosted)

	allocs := testing.AllocsPerRun(100, func() {
		ch.repost(1)
		ch.repost(3)
		ch.rq.q = ch.rq.q[:0]
	})
	require.Zero(t, allocs)

	// A failed post: the channel is abandoned and the receives not posted are not counted.
	rec = &recordConn{recvFail: ib.ErrDeviceRemoved}
	ch = newCh(rec)
	ch.repost(1)
	ch.repost(3)
	ch.flushSends()
	require.Zero(t, ch.recvPosted)
	require.Empty(t, ch.rq.q)
	require.Equal(t, phaseAbandoned, ch.phase)

	// Closed without flushes: the queued receives are dropped, never posted.
	rec = &recordConn{}
	ch = newCh(rec)
	ch.repost(1)
	ch.abandon("test")
	require.Zero(t, ch.recvPosted)
	require.Empty(t, rec.recvs)
	ch.repost(2)
	require.Empty(t, ch.rq.q, "a closed channel re-posts nothing")
}

// testChannel is a channel over conn with batches of batch work requests and a receive queue
// of its own of 4 buffers, outside any target's groups.
func testChannel(conn ib.Conn, batch int) *channel {
	ch := &channel{t: &Target{lim: Limits{}.withDefaults()}, conn: conn, log: zap.NewNop(), sess: &session{}}
	ch.sqFree = 100
	ch.timer.t = time.NewTimer(time.Hour)
	ch.batch, ch.batchSGEs, ch.batchMax = make([]ib.SendWR, 0, batch), make([]ib.SGE, 0, batch), batch
	ch.nrecv = 4
	ch.rq = &recvRing{}
	ch.rq.init(&fakeMR{buf: make([]byte, 4*512)}, make([]byte, 4*512), ch.nrecv, 0, 512, 256)
	return ch
}
