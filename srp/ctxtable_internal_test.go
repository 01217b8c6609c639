package srp

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/srp/iu"
)

// takeCtx takes a context as handleIU does: a free one, else one of a chunk made for it.
func takeCtx(ch *channel) *cmdCtx {
	if c := ch.allocCtx(); c != nil {
		return c
	}
	return ch.allocNewCtx()
}

// TestCtxTableGrows: a channel starts with one chunk of contexts and makes the next only when
// every one made is busy, up to nctx and never beyond; each context keeps its index and the
// send buffer of that index, and stays where it was made.
func TestCtxTableGrows(t *testing.T) {
	const nctx = 2*ctxChunkLen + 8
	ch := testChannel(&recordConn{}, 4)
	ch.nctx, ch.sendStride, ch.sendBufOff = nctx, 256, 4096
	ch.initCtxs()
	require.Equal(t, ctxChunkLen, ch.ctxs.n, "one chunk at construction")
	require.Len(t, ch.free, ctxChunkLen)
	require.Zero(t, ch.ctxInUse())

	var got []*cmdCtx
	for i := 0; i < nctx; i++ {
		c := takeCtx(ch)
		require.NotNil(t, c, "context %d", i)
		got = append(got, c)
		require.Equal(t, min(nctx, (i/ctxChunkLen+1)*ctxChunkLen), ch.ctxs.n, "made only when needed")
	}
	require.Nil(t, takeCtx(ch), "all nctx busy")
	require.Equal(t, nctx, ch.ctxs.n)
	require.Equal(t, nctx, ch.ctxInUse())
	for i, c := range got {
		require.Equal(t, uint32(i), c.idx, "handed out in index order")
		require.Same(t, c, ch.ctxs.at(c.idx))
		require.Same(t, ch, c.ch)
		require.Equal(t, ch.sendBufOff+uint64(i*ch.sendStride), c.sendOff)
		require.Equal(t, int32(-1), c.recv)
		require.NotNil(t, c.abortDone)
	}
	require.True(t, ch.ctxs.made(nctx-1))
	require.False(t, ch.ctxs.made(nctx), "the rest of the last chunk is not made")

	// A context given back is taken again before anything new is made.
	ch.free = append(ch.free, got[5])
	require.Same(t, got[5], takeCtx(ch))
	require.Equal(t, nctx, ch.ctxs.n)

	var made, published int
	ch.ctxs.forMade(func(*cmdCtx) { made++ })
	ch.ctxs.forPublished(func(*cmdCtx) { published++ })
	require.Equal(t, nctx, made)
	require.Equal(t, 3*ctxChunkLen, published, "whole chunks, the unused tail free")
}

// TestClaimWhileContextsGrow: task management looks at a channel's contexts from its own
// goroutine while the channel makes more (run with -race), and claims every command of the
// chunks made.
func TestClaimWhileContextsGrow(t *testing.T) {
	const nctx = 4 * ctxChunkLen
	ch := testChannel(&recordConn{}, 4)
	ch.t.log = zap.NewNop()
	ch.g = newPollGroup(ch.t, 0)
	ch.nctx, ch.sendStride = nctx, 256
	ch.initCtxs()
	done := make(chan struct{})
	var scans atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
				require.Empty(t, claim([]*channel{ch}, 1<<62, func(*cmdCtx) bool { return false }))
				scans.Add(1)
			}
		}
	}()
	for i := 0; i < nctx; i++ {
		// Each context is made or taken between two of the claimer's scans.
		for s := scans.Load(); scans.Load() == s; {
			runtime.Gosched()
		}
		takeCtx(ch).activate(ctxCmd, uint64(i+1), iu.Tag(i), 0, nil)
	}
	close(done)
	wg.Wait()
	claimed := claim([]*channel{ch}, 1<<62, func(*cmdCtx) bool { return true })
	require.Len(t, claimed, nctx)
	for _, cl := range claimed {
		require.Equal(t, ctxAbortedTMF, cl.c.state())
	}
}
