package srp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type countArmer struct {
	arms  int
	sends bool // the last ArmNotify's
}

func (a *countArmer) ArmNotify(sends bool) error { a.arms++; a.sends = sends; return nil }

// TestAdaptiveIdleWindow: an adaptive channel keeps polling for the poll window after its last
// work, reading the clock only once per clockEvery idle passes; when the window is over it arms
// the completion queue and sleeps on the very next pass; new work opens a new window, and a
// wake-up that brought no work arms again at once.
func TestAdaptiveIdleWindow(t *testing.T) {
	const window = 5 * time.Millisecond
	armer := &countArmer{}
	ch := &channel{t: &Target{lim: Limits{Completion: CompletionAdaptive, PollWindow: window}}, armer: armer, pool: &bufPool{}}

	start := time.Now()
	worked := true
	passes := 0
	for !ch.idle(worked) {
		worked = false
		passes++
		if armer.arms > 0 {
			break
		}
		require.Less(t, time.Since(start), 10*time.Second, "the poll window never ended")
	}
	require.Equal(t, 1, armer.arms, "the queue is armed once the window is over")
	require.GreaterOrEqual(t, time.Since(start), window, "armed before the window was over")
	require.GreaterOrEqual(t, passes, clockEvery)
	require.True(t, ch.idle(false), "after arming, the next idle pass sleeps")

	// The event is taken (Ready fired) but there was nothing to do: arm again, no new window.
	ch.notifyArmed = false
	require.False(t, ch.idle(false))
	require.Equal(t, 2, armer.arms)
	require.True(t, ch.idle(false))

	// New work opens a new window: no arming for the next clockEvery passes.
	ch.notifyArmed = false
	require.False(t, ch.idle(true))
	for i := 0; i < 2*clockEvery; i++ {
		require.False(t, ch.idle(false))
	}
	require.Equal(t, 2, armer.arms, "armed inside the poll window")
}

// TestAdaptiveIdleReadsClockRarely: even with a window shorter than one pass, the clock is
// first read, and the window found over, only on the clockEvery-th idle pass.
func TestAdaptiveIdleReadsClockRarely(t *testing.T) {
	armer := &countArmer{}
	ch := &channel{t: &Target{lim: Limits{Completion: CompletionAdaptive, PollWindow: time.Nanosecond}}, armer: armer, pool: &bufPool{}}
	passes := 0
	for worked := true; armer.arms == 0; worked = false {
		require.False(t, ch.idle(worked))
		passes++
	}
	// The first clock read starts the window, the next one (clockEvery passes on) ends it.
	require.Equal(t, 2*clockEvery, passes)
}

// TestEventIdle: in event mode a pass that took at most one request arms at once, and the next
// one sleeps; a pass that took more is followed by another without arming, busyPassesMax times
// between two sleeps at most.
func TestEventIdle(t *testing.T) {
	armer := &countArmer{}
	ch := &channel{t: &Target{lim: Limits{Completion: CompletionEvent}}, armer: armer, pool: &bufPool{}}
	ch.passRecvs = 1
	require.False(t, ch.idle(true))
	require.Equal(t, 1, armer.arms, "one request: armed at once")
	require.True(t, ch.idle(false), "then it sleeps")

	ch.notifyArmed, ch.busyPasses = false, 0 // woken: the event was taken
	ch.passRecvs = 2
	for i := range busyPassesMax {
		require.False(t, ch.idle(true), "pass %d took requests: another pass", i)
	}
	require.Zero(t, armer.arms-1, "no arm while passes find work")
	require.False(t, ch.idle(true), "busyPassesMax passes in a row: it arms")
	require.Equal(t, 2, armer.arms)
	require.True(t, ch.idle(true), "armed, and the budget spent: it sleeps")
}

// TestSendsAwaited: a channel arms its send CQ only when something waits for a send
// completion; the completions of responses on their way are reaped at the next wake-up.
func TestSendsAwaited(t *testing.T) {
	tests := []struct {
		name string
		set  func(ch *channel)
		want bool
	}{
		{"nothing outstanding", func(*channel) {}, false},
		{"only responses on their way", func(ch *channel) { ch.sendBatches, ch.sent = 3, 3 }, false},
		{"an RDMA READ besides", func(ch *channel) { ch.sendBatches, ch.sent = 4, 3 }, true},
		{"a command waits for a data buffer", func(ch *channel) { ch.bufQ.push(&cmdCtx{}) }, true},
		{"a command waits for send-queue slots", func(ch *channel) { ch.sqQ.push(&cmdCtx{}) }, true},
		{"an IU waits for a context", func(ch *channel) { ch.waitRecv = append(ch.waitRecv, parkedIU{}) }, true},
		{"credits owed", func(ch *channel) { ch.ledger.owe() }, true},
		{"another channel waits for the pool", func(ch *channel) { ch.pool.waiting.Store(1) }, true},
		{"draining", func(ch *channel) { ch.phase = phaseDraining }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			armer := &countArmer{}
			ch := &channel{t: &Target{lim: Limits{Completion: CompletionEvent}}, armer: armer, pool: &bufPool{}}
			tt.set(ch)
			require.Equal(t, tt.want, ch.sendsAwaited())
			require.False(t, ch.idle(false))
			require.Equal(t, tt.want, armer.sends, "ArmNotify's sends")
		})
	}
}
