package srp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestSessionsChannelInfo checks what operators see of the channels (srptarget sessions):
// their addresses, queue pair numbers, credits and login times, the session's LUN map, and
// the commands in progress, published by the channel goroutine without a lock.
func TestSessionsChannelInfo(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	before := time.Now()
	chs := h.loginMulti(h.cfg(), 2)
	clearUA(t, chs[0], 0)
	clearUA(t, chs[1], 0)

	testutil.WaitFor(t, "the channels' commands done", func() bool {
		s := h.tgt.Sessions()
		return len(s) == 1 && len(s[0].ChannelInfo) == 2 && s[0].ChannelInfo[0].InFlight == 0 && s[0].ChannelInfo[1].InFlight == 0
	})
	s := h.tgt.Sessions()
	require.Len(t, s, 1)
	require.NotNil(t, s[0].LUNMap)
	require.Len(t, s[0].LUNMap.Mappings(), 1)
	require.Len(t, s[0].ChannelInfo, 2)
	for i, ci := range s[0].ChannelInfo {
		require.Equal(t, chs[i].Conn().LocalAddr(), ci.Remote, "channel %d", i)
		require.NotZero(t, ci.QPNum, "channel %d", i)
		require.Equal(t, int(chs[i].LoginResponse().ReqLimDelta), ci.Credits, "channel %d", i)
		require.False(t, ci.LoginTime.Before(before), "channel %d", i)
		require.Zero(t, ci.InFlight, "channel %d", i)
	}
	require.NotEqual(t, s[0].ChannelInfo[0].QPNum, s[0].ChannelInfo[1].QPNum)

	// Three reads held in the logical unit are in flight on the second channel.
	h.gate.hold()
	var held []*srptest.Pending
	for i := range 3 {
		p, err := chs[1].Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(uint32(8*i), 8), DataInLen: 4096})
		require.NoError(t, err)
		held = append(held, p)
	}
	testutil.WaitFor(t, "three commands in flight on channel 1", func() bool {
		s := h.tgt.Sessions()
		return len(s) == 1 && len(s[0].ChannelInfo) == 2 && s[0].ChannelInfo[1].InFlight == 3 && s[0].ChannelInfo[0].InFlight == 0
	})
	h.gate.release()
	for _, p := range held {
		rsp, err := p.Wait(ctxT(t))
		require.NoError(t, err)
		require.True(t, rsp.Good())
	}
	testutil.WaitFor(t, "nothing in flight", func() bool {
		s := h.tgt.Sessions()
		return len(s) == 1 && s[0].ChannelInfo[1].InFlight == 0
	})
	// A command ends when its response is posted; its buffer goes back to the pool when the
	// channel reaps the SEND completion (here within its poll window).
	testutil.WaitFor(t, "the pool's buffers back", func() bool { inUse, _ := h.tgt.PoolUse(); return inUse == 0 })
	_, size := h.tgt.PoolUse()
	require.Positive(t, size)
}
