package ibtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// testArmNotify is ib.NotifyArmer's contract, on which the SRP channel's wake-ups rest: until
// the first ArmNotify every completion signals Ready; after ArmNotify(false) a receive
// completion signals and a send completion does not (PollCompletions returns it all the
// same), even though the send queue was armed before; ArmNotify(true) makes the next send
// completion signal, and one arm gives one signal.
func testArmNotify(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	armer, ok := p.T.(ib.NotifyArmer)
	require.True(t, ok, "%T implements ib.NotifyArmer", p.T)
	tmr := register(t, f, p.TPD, 4096, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 4096, ib.AccessLocalWrite)
	postRecv(t, p.T, recvs(tmr, 64, 100)...)
	postRecv(t, p.I, recvs(imr, 64, 100, 101, 102)...)
	for ReadySignalled(p.T) {
	}
	send := func(id uint64) {
		t.Helper()
		postSend(t, p.T, ib.SendWR{ID: id, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 1024, Length: 8}}})
	}

	// The connection arms itself: a send completion signals.
	send(1)
	waitReady(t, p.T)
	require.Equal(t, []ib.Completion{OK(1, ib.OpSend)}, Poll(t, p.T, 1))
	require.Equal(t, []ib.Completion{Recvd(100, 8)}, Poll(t, p.I, 1))

	// Receives only: the send completion is there to poll, without a signal.
	require.NoError(t, armer.ArmNotify(false))
	send(2)
	require.Equal(t, []ib.Completion{Recvd(101, 8)}, Poll(t, p.I, 1))
	require.Equal(t, []ib.Completion{OK(2, ib.OpSend)}, pollQuietly(t, p.T, 1))
	time.Sleep(quiet)
	require.False(t, ReadySignalled(p.T), "a send completion signalled after ArmNotify(false)")
	postSend(t, p.I, ib.SendWR{ID: 10, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: imr, Offset: 1024, Length: 8}}})
	waitReady(t, p.T)
	require.Equal(t, []ib.Completion{Recvd(100, 8)}, Poll(t, p.T, 1))
	require.Equal(t, []ib.Completion{OK(10, ib.OpSend)}, Poll(t, p.I, 1))

	// Both: the send completion signals, once.
	require.NoError(t, armer.ArmNotify(true))
	send(3)
	waitReady(t, p.T)
	require.Equal(t, []ib.Completion{OK(3, ib.OpSend)}, Poll(t, p.T, 1))
	require.Equal(t, []ib.Completion{Recvd(102, 8)}, Poll(t, p.I, 1))
	time.Sleep(quiet)
	require.False(t, ReadySignalled(p.T), "a second signal without a new arm")
}

// ReadySignalled reports whether c's Ready holds a signal, taking it. Fabric-specific tests use it too.
func ReadySignalled(c ib.Conn) bool {
	select {
	case <-c.Ready():
		return true
	default:
		return false
	}
}

// waitReady waits for c's Ready, failing the test after WaitLimit.
func waitReady(t *testing.T, c ib.Conn) {
	t.Helper()
	select {
	case <-c.Ready():
	case <-time.After(WaitLimit):
		t.Fatalf("%v: Ready not signalled within %v", c, WaitLimit)
	}
}

// pollQuietly returns exactly n completions of c, polling without waiting on Ready (which
// must stay untouched), and fails the test after WaitLimit.
func pollQuietly(t *testing.T, c ib.Conn, n int) []ib.Completion {
	t.Helper()
	var out []ib.Completion
	wcs := make([]ib.Completion, 4)
	deadline := time.Now().Add(WaitLimit)
	for len(out) < n {
		k, err := c.PollCompletions(wcs[:min(len(wcs), n-len(out))])
		require.NoError(t, err)
		out = append(out, wcs[:k]...)
		if k == 0 {
			require.True(t, time.Now().Before(deadline), "%v: %d of %d completions within %v", c, len(out), n, WaitLimit)
			time.Sleep(time.Millisecond)
		}
	}
	return out
}
