package ibtest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// SharedFabric is a Fabric whose target side can accept connections with shared queues
// (ib.SharedQueues): the connections of one test all reach the same target device.
type SharedFabric interface {
	Fabric
	// TargetQueues is the shared-queue maker of the target device of test t.
	TargetQueues(t *testing.T) ib.SharedQueues
	// ConnectShared is Connect, with share applied to the target side's AcceptParams before
	// Accept (it sets CQ, SRQ, OnEvent, and QP.RecvQueueDepth 0 with an SRQ). Both
	// EventEstablished are consumed.
	ConnectShared(t *testing.T, caps func(ib.DeviceLimits) ib.QPCaps, share func(*ib.AcceptParams)) *Pair
}

// RunShared runs the shared-queue cases as subtests of t.
func RunShared(t *testing.T, f SharedFabric) {
	runCases(t, f, []suiteCase[SharedFabric]{
		{"SharedCQ", testSharedCQ},
		{"SendCQ", testSendCQ},
		{"SRQ", testSRQ},
		{"SRQNotFlushed", testSRQNotFlushed},
		{"SRQRNR", testSRQRNR},
		{"SharedClose", testSharedClose},
		{"CompChannel", testCompChannel},
	})
}

// sharedQueues makes a CQ and an SRQ (nil unless srq) on the target device; the CQ holds
// every completion the tests can have outstanding.
func sharedQueues(t *testing.T, f SharedFabric, srq bool) (ib.CQ, ib.SRQ) {
	t.Helper()
	sq := f.TargetQueues(t)
	lim := sq.SharedLimits()
	require.GreaterOrEqual(t, lim.CompVectors, 1)
	cq, err := newCQ(t, sq, 256, lim.CompVectors) // a vector past the count wraps round
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cq.Close()) }) // after the connections' closes
	if !srq {
		return cq, nil
	}
	require.Positive(t, lim.MaxSRQWR, "the device has no SRQ")
	s, err := sq.NewSRQ(8, 1)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return cq, s
}

// twoSharing connects two pairs whose target sides share the CQ and the SRQ (nil unless srq)
// of sharedQueues.
func twoSharing(t *testing.T, f SharedFabric, srq bool) (ib.CQ, ib.SRQ, *Pair, *Pair) {
	t.Helper()
	cq, s := sharedQueues(t, f, srq)
	a := f.ConnectShared(t, Caps, shareWith(cq, s, nil))
	b := f.ConnectShared(t, Caps, shareWith(cq, s, nil))
	return cq, s, a, b
}

func shareWith(cq ib.CQ, srq ib.SRQ, onEvent func()) func(*ib.AcceptParams) {
	return func(ap *ib.AcceptParams) {
		ap.CQ, ap.SRQ, ap.OnEvent = cq, srq, onEvent
		if srq != nil {
			ap.QP.RecvQueueDepth = 0
		}
	}
}

// pollCQ returns exactly n completions of q, waiting on Ready (armed) between drains.
func pollCQ(t *testing.T, q ib.CQ, n int) []ib.Completion {
	t.Helper()
	// A drain that finds nothing arms q and drains again, for what came before the arm.
	poll := func(wcs []ib.Completion) (int, error) {
		if k, err := q.Poll(wcs); k > 0 || err != nil {
			return k, err
		}
		require.NoError(t, q.Arm())
		if k, err := q.Poll(wcs); k > 0 {
			return k, err
		}
		return 0, nil
	}
	return collect(t, n, poll, func(out []ib.Completion, deadline <-chan time.Time) {
		select {
		case <-deadline:
			t.Fatalf("CQ: %d of %d completions within %v: %+v", len(out), n, WaitLimit, out)
		default:
		}
		cqEvents(t, q, WaitLimit, true)
	})
}

// channels are the completion channels of the CQs newCQ made.
var channels sync.Map // ib.CQ -> ib.CompChannel

// newCQ makes a CQ of depth entries on a completion channel of its own, closed at the end of
// the test (after the CQ, whose close the caller registers after this returns).
func newCQ(t *testing.T, sq ib.SharedQueues, depth, vector int) (ib.CQ, error) {
	t.Helper()
	ch, err := sq.NewCompChannel()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ch.Close()) })
	cq, err := sq.NewCQ(ch, depth, vector)
	if err == nil {
		channels.Store(cq, ch)
	}
	return cq, err
}

func channelOf(t *testing.T, q ib.CQ) ib.CompChannel {
	ch, ok := channels.Load(q)
	require.True(t, ok, "CQ not made by newCQ")
	return ch.(ib.CompChannel)
}

// cqEvents serves q's completion channel for up to d (until the first event if first) and
// returns the CQs whose events it took.
func cqEvents(t *testing.T, q ib.CQ, d time.Duration, first bool) []ib.CQ {
	t.Helper()
	return serveEvents(t, channelOf(t, q), d, func(got []ib.CQ) bool { return first && len(got) > 0 })
}

// serveEvents serves ch for up to d, or until enough says the CQs whose events it took so far
// are enough, and returns them.
func serveEvents(t *testing.T, ch ib.CompChannel, d time.Duration, enough func([]ib.CQ) bool) []ib.CQ {
	t.Helper()
	var over atomic.Bool
	tm := time.AfterFunc(d, func() { over.Store(true); ch.Interrupt() })
	defer tm.Stop()
	var got []ib.CQ
	require.NoError(t, ch.Serve(nil, func(fired []ib.CQ) bool {
		got = append(got, fired...)
		return over.Load() || enough(got)
	}))
	return got
}

func requireCQQuiet(t *testing.T, q ib.CQ) {
	t.Helper()
	requireQuiet(t, q.Poll)
}

func qpn(t *testing.T, c ib.Conn) uint32 {
	q, ok := c.(ib.QPNumberer)
	require.True(t, ok, "%T tells no QP number", c)
	return q.QPNum()
}

// byQP splits completions by QP number, keeping their order.
func byQP(wcs []ib.Completion) map[uint32][]ib.Completion {
	out := map[uint32][]ib.Completion{}
	for _, wc := range wcs {
		q := wc.QPNum
		wc.QPNum = 0
		out[q] = append(out[q], wc)
	}
	return out
}

// testSharedCQ: two connections on one CQ: both queues of both QPs complete there, named by
// QP number, each queue in posting order; the Conn's own polling and arming are refused; Arm
// signals Ready once for the next completion and only then.
func testSharedCQ(t *testing.T, f SharedFabric) {
	cq, _, a, b := twoSharing(t, f, false)
	require.NotEqual(t, qpn(t, a.T), qpn(t, b.T))
	_, err := a.T.PollCompletions(make([]ib.Completion, 1))
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	if arm, ok := a.T.(ib.NotifyArmer); ok {
		require.ErrorIs(t, arm.ArmNotify(true), ib.ErrInvalidArgument)
	}

	tmr := register(t, f, a.TPD, 4096, ib.AccessLocalWrite)
	amr := register(t, f, a.IPD, 4096, ib.AccessLocalWrite)
	bmr := register(t, f, b.IPD, 4096, ib.AccessLocalWrite)
	postRecv(t, a.T, recvs(tmr, 64, 100, 101)...)
	postRecv(t, b.T, ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: tmr, Offset: 2048, Length: 64}}})
	copy(amr.Bytes(), "from-a")
	copy(bmr.Bytes(), "from-b")
	postSend(t, a.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: amr, Length: 6}}})
	postSend(t, b.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: bmr, Length: 6}}})
	postSend(t, a.I, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: amr, Length: 4}}})
	require.Len(t, Poll(t, a.I, 2), 2)
	require.Len(t, Poll(t, b.I, 1), 1)
	got := byQP(pollCQ(t, cq, 3))
	require.Equal(t, []ib.Completion{Recvd(100, 6), Recvd(101, 4)}, got[qpn(t, a.T)])
	require.Equal(t, []ib.Completion{Recvd(100, 6)}, got[qpn(t, b.T)])
	require.Equal(t, []byte("from-a"), tmr.Bytes()[:6])
	require.Equal(t, []byte("from-b"), tmr.Bytes()[2048:2054])

	// Sends of both target sides, unsignaled then signaled: one completion each.
	postRecv(t, a.I, recvs(amr, 64, 100)...)
	postRecv(t, b.I, recvs(bmr, 64, 100)...)
	copy(tmr.Bytes()[1024:], "rsp")
	for _, p := range []*Pair{a, b} {
		postSend(t, p.T,
			ib.SendWR{ID: 7, Op: ib.OpRDMAWrite, SGL: nil, RemoteAddr: 0, RKey: 0},
			ib.SendWR{ID: 8, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 1024, Length: 3}}})
	}
	require.Equal(t, []ib.Completion{Recvd(100, 3)}, Poll(t, a.I, 1))
	require.Equal(t, []ib.Completion{Recvd(100, 3)}, Poll(t, b.I, 1))
	got = byQP(pollCQ(t, cq, 2))
	require.Equal(t, []ib.Completion{OK(8, ib.OpSend)}, got[qpn(t, a.T)])
	require.Equal(t, []ib.Completion{OK(8, ib.OpSend)}, got[qpn(t, b.T)])

	// Arming: no event before a completion; the next one raises one.
	cqEvents(t, cq, quiet, false) // what earlier arms raised
	require.NoError(t, cq.Arm())
	requireCQQuiet(t, cq)
	require.Empty(t, cqEvents(t, cq, quiet, false), "an event with no completion")
	postRecv(t, b.T, ib.RecvWR{ID: 101, SGL: []ib.SGE{{MR: tmr, Offset: 3072, Length: 64}}})
	postSend(t, b.I, ib.SendWR{ID: 3, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: bmr, Length: 2}}},
		ib.SendWR{ID: 4, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: bmr, Length: 2}}})
	postRecv(t, b.T, ib.RecvWR{ID: 102, SGL: []ib.SGE{{MR: tmr, Offset: 3584, Length: 64}}})
	require.Equal(t, []ib.CQ{cq}, cqEvents(t, cq, WaitLimit, true), "an armed CQ's next completion raises one event, naming it")
	require.Len(t, Poll(t, b.I, 2), 2)
	got = byQP(pollCQ(t, cq, 2))
	require.Equal(t, []ib.Completion{Recvd(101, 2), Recvd(102, 2)}, got[qpn(t, b.T)])
	require.Empty(t, cqEvents(t, cq, quiet, false), "a second event without a new arm")
}

// testSRQ: the receives of one SRQ serve two QPs in posting order, each completion on the
// shared CQ naming the QP that took it; the QP's own PostRecv is refused; a receive holds its
// slot until its completion is polled.
func testSRQ(t *testing.T, f SharedFabric) {
	cq, srq, a, b := twoSharing(t, f, true)
	tmr := register(t, f, a.TPD, 8*256, ib.AccessLocalWrite)
	amr := register(t, f, a.IPD, 4096, ib.AccessLocalWrite)
	bmr := register(t, f, b.IPD, 4096, ib.AccessLocalWrite)
	_, err := a.T.PostRecv(recvs(tmr, 256, 1))
	require.ErrorIs(t, err, ib.ErrInvalidArgument)

	n, err := srq.PostRecv(recvs(tmr, 256, 100, 101, 102))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	copy(amr.Bytes(), "aaaa")
	copy(bmr.Bytes(), "bbbbbb")
	postSend(t, a.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: amr, Length: 4}}})
	require.Len(t, Poll(t, a.I, 1), 1)
	postSend(t, b.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: bmr, Length: 6}}})
	require.Len(t, Poll(t, b.I, 1), 1)
	postSend(t, a.I, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: amr, Length: 2}}})
	require.Len(t, Poll(t, a.I, 1), 1)
	wcs := pollCQ(t, cq, 3)
	want := []struct {
		qp uint32
		wc ib.Completion
	}{{qpn(t, a.T), Recvd(100, 4)}, {qpn(t, b.T), Recvd(101, 6)}, {qpn(t, a.T), Recvd(102, 2)}}
	for i, w := range want {
		require.Equal(t, w.qp, wcs[i].QPNum, "completion %d", i)
		wcs[i].QPNum = 0
		require.Equal(t, w.wc, wcs[i], "completion %d", i)
	}
	require.Equal(t, []byte("aaaa"), tmr.Bytes()[:4])
	require.Equal(t, []byte("bbbbbb"), tmr.Bytes()[256:262])
	require.Equal(t, []byte("aa"), tmr.Bytes()[512:514])

	// Slots: 8 posted fill the SRQ; a consumed receive keeps its slot until polled.
	n, err = srq.PostRecv(recvs(tmr, 256, 100, 101, 102, 103, 104, 105, 106, 107))
	require.NoError(t, err)
	require.Equal(t, 8, n)
	n, err = srq.PostRecv(recvs(tmr, 256, 108))
	require.ErrorIs(t, err, ib.ErrQueueFull)
	require.Zero(t, n)
	postSend(t, b.I, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: bmr, Length: 1}}})
	require.Len(t, Poll(t, b.I, 1), 1)
	n, err = srq.PostRecv(recvs(tmr, 256, 108))
	require.ErrorIs(t, err, ib.ErrQueueFull, "consumed, not polled: still holds its slot")
	require.Zero(t, n)
	wcs = pollCQ(t, cq, 1)
	require.Equal(t, qpn(t, b.T), wcs[0].QPNum)
	n, err = srq.PostRecv(recvs(tmr, 256, 108))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// testSRQNotFlushed: a QP of the SRQ that goes to the error state flushes its own send queue
// and nothing of the SRQ, whose receives still serve the other QP.
func testSRQNotFlushed(t *testing.T, f SharedFabric) {
	cq, srq, a, b := twoSharing(t, f, true)
	tmr := register(t, f, a.TPD, 4*256, ib.AccessLocalWrite)
	bmr := register(t, f, b.IPD, 4096, ib.AccessLocalWrite)
	n, err := srq.PostRecv(recvs(tmr, 256, 100, 101))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	// A's target side sends into an initiator with no receive posted (RNR, retried for ever),
	// then disconnects: the SEND is flushed, the SRQ is not. The peer gets the DREQ; A's own
	// EventDisconnected waits on verbs for the peer's answer, which this peer never sends.
	postSend(t, a.T, ib.SendWR{ID: 9, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 768, Length: 8}}})
	require.NoError(t, a.T.Disconnect())
	WaitEvent(t, a.I, ib.EventDisconnected)
	wcs := pollCQ(t, cq, 1)
	require.Equal(t, qpn(t, a.T), wcs[0].QPNum)
	require.Equal(t, uint64(9), wcs[0].ID)
	require.Contains(t, []ib.Status{ib.StatusWRFlushError, ib.StatusTransportRetryExceeded, ib.StatusRNRRetryExceeded}, wcs[0].Status)
	requireCQQuiet(t, cq)

	copy(bmr.Bytes(), "still")
	postSend(t, b.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: bmr, Length: 5}}})
	require.Equal(t, []ib.Completion{OK(1, ib.OpSend)}, Poll(t, b.I, 1))
	wcs = pollCQ(t, cq, 1)
	require.Equal(t, qpn(t, b.T), wcs[0].QPNum)
	wcs[0].QPNum = 0
	require.Equal(t, Recvd(100, 5), wcs[0], "the SRQ's oldest receive, not flushed by A's error")
}

// testSRQRNR: a SEND to a QP whose SRQ is empty waits (RNR, retried for ever) until a receive
// is posted to the SRQ; connection events of a shared-queue QP call OnEvent and signal Ready.
func testSRQRNR(t *testing.T, f SharedFabric) {
	cq, srq := sharedQueues(t, f, true)
	var events atomic.Int32
	a := f.ConnectShared(t, Caps, shareWith(cq, srq, func() { events.Add(1) }))
	tmr := register(t, f, a.TPD, 256, ib.AccessLocalWrite)
	amr := register(t, f, a.IPD, 4096, ib.AccessLocalWrite)
	copy(amr.Bytes(), "late")
	postSend(t, a.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: amr, Length: 4}}})
	requireNoCompletions(t, a.I)
	requireCQQuiet(t, cq)
	n, err := srq.PostRecv(recvs(tmr, 256, 100))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []ib.Completion{OK(1, ib.OpSend)}, Poll(t, a.I, 1))
	wcs := pollCQ(t, cq, 1)
	require.Equal(t, qpn(t, a.T), wcs[0].QPNum)
	require.Equal(t, []byte("late"), tmr.Bytes()[:4])

	// The initiator disconnects: the target side's event calls OnEvent.
	before := events.Load()
	require.NoError(t, a.I.Disconnect())
	WaitEvent(t, a.T, ib.EventDisconnected)
	require.Greater(t, events.Load(), before, "OnEvent not called for EventDisconnected")
}

// testSharedClose: a CQ or SRQ in use by a QP cannot be closed; once the QP is closed it can.
func testSharedClose(t *testing.T, f SharedFabric) {
	sq := f.TargetQueues(t)
	cq, err := newCQ(t, sq, 64, 0)
	require.NoError(t, err)
	srq, err := sq.NewSRQ(4, 1)
	require.NoError(t, err)
	t.Cleanup(func() {
		// After the connection's close, should the test stop before its own closes.
		_ = srq.Close()
		_ = cq.Close()
	})
	require.ErrorIs(t, channelOf(t, cq).Close(), ib.ErrInvalidArgument, "a channel with a CQ open")
	a := f.ConnectShared(t, Caps, shareWith(cq, srq, nil))
	require.ErrorIs(t, cq.Close(), ib.ErrInvalidArgument)
	require.ErrorIs(t, srq.Close(), ib.ErrInvalidArgument)
	require.NoError(t, a.T.Close())
	require.NoError(t, srq.Close())
	require.NoError(t, cq.Close())
	_, err = sq.NewCQ(channelOf(t, cq), 0, 0)
	require.True(t, errors.Is(err, ib.ErrInvalidArgument), "a CQ of 0 entries: %v", err)
}

// testSendCQ: a QP accepted with a send CQ of its own puts its send completions there and its
// receives on the other; OnQP tells its QP number before Accept returns.
func testSendCQ(t *testing.T, f SharedFabric) {
	rcq, _ := sharedQueues(t, f, false)
	scq, err := newCQ(t, f.TargetQueues(t), 64, 1)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, scq.Close()) })
	var told atomic.Uint32
	a := f.ConnectShared(t, Caps, func(ap *ib.AcceptParams) {
		ap.CQ, ap.SendCQ = rcq, scq
		ap.OnQP = func(qpn uint32) { told.Store(qpn) }
	})
	require.Equal(t, qpn(t, a.T), told.Load(), "OnQP's number")
	tmr := register(t, f, a.TPD, 4096, ib.AccessLocalWrite)
	imr := register(t, f, a.IPD, 4096, ib.AccessLocalWrite)
	postRecv(t, a.T, recvs(tmr, 64, 100)...)
	postRecv(t, a.I, recvs(imr, 64, 100)...)
	postSend(t, a.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: imr, Offset: 1024, Length: 5}}})
	postSend(t, a.T, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 1024, Length: 3}}})
	require.Len(t, Poll(t, a.I, 2), 2)
	got := pollCQ(t, rcq, 1)
	require.Equal(t, []ib.Completion{Recvd(100, 5)}, byQP(got)[qpn(t, a.T)])
	got = pollCQ(t, scq, 1)
	require.Equal(t, []ib.Completion{OK(2, ib.OpSend)}, byQP(got)[qpn(t, a.T)])
	requireCQQuiet(t, rcq)
}

// testCompChannel: a receive CQ and a send CQ on one completion channel: each armed CQ's next
// completion raises one event there naming it; PollPair takes both CQs' completions in one
// call; Interrupt ends Serve's park, and one made before Serve ends its first.
func testCompChannel(t *testing.T, f SharedFabric) {
	sq := f.TargetQueues(t)
	ch, err := sq.NewCompChannel()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ch.Close()) })
	rcq, err := sq.NewCQ(ch, 64, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rcq.Close()) })
	scq, err := sq.NewCQ(ch, 64, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, scq.Close()) })
	a := f.ConnectShared(t, Caps, func(ap *ib.AcceptParams) { ap.CQ, ap.SendCQ = rcq, scq })
	tmr := register(t, f, a.TPD, 4096, ib.AccessLocalWrite)
	imr := register(t, f, a.IPD, 4096, ib.AccessLocalWrite)
	postRecv(t, a.T, recvs(tmr, 64, 100, 101)...)
	postRecv(t, a.I, recvs(imr, 64, 100)...)

	serve := func(limit time.Duration, enough func([]ib.CQ) bool) []ib.CQ {
		return serveEvents(t, ch, limit, enough)
	}
	require.NoError(t, rcq.Arm())
	require.NoError(t, scq.Arm())
	postSend(t, a.I, ib.SendWR{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: imr, Length: 5}}})
	require.Equal(t, []ib.CQ{rcq}, serve(WaitLimit, func(g []ib.CQ) bool { return len(g) > 0 }),
		"the receive CQ's event, and only its")
	postSend(t, a.T, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 1024, Length: 3}}})
	require.Equal(t, []ib.CQ{scq}, serve(WaitLimit, func(g []ib.CQ) bool { return len(g) > 0 }),
		"the send CQ's event, and only its")
	require.Len(t, Poll(t, a.I, 2), 2)
	wcs := make([]ib.Completion, 4)
	n, err := rcq.PollPair(scq, wcs)
	require.NoError(t, err)
	require.Equal(t, []ib.Completion{Recvd(100, 5), OK(2, ib.OpSend)}, byQP(wcs[:n])[qpn(t, a.T)])
	n, err = rcq.PollPair(scq, wcs)
	require.NoError(t, err)
	require.Zero(t, n)

	// Spent arms: a completion raises nothing more; an Interrupt made before Serve ends its
	// first park.
	postSend(t, a.I, ib.SendWR{ID: 3, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: imr, Length: 2}}})
	require.Empty(t, serve(quiet, func([]ib.CQ) bool { return false }), "an event without an arm")
	ch.Interrupt()
	calls := 0
	require.NoError(t, ch.Serve(nil, func([]ib.CQ) bool { calls++; return calls == 2 }))
	require.Equal(t, []ib.Completion{Recvd(101, 2)}, byQP(pollCQ(t, rcq, 1))[qpn(t, a.T)])
}
