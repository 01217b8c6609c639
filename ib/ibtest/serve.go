package ibtest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// served runs a connection's Serve on its own goroutine with a step the test drives: each
// call of the step is reported on calls, and returns what the test answers on answer (true:
// done). The test may use the connection while a step waits for its answer, as the consumer's
// step would.
type served struct {
	calls  chan bool
	answer chan bool
	err    chan error
}

func serve(t *testing.T, w ib.Waiter) *served {
	s := &served{calls: make(chan bool, 1), answer: make(chan bool), err: make(chan error, 1)}
	go func() {
		s.err <- w.Serve(func(ready bool) bool {
			s.calls <- ready
			return <-s.answer
		})
	}()
	t.Cleanup(func() {
		// Unblock a step still waiting, so that the goroutine ends with the test.
		select {
		case s.answer <- true:
		default:
		}
	})
	return s
}

// step waits for the next call of the step and returns its ready.
func (s *served) step(t *testing.T) bool {
	t.Helper()
	select {
	case ready := <-s.calls:
		return ready
	case err := <-s.err:
		t.Fatalf("Serve returned %v instead of calling the step", err)
	case <-time.After(WaitLimit):
		t.Fatalf("step not called within %v", WaitLimit)
	}
	return false
}

// noStep requires that the step is not called for a while: Serve sleeps.
func (s *served) noStep(t *testing.T, why string) {
	t.Helper()
	select {
	case <-s.calls:
		t.Fatalf("step called: %s", why)
	case err := <-s.err:
		t.Fatalf("Serve returned %v: %s", err, why)
	case <-time.After(quiet):
	}
}

// settle answers the steps that come (false) until none comes for a while: Serve sleeps.
// A spurious step is allowed by the contract; a stream of them is not.
func (s *served) settle(t *testing.T) {
	t.Helper()
	for range 10 {
		select {
		case <-s.calls:
			s.answer <- false
		case err := <-s.err:
			t.Fatalf("Serve returned %v", err)
		case <-time.After(quiet):
			return
		}
	}
	t.Fatal("Serve keeps calling the step with nothing to do")
}

// returned waits for Serve to return and gives its error.
func (s *served) returned(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.err:
		return err
	case <-s.calls:
		t.Fatal("step called instead of Serve returning")
	case <-time.After(WaitLimit):
		t.Fatalf("Serve did not return within %v", WaitLimit)
	}
	return nil
}

// testServe is ib.Waiter's contract, on which the SRP channel's sleep rests: the step runs
// at once, and after it returns false Serve sleeps until a completion that the arming asks
// for (ready) or an Interrupt, including one that came while a step ran; a completion the
// arming does not ask for does not wake it; a step returning true ends Serve without error,
// and Serve can start again.
func testServe(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	w, ok := p.T.(ib.Waiter)
	require.True(t, ok, "%T implements ib.Waiter", p.T)
	armer := p.T.(ib.NotifyArmer)
	tmr := register(t, f, p.TPD, 4096, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 4096, ib.AccessLocalWrite)
	postRecv(t, p.T, recvs(tmr, 64, 100, 101, 102)...)
	postRecv(t, p.I, recvs(imr, 64, 100, 101)...)
	peerSend := func(id uint64) {
		t.Helper()
		postSend(t, p.I, ib.SendWR{ID: id, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: imr, Offset: 1024, Length: 8}}})
	}

	s := serve(t, w)
	s.step(t)
	requireNoCompletions(t, p.T)
	require.NoError(t, armer.ArmNotify(false))
	s.answer <- false
	s.noStep(t, "nothing happened")

	// A receive completion wakes it, with ready.
	peerSend(1)
	require.True(t, s.step(t), "woken by a receive completion")
	require.Equal(t, []ib.Completion{Recvd(100, 8)}, Poll(t, p.T, 1))
	require.Equal(t, []ib.Completion{OK(1, ib.OpSend)}, Poll(t, p.I, 1))
	require.NoError(t, armer.ArmNotify(false))
	s.answer <- false

	// A send completion does not, after ArmNotify(false).
	postSend(t, p.T, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 1024, Length: 8}}})
	require.Equal(t, []ib.Completion{Recvd(100, 8)}, Poll(t, p.I, 1))
	s.noStep(t, "a send completion woke Serve after ArmNotify(false)")
	require.Equal(t, []ib.Completion{OK(2, ib.OpSend)}, pollQuietly(t, p.T, 1))

	// An Interrupt wakes it; so does one that came while the step ran.
	w.Interrupt()
	s.step(t)
	w.Interrupt()
	s.answer <- false
	s.step(t)
	s.answer <- false
	s.noStep(t, "one Interrupt, one step")

	// A completion that arrived while the step ran (after its arming) wakes it too.
	peerSend(3)
	require.True(t, s.step(t))
	require.NoError(t, armer.ArmNotify(false))
	peerSend(4)
	require.Equal(t, []ib.Completion{OK(3, ib.OpSend), OK(4, ib.OpSend)}, Poll(t, p.I, 2))
	s.answer <- false
	s.step(t)
	require.Equal(t, []ib.Completion{Recvd(101, 8), Recvd(102, 8)}, Poll(t, p.T, 2))

	// Done: Serve returns nil, and serves again.
	s.answer <- true
	require.NoError(t, s.returned(t))
	s = serve(t, w)
	s.step(t)
	s.answer <- true
	require.NoError(t, s.returned(t))
}

// testServeClosed: a connection closed by the step, or by another goroutine while Serve
// sleeps, ends Serve with ErrClosed and without another step; Serve on a closed connection
// fails at once.
func testServeClosed(t *testing.T, f Fabric) {
	for _, byStep := range []bool{true, false} {
		p := f.Connect(t, Caps)
		w := p.T.(ib.Waiter)
		require.NoError(t, p.T.(ib.NotifyArmer).ArmNotify(false))
		s := serve(t, w)
		s.step(t)
		if byStep {
			require.NoError(t, p.T.Close())
			s.answer <- false
		} else {
			s.answer <- false
			s.settle(t)
			require.NoError(t, p.T.Close())
		}
		err := s.returned(t)
		require.True(t, errors.Is(err, ib.ErrClosed), "byStep %v: Serve returned %v", byStep, err)
		err = w.Serve(func(bool) bool { t.Fatal("step called on a closed connection"); return true })
		require.True(t, errors.Is(err, ib.ErrClosed), "Serve on a closed connection: %v", err)
	}
}
