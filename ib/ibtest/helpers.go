package ibtest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// Caps are the QP caps of most tests: 16 deep each way, up to 4 send and 2 receive SGEs and 64
// bytes inline, as far as the device allows.
func Caps(lim ib.DeviceLimits) ib.QPCaps {
	return ib.QPCaps{SendQueueDepth: min(16, lim.MaxQueueDepth), RecvQueueDepth: min(16, lim.MaxQueueDepth),
		MaxSendSGE: min(4, lim.MaxSendSGE), MaxRecvSGE: min(2, lim.MaxRecvSGE), MaxInlineData: min(64, lim.MaxInlineData)}
}

func register(t *testing.T, f Fabric, pd ib.ProtectionDomain, n int, acc ib.Access) ib.MR {
	t.Helper()
	mr, err := pd.RegisterMemory(f.Memory(t, n), acc)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Before the memory is freed (cleanups run last first). A test may deregister first.
		if err := mr.Deregister(); !errors.Is(err, ib.ErrClosed) {
			require.NoError(t, err)
		}
	})
	return mr
}

// Fill writes a pattern derived from seed into b and returns b.
func Fill(b []byte, seed byte) []byte {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// OK, Recvd and Failed are the completions the tests expect: a successful work request of
// opcode op, a receive of n bytes, a failure with status st.
func OK(id uint64, op ib.Opcode) ib.Completion {
	return ib.Completion{ID: id, Status: ib.StatusSuccess, Opcode: op}
}
func Recvd(id uint64, n int) ib.Completion {
	return ib.Completion{ID: id, Status: ib.StatusSuccess, Opcode: ib.OpRecv, ByteLen: uint32(n)}
}
func Failed(id uint64, st ib.Status) ib.Completion { return ib.Completion{ID: id, Status: st} }

func flushed(ids ...uint64) []ib.Completion {
	out := make([]ib.Completion, 0, len(ids))
	for _, id := range ids {
		out = append(out, Failed(id, ib.StatusWRFlushError))
	}
	return out
}

func recvs(mr ib.MR, size uint32, ids ...uint64) []ib.RecvWR {
	wrs := make([]ib.RecvWR, len(ids))
	for i, id := range ids {
		wrs[i] = ib.RecvWR{ID: id, SGL: []ib.SGE{{MR: mr, Offset: uint64(i) * uint64(size), Length: size}}}
	}
	return wrs
}

func postSend(t *testing.T, c ib.Conn, wrs ...ib.SendWR) {
	t.Helper()
	n, err := c.PostSend(wrs)
	require.NoError(t, err)
	require.Equal(t, len(wrs), n)
}

func postRecv(t *testing.T, c ib.Conn, wrs ...ib.RecvWR) {
	t.Helper()
	n, err := c.PostRecv(wrs)
	require.NoError(t, err)
	require.Equal(t, len(wrs), n)
}

// Establish completes a connection that a fabric's Connect or ConnectShared started: it
// accepts req with ap (changed by share first, when not nil), takes the initiator's side from
// dialed (which waits for the initiator's Connect to return), closes both at the end of the
// test, and waits for EventEstablished on both.
func Establish(t *testing.T, req ib.ConnRequest, ap ib.AcceptParams, share func(*ib.AcceptParams),
	dialed func() (ib.Conn, error)) (tc, ic ib.Conn) {
	t.Helper()
	if share != nil {
		share(&ap)
	}
	tc, err := req.Accept(ap)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, tc.Close()) })
	ic, err = dialed()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ic.Close()) })
	WaitEvent(t, tc, ib.EventEstablished)
	WaitEvent(t, ic, ib.EventEstablished)
	return tc, ic
}

// Poll returns exactly n completions of c, waiting on Ready between drains, and fails the test
// after WaitLimit. Fabric-specific tests use it too.
func Poll(t *testing.T, c ib.Conn, n int) []ib.Completion {
	t.Helper()
	return collect(t, n, c.PollCompletions, func(out []ib.Completion, deadline <-chan time.Time) {
		select {
		case <-c.Ready():
		case <-deadline:
			t.Fatalf("%v: %d of %d completions within %v: %+v", c, len(out), n, WaitLimit, out)
		}
	})
}

// collect returns exactly n completions, drained by poll; after a drain that found none, wait
// waits for more (out: those so far), and fails the test once deadline, WaitLimit from the
// start, has passed.
func collect(t *testing.T, n int, poll func([]ib.Completion) (int, error),
	wait func(out []ib.Completion, deadline <-chan time.Time)) []ib.Completion {
	t.Helper()
	var out []ib.Completion
	wcs := make([]ib.Completion, 16)
	deadline := time.After(WaitLimit)
	for len(out) < n {
		k, err := poll(wcs[:min(len(wcs), n-len(out))])
		require.NoError(t, err)
		out = append(out, wcs[:k]...)
		if k == 0 {
			wait(out, deadline)
		}
	}
	return out
}

// requireNoCompletions checks that no completion arrives for a while.
func requireNoCompletions(t *testing.T, c ib.Conn) {
	t.Helper()
	requireQuiet(t, c.PollCompletions)
}

// requireQuiet checks that poll finds no completion after a while.
func requireQuiet(t *testing.T, poll func([]ib.Completion) (int, error)) {
	t.Helper()
	time.Sleep(quiet)
	wcs := make([]ib.Completion, 4)
	n, err := poll(wcs)
	require.NoError(t, err)
	require.Zero(t, n, "unexpected completions %+v", wcs[:n])
}

// WaitEvent waits for c's next connection event and requires it to be want, failing the test
// after WaitLimit. Fabric-specific tests use it too. It polls instead of waiting on Ready,
// which would make a verbs connection's Ready its consumer's way of waiting (ib.Waiter).
func WaitEvent(t *testing.T, c ib.Conn, want ib.Event) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for {
		if e, ok := c.PollEvent(); ok {
			require.Equal(t, want, e)
			return
		}
		require.True(t, time.Now().Before(deadline), "%v: no %v within %v", c, want, WaitLimit)
		time.Sleep(time.Millisecond)
	}
}

func requireNoEvent(t *testing.T, c ib.Conn) {
	t.Helper()
	e, ok := c.PollEvent()
	require.False(t, ok, "unexpected event %v", e)
}

// Split separates send-queue and receive-queue completions (they interleave arbitrarily),
// keeping each queue's order. Receive completions are recognised by the IDs the tests give
// receives: 100 and up.
func Split(wcs []ib.Completion) (sq, rq []ib.Completion) {
	for _, wc := range wcs {
		if wc.ID >= 100 {
			rq = append(rq, wc)
		} else {
			sq = append(sq, wc)
		}
	}
	return sq, rq
}
