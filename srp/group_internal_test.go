package srp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
)

// countCQ is an ib.CQ with nothing to poll that counts its arms.
type countCQ struct {
	arms  int
	ready chan struct{}
}

func (q *countCQ) Poll([]ib.Completion) (int, error)            { return 0, nil }
func (q *countCQ) PollPair(ib.CQ, []ib.Completion) (int, error) { return 0, nil }
func (q *countCQ) Arm() error                                   { q.arms++; return nil }
func (q *countCQ) Close() error                                 { return nil }

// testGroup is a group of a target with lim whose CQs are a receive and a send countCQ.
func testGroup(lim Limits) (*pollGroup, *countCQ, *countCQ) {
	g := newPollGroup(&Target{lim: lim, log: zap.NewNop()}, 0)
	rq, sq := &countCQ{ready: make(chan struct{}, 1)}, &countCQ{ready: make(chan struct{}, 1)}
	g.cqs = []*groupCQ{{cq: rq, recvs: true}, {cq: sq}}
	return g, rq, sq
}

// TestAdaptiveIdleWindow: an adaptive group keeps polling for the poll window after its last
// work, reading the clock only once per clockEvery idle passes; when the window is over it arms
// its CQs and sleeps on the very next pass; new work opens a new window, and a wake-up that
// brought no work arms again at once.
func TestAdaptiveIdleWindow(t *testing.T) {
	const window = 5 * time.Millisecond
	g, rq, _ := testGroup(Limits{Completion: CompletionAdaptive, PollWindow: window})
	start := time.Now()
	passes := 0
	g.wait.noteWork()
	for !g.idle() {
		passes++
		if rq.arms > 0 {
			break
		}
		require.Less(t, time.Since(start), 10*time.Second, "the poll window never ended")
	}
	require.Equal(t, 1, rq.arms, "the CQ is armed once the window is over")
	require.GreaterOrEqual(t, time.Since(start), window, "armed before the window was over")
	require.GreaterOrEqual(t, passes, clockEvery)
	require.True(t, g.idle(), "after arming, the next idle pass sleeps")

	// Woken by the CQ, but there was nothing to do: arm again, no new window.
	g.wait.woke()
	g.wait.armed = false
	require.False(t, g.idle())
	require.Equal(t, 2, rq.arms)
	require.True(t, g.idle())

	// New work opens a new window: no arming for the next clockEvery passes.
	g.wait.woke()
	g.wait.armed = false
	g.wait.noteWork()
	for range 2 * clockEvery {
		require.False(t, g.idle())
	}
	require.Equal(t, 2, rq.arms, "armed inside the poll window")
}

// TestAdaptiveIdleReadsClockRarely: even with a window shorter than one pass, the clock is
// first read, and the window found over, only on the clockEvery-th idle pass.
func TestAdaptiveIdleReadsClockRarely(t *testing.T) {
	g, rq, _ := testGroup(Limits{Completion: CompletionAdaptive, PollWindow: time.Nanosecond})
	passes := 0
	g.wait.noteWork()
	for rq.arms == 0 {
		require.False(t, g.idle())
		passes++
	}
	// The first clock read starts the window, the next one (clockEvery passes on) ends it.
	require.Equal(t, 2*clockEvery, passes)
}

// TestEventIdle: in event mode a pass that took at most one request arms at once, and the next
// one sleeps; a pass that took more is followed by another without arming, busyPassesMax times
// between two sleeps at most.
func TestEventIdle(t *testing.T) {
	g, rq, _ := testGroup(Limits{Completion: CompletionEvent})
	g.wait.recvs = 1
	require.False(t, g.idle())
	require.Equal(t, 1, rq.arms, "one request: armed at once")
	require.True(t, g.idle(), "then it sleeps")

	g.wait.woke()
	g.wait.armed = false
	g.wait.recvs = 2
	for i := range busyPassesMax {
		require.False(t, g.idle(), "pass %d took requests: another pass", i)
	}
	require.Equal(t, 1, rq.arms, "no arm while passes find work")
	require.False(t, g.idle(), "busyPassesMax passes in a row: it arms")
	require.Equal(t, 2, rq.arms)
	require.True(t, g.idle(), "armed, and the budget spent: it sleeps")
}

// TestSendsAwaited: a group arms its send CQs only when one of its channels waits for a send
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
		{"a command waits for a data buffer", func(ch *channel) { ch.sendBatches = 1; ch.bufQ.push(&cmdCtx{}) }, true},
		{"a command waits for send-queue slots", func(ch *channel) { ch.sendBatches = 1; ch.sqQ.push(&cmdCtx{}) }, true},
		{"an IU waits for a context", func(ch *channel) {
			ch.sendBatches = 1
			ch.waitRecv = append(ch.waitRecv, parkedIU{})
		}, true},
		{"credits owed", func(ch *channel) { ch.sendBatches = 1; ch.ledger.owe() }, true},
		{"another channel waits for the pool", func(ch *channel) { ch.sendBatches = 1; ch.pool.waiting.Store(1) }, true},
		{"draining", func(ch *channel) { ch.sendBatches = 1; ch.phase = phaseDraining }, true},
		{"draining with nothing on the send queue", func(ch *channel) { ch.phase = phaseDraining }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, rq, sq := testGroup(Limits{Completion: CompletionEvent})
			ch := &channel{t: g.t, g: g, pool: &bufPool{}}
			tt.set(ch)
			g.noteSends(ch)
			require.Equal(t, tt.want, g.wait.sendsWanted > 0)
			require.False(t, g.idle())
			require.Equal(t, 1, rq.arms)
			want := 0
			if tt.want {
				want = 1
			}
			require.Equal(t, want, sq.arms, "the send CQ armed")
			// The channel no longer waits: the count goes down.
			*ch = channel{t: g.t, g: g, pool: &bufPool{}, groupLink: groupLink{wantSends: ch.wantSends}}
			g.noteSends(ch)
			require.Zero(t, g.wait.sendsWanted)
		})
	}
}

// TestInboxNoLostWakeUp runs the group's loop against a goroutine that signals a channel one
// at a time, each after the group ran it: a signal that the group's last look at its inbox
// missed must still end its sleep (here: before the deadline).
func TestInboxNoLostWakeUp(t *testing.T) {
	g, _, _ := testGroup(Limits{Completion: CompletionEvent})
	g.cqs = nil
	ch := &channel{t: g.t, g: g}
	const n = 20000
	ran := make(chan struct{}, 1)
	go func() {
		for range n {
			g.signal(ch)
			<-ran
		}
	}()
	got := 0
	for got < n {
		if g.takeInbox() {
			for _, c := range g.active {
				c.touched = false
				got++
				ran <- struct{}{}
			}
			g.active = g.active[:0]
			continue
		}
		// As block sleeps.
		g.sleeping.Store(true)
		if !g.any.Load() {
			select {
			case <-g.wake:
			case <-time.After(10 * time.Second):
				t.Fatalf("signal %d lost: the group sleeps with it in its inbox", got+1)
			}
		}
		g.sleeping.Store(false)
	}
}

// TestNewCQArmed: a CQ the group gains while its others are armed (a device's first channel,
// a sibling for a full CQ, queues made again after the last channel left) is armed before the
// group sleeps: else its completions would never wake it.
func TestNewCQArmed(t *testing.T) {
	g, rq, _ := testGroup(Limits{Completion: CompletionEvent})
	require.False(t, g.idle())
	require.Equal(t, 1, rq.arms)
	require.True(t, g.idle(), "armed: it sleeps")

	nq := &countCQ{ready: make(chan struct{}, 1)}
	d := &groupDev{g: g, recv: []*groupCQ{{cq: nq, recvs: true}}}
	g.mu.Lock()
	g.devs = append(g.devs, d)
	g.devsChanged = true
	g.mu.Unlock()
	g.any.Store(true)
	require.True(t, g.takeInbox())
	require.Len(t, g.cqs, 1)
	require.False(t, g.idle(), "a new CQ: arm and poll once more before sleeping")
	require.Equal(t, 1, nq.arms, "the new CQ armed")
	require.True(t, g.idle())
}
