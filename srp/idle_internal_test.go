package srp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type countArmer struct{ arms int }

func (a *countArmer) ArmNotify() error { a.arms++; return nil }

// TestAdaptiveIdleWindow: an adaptive channel keeps polling for the poll window after its last
// work, reading the clock only once per clockEvery idle passes; when the window is over it arms
// the completion queue and sleeps on the very next pass; new work opens a new window, and a
// wake-up that brought no work arms again at once.
func TestAdaptiveIdleWindow(t *testing.T) {
	const window = 5 * time.Millisecond
	armer := &countArmer{}
	ch := &channel{t: &Target{lim: Limits{Completion: CompletionAdaptive, PollWindow: window}}, armer: armer}

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
	ch := &channel{t: &Target{lim: Limits{Completion: CompletionAdaptive, PollWindow: time.Nanosecond}}, armer: armer}
	passes := 0
	for worked := true; armer.arms == 0; worked = false {
		require.False(t, ch.idle(worked))
		passes++
	}
	// The first clock read starts the window, the next one (clockEvery passes on) ends it.
	require.Equal(t, 2*clockEvery, passes)
}

// TestEventIdleArmsAtOnce: in event mode the channel arms and sleeps without polling on.
func TestEventIdleArmsAtOnce(t *testing.T) {
	armer := &countArmer{}
	ch := &channel{t: &Target{lim: Limits{Completion: CompletionEvent}}, armer: armer}
	require.False(t, ch.idle(true))
	require.Equal(t, 1, armer.arms)
	require.True(t, ch.idle(false))
}
