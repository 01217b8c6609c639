package srp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// TestWaitClaimedContextReused is the LUN reset that never finished under `sg_reset -d` and
// `sg_reset -b` in the VM (make stress, "resets"): a task management function claims two
// commands and waits for the first; meanwhile the second is released and its context reused
// at once for a new IU, whose start discards the release signal as stale. The function must
// still see the second command released.
func TestWaitClaimedContextReused(t *testing.T) {
	tgt := &Target{lim: Limits{}.withDefaults(), log: zap.NewNop()}
	ch := &channel{t: tgt, sess: &session{nexus: &scsi.Nexus{}}, g: newPollGroup(tgt, 0)}
	ch.nctx = 2
	ch.initCtxs()
	for i := range 2 {
		takeCtx(ch).activate(ctxCmd, uint64(i+1), iu.Tag(100+i), 0, nil)
	}
	claimed := claim([]*channel{ch}, 10, func(*cmdCtx) bool { return true })
	require.Len(t, claimed, 2)
	first, second := ch.ctxs.at(claimed[0].c.idx), ch.ctxs.at(claimed[1].c.idx)

	done := make(chan struct{})
	go func() {
		defer close(done)
		waitClaimed(claimed)
	}()
	// The second command ends first and its context starts the next IU at once.
	second.free()
	second.discardAbortSignal()
	second.activate(ctxCmd, 11, iu.Tag(200), 0, nil)
	select {
	case <-done:
		t.Fatal("waitClaimed returned while the first command was still claimed")
	case <-time.After(3 * tmfRetry):
	}
	first.free()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("waitClaimed still waits for a command that was released and whose context was reused")
	}
	require.Equal(t, ctxCmd, second.state(), "the new command on the reused context is not touched")
}
