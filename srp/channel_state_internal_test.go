package srp

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// TestPhaseMoves: the lifecycle only moves forward, along the table; every other move panics
// under strictMoves and is refused (the phase stays) without it.
func TestPhaseMoves(t *testing.T) {
	allowed := map[[2]chPhase]bool{
		{phaseLive, phaseDraining}: true, {phaseLive, phaseClosing}: true,
		{phaseDraining, phaseClosing}:  true,
		{phaseClosing, phaseAbandoned}: true, {phaseClosing, phaseClosed}: true,
		{phaseAbandoned, phaseQPClosed}: true,
		{phaseQPClosed, phaseClosed}:    true,
	}
	for from := phaseLive; from <= phaseClosed; from++ {
		for to := phaseLive; to <= phaseClosed; to++ {
			ch := &channel{phase: from, log: zap.NewNop()}
			move := func() { ch.setPhase(to) }
			if allowed[[2]chPhase{from, to}] {
				require.NotPanics(t, move, "%v -> %v", from, to)
				require.Equal(t, to, ch.phase)
				require.Equal(t, to >= phaseClosing, ch.closing.Load(), "workers see closing from phaseClosing on")
				continue
			}
			require.Panics(t, move, "%v -> %v", from, to)
			strictMoves = false
			ch.setPhase(to)
			strictMoves = true
			require.Equal(t, from, ch.phase, "%v -> %v refused", from, to)
		}
	}
}

// TestStageMoves: a command's stage moves only along the table, and back to none from
// anywhere (finish).
func TestStageMoves(t *testing.T) {
	ch := &channel{log: zap.NewNop()}
	paths := [][]cmdStage{
		{stageRespond, stageSent},                                              // answered by the transport
		{stageExec, stageRespond, stageSent},                                   // no data, or immediate data
		{stageNeedBuf, stageDataRead, stageExec, stageRespond, stageSent},      // data-out
		{stageNeedBuf, stageExec, stageRespond, stageSent},                     // data-in
		{stageNeedBuf, stageTableRead, stageDataRead, stageWaitTMF, stageExec}, // external table, held by task management
		{stageNeedBuf, stageTableRead, stageRespond},                           // a table that does not add up
		{stageNeedBuf, stageRespond},                                           // BUSY after buffer_wait
		{stageTMF, stageRespond, stageSent},                                    // task management
	}
	for _, path := range paths {
		c := &cmdCtx{ch: ch}
		for _, s := range path {
			require.NotPanics(t, func() { c.setStage(s) }, "%v -> %v in %v", c.stage, s, path)
			require.Equal(t, s, c.stage)
		}
		c.setStage(stageNone)
		require.Equal(t, stageNone, c.stage)
	}
	for _, bad := range [][2]cmdStage{
		{stageNone, stageSent}, {stageSent, stageRespond}, {stageExec, stageDataRead},
		{stageRespond, stageExec}, {stageWaitTMF, stageRespond}, {stageTMF, stageExec}, {stageDataRead, stageRespond},
	} {
		c := &cmdCtx{ch: ch, stage: bad[0]}
		require.Panics(t, func() { c.setStage(bad[1]) }, "%v -> %v", bad[0], bad[1])
	}
}

// TestStageMovesEveryPair: setStage (its fast path and its slow one) allows exactly the moves
// of stageMoves and any move to stageNone, and counts the responses posted as contexts enter
// and leave stageSent.
func TestStageMovesEveryPair(t *testing.T) {
	for from := range cmdStage(numStages + 2) {
		for to := range cmdStage(numStages + 2) {
			ch := &channel{log: zap.NewNop()}
			c := &cmdCtx{ch: ch, stage: from, real: true}
			if from == stageSent {
				ch.sent, ch.answered = 1, 1
			}
			legal := to == stageNone || (from < numStages && to < numStages && stageMoves[from]&(1<<to) != 0)
			if !legal {
				require.Panics(t, func() { c.setStage(to) }, "%v -> %v", from, to)
				continue
			}
			require.NotPanics(t, func() { c.setStage(to) }, "%v -> %v", from, to)
			require.Equal(t, to, c.stage)
			wantSent := 0
			if to == stageSent {
				wantSent = 1
			}
			require.Equal(t, wantSent, ch.sent, "%v -> %v", from, to)
		}
	}
}

// TestCtxQueue: FIFO order, pushFront, and removeIf keeping the order of what stays, with
// contexts pushed by the callback (finish starting a parked IU) going after them.
func TestCtxQueue(t *testing.T) {
	ctxs := make([]cmdCtx, 8)
	for i := range ctxs {
		ctxs[i].idx = uint32(i)
	}
	ids := func(q *ctxQueue) []uint32 {
		var out []uint32
		for c := q.front(); c != nil; c = c.next {
			out = append(out, c.idx)
		}
		return out
	}
	var q ctxQueue
	require.True(t, q.empty())
	require.Nil(t, q.pop())
	for i := 0; i < 5; i++ {
		q.push(&ctxs[i])
	}
	require.Equal(t, []uint32{0, 1, 2, 3, 4}, ids(&q))
	c := q.pop()
	require.Equal(t, uint32(0), c.idx)
	require.Nil(t, c.next)
	q.pushFront(c)
	require.Equal(t, []uint32{0, 1, 2, 3, 4}, ids(&q))

	var removed []uint32
	q.removeIf(func(c *cmdCtx) bool { return c.idx%2 == 1 }, func(c *cmdCtx) {
		removed = append(removed, c.idx)
		if c.idx == 1 {
			q.push(&ctxs[6]) // pushed while the queue is being swept
		}
	})
	require.Equal(t, []uint32{1, 3}, removed)
	require.Equal(t, []uint32{0, 2, 4, 6}, ids(&q))
	q.push(&ctxs[7])
	require.Equal(t, []uint32{0, 2, 4, 6, 7}, ids(&q), "the tail is right after a sweep")

	q.removeIf(func(*cmdCtx) bool { return true }, func(*cmdCtx) {})
	require.True(t, q.empty())
	q.push(&ctxs[5])
	require.Equal(t, []uint32{5}, ids(&q))
}
