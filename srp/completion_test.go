package srp_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp"
)

// TestCompletionModes moves data at queue depth 16 on two channels in every completion mode,
// on a RAM LUN (commands run on the group goroutine) and a file LUN (on workers), with the
// channels' IUs in a shared receive queue or in receive queues of their own, and both channels
// in one poll group or in two. In the event and adaptive modes the group arms its completion
// queues itself: a lost wake-up would hang a command until the test's deadline.
func TestCompletionModes(t *testing.T) {
	for _, mode := range []srp.CompletionMode{srp.CompletionEvent, srp.CompletionAdaptive, srp.CompletionPoll} {
		for _, c := range []struct {
			file   bool
			srq    int
			groups int
		}{{false, 0, 1}, {true, 0, 1}, {false, -1, 2}, {true, -1, 2}, {true, 0, 2}} {
			file := c.file
			t.Run(fmt.Sprintf("%v/file=%v/srq=%v/groups=%d", mode, file, c.srq == 0, c.groups), func(t *testing.T) {
				h := newHarness(t, harnessOpts{fileLUN: file,
					limits: srp.Limits{Completion: mode, PollWindow: 200 * time.Microsecond, SRQDepth: c.srq, PollGroups: c.groups}})
				chs := h.loginMulti(h.cfg(), 2)
				for _, ch := range chs {
					clearUA(t, ch, 0)
				}
				const size = 8192
				var g errgroup.Group
				for w := 0; w < 16; w++ {
					ch := chs[w%2]
					g.Go(func() error {
						ctx := ctxT(t)
						for i := 0; i < 8; i++ {
							lba := uint32((w*8 + i) * size / testBlockSize)
							if err := writeReadBack(ctx, ch, lba, testutil.Pattern(size, w*100+i), nil); err != nil {
								return err
							}
						}
						return nil
					})
				}
				require.NoError(t, g.Wait())
				st := h.tgt.Stats()
				require.Positive(t, st.SendPosts)
				require.GreaterOrEqual(t, st.SendWRs, st.SendPosts)
				h.waitIdle()
			})
		}
	}
}

// TestCompletionFor: a one-CPU host sleeps on completion events (polling would take the CPU
// the kernel's soft-RoCE work needs), anything bigger polls adaptively; the default follows
// this process's CPUs.
func TestCompletionFor(t *testing.T) {
	for _, tc := range []struct {
		ncpu int
		want srp.CompletionMode
	}{
		{0, srp.CompletionEvent}, // runtime.NumCPU never says 0; fail safe if it did
		{1, srp.CompletionEvent},
		{2, srp.CompletionAdaptive},
		{64, srp.CompletionAdaptive},
	} {
		require.Equal(t, tc.want, srp.CompletionFor(tc.ncpu), "ncpu %d", tc.ncpu)
	}
	require.Equal(t, srp.CompletionFor(runtime.NumCPU()), srp.DefaultCompletion)
}
