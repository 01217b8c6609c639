package memfabric

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

// TestArmNotify checks the ibv_req_notify_cq semantics: before the first ArmNotify every
// completion signals Ready; after it, only the first completion after each arm does.
func TestArmNotify(t *testing.T) {
	e := newEnv(t, Options{})
	tmr := register(t, e.target.PD(), 256, ib.AccessLocalWrite)
	ap := srpAccept()
	ap.Recv = recvs(tmr, []uint64{1, 2, 3, 4}, 64)
	imr := register(t, e.initiator.PD(), 256, ib.AccessLocalWrite)
	tc, ic := e.connect(t, srpConnect(), ap)
	ibtest.ReadySignalled(tc) // the connection's establishment
	send := func(id uint64) {
		t.Helper()
		_, err := ic.PostSend([]ib.SendWR{{ID: id, Op: ib.OpSend, SGL: []ib.SGE{{MR: imr, Length: 8}}}})
		require.NoError(t, err)
		require.Equal(t, []ib.Completion{ibtest.Recvd(id, 8)}, poll(t, tc, 1))
	}

	// Self-arming until the consumer takes over: every completion signals.
	send(1)
	ibtest.ReadySignalled(tc)
	_, err := ic.PostSend([]ib.SendWR{{ID: 2, Op: ib.OpSend, SGL: []ib.SGE{{MR: imr, Length: 8}}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ibtest.ReadySignalled(tc) }, waitLimit, time.Millisecond)
	require.Equal(t, []ib.Completion{ibtest.Recvd(2, 8)}, poll(t, tc, 1))

	armer, ok := tc.(ib.NotifyArmer)
	require.True(t, ok, "memfabric connections implement ib.NotifyArmer")
	require.NoError(t, armer.ArmNotify(false))
	_, err = ic.PostSend([]ib.SendWR{
		{ID: 3, Op: ib.OpSend, SGL: []ib.SGE{{MR: imr, Length: 8}}},
		{ID: 4, Op: ib.OpSend, SGL: []ib.SGE{{MR: imr, Length: 8}}},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ibtest.ReadySignalled(tc) }, waitLimit, time.Millisecond, "the first completion after the arm signals")
	var wcs [4]ib.Completion
	require.Eventually(t, func() bool {
		n, err := tc.PollCompletions(wcs[:])
		require.NoError(t, err)
		return n > 0
	}, waitLimit, time.Millisecond)
	require.False(t, ibtest.ReadySignalled(tc), "no second signal without a new arm")
}
