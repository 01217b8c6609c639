package srp

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// chanWaiter is an ib.Waiter whose Interrupt posts to c (Serve is not used).
type chanWaiter struct {
	c          chan struct{}
	interrupts atomic.Int32
}

func (w *chanWaiter) Serve(func(bool) bool) error { return nil }

func (w *chanWaiter) Interrupt() {
	w.interrupts.Add(1)
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// TestTakeReadyHandOff: a channel sleeping in Serve looks at done and wake only when a
// hand-off announced something there, takes what was announced, clears the announcement once
// it finds both empty, and a hand-off to a sleeping channel interrupts its Serve.
func TestTakeReadyHandOff(t *testing.T) {
	w := &chanWaiter{c: make(chan struct{}, 1)}
	ch := &channel{wake: make(chan struct{}, 1), done: make(chan *cmdCtx, 1), waiter: w, serving: true}

	require.False(t, ch.takeReady(), "nothing handed over")
	ch.signal()
	require.True(t, ch.handed.Load())
	require.Zero(t, w.interrupts.Load(), "not sleeping: no interrupt")
	require.True(t, ch.takeReady(), "the wake-up is taken")
	require.True(t, ch.handed.Load(), "set until both channels are found empty")
	require.False(t, ch.takeReady())
	require.False(t, ch.handed.Load(), "cleared once both were found empty")

	// The announcement is what takeReady goes by: every send on done or wake makes one.
	ch.wake <- struct{}{}
	require.False(t, ch.takeReady(), "a send without handOff is not looked for")
	ch.handOff()
	require.True(t, ch.takeReady())

	ch.sleeping.Store(true)
	ch.signal()
	require.Equal(t, int32(1), w.interrupts.Load(), "a sleeping channel is interrupted")
	require.True(t, ch.takeReady())
}

// TestHandOffNoLostWakeUp runs the sleep protocol of step against a goroutine that hands the
// channel one wake-up at a time, each after the last was taken: set sleeping, look once more,
// then sleep until an Interrupt. A hand-off that neither the last look nor the sleeper's
// Interrupt sees would leave the sleeper waiting for ever (here: until the deadline).
func TestHandOffNoLostWakeUp(t *testing.T) {
	w := &chanWaiter{c: make(chan struct{}, 1)}
	ch := &channel{wake: make(chan struct{}, 1), done: make(chan *cmdCtx, 1), waiter: w, serving: true}
	const n = 20000
	taken := make(chan struct{})
	go func() {
		for range n {
			ch.signal()
			<-taken
		}
	}()
	for got := 0; got < n; {
		ch.sleeping.Store(false)
		if ch.takeReady() {
			got++
			taken <- struct{}{}
			continue
		}
		ch.sleeping.Store(true)
		if ch.takeReady() {
			got++
			taken <- struct{}{}
			continue
		}
		select {
		case <-w.c:
		case <-time.After(10 * time.Second):
			t.Fatalf("wake-up %d lost: the channel sleeps with it handed over", got+1)
		}
	}
}
