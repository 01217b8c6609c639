package memfabric

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// TestCompChannelAlso: one Serve waits for the channels of two devices (nodes): an event raised
// on the other's channel before the Serve, and one on its own during it, reach its step, each
// naming its CQ; after the Serve the other channel serves by itself again.
func TestCompChannelAlso(t *testing.T) {
	e := newEnv(t, Options{})
	mk := func(n *Node) (ib.CompChannel, ib.CQ) {
		sq := n.PD().(ib.SharedQueues)
		ch, err := sq.NewCompChannel()
		require.NoError(t, err)
		cq, err := sq.NewCQ(ch, 64, 0)
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, cq.Close())
			require.NoError(t, ch.Close())
		})
		return ch, cq
	}
	tch, tcq := mk(e.target)
	ich, icq := mk(e.initiator)
	cp := srpConnect()
	cp.CQ = icq
	ap := srpAccept()
	ap.CQ = tcq
	tc, ic := e.connect(t, cp, ap)
	t.Cleanup(func() { _ = tc.Close(); _ = ic.Close() })
	tmr := register(t, e.target.PD(), 256, ib.AccessLocalWrite)
	imr := register(t, e.initiator.PD(), 256, ib.AccessLocalWrite)
	_, err := tc.PostRecv(recvs(tmr, []uint64{1}, 64))
	require.NoError(t, err)
	_, err = ic.PostRecv(recvs(imr, []uint64{1}, 64))
	require.NoError(t, err)
	require.NoError(t, tcq.Arm())
	require.NoError(t, icq.Arm())

	// The initiator's CQ fires before the Serve: the target's channel's Serve takes it.
	_, err = tc.PostSend([]ib.SendWR{{ID: 7, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr, Offset: 128, Length: 4}}}})
	require.NoError(t, err)
	var got []ib.CQ
	sent := false
	timer := time.AfterFunc(waitLimit, tch.Interrupt)
	defer timer.Stop()
	calls := 0
	require.NoError(t, tch.Serve([]ib.CompChannel{ich}, func(fired []ib.CQ) bool {
		calls++
		got = append(got, fired...)
		if !sent && len(got) > 0 {
			// Then the target's own CQ, during the Serve.
			sent = true
			_, err := ic.PostSend([]ib.SendWR{{ID: 8, Op: ib.OpSend, SGL: []ib.SGE{{MR: imr, Offset: 128, Length: 4}}}})
			require.NoError(t, err)
		}
		return len(got) == 2 || calls > 100
	}))
	require.Equal(t, []ib.CQ{icq, tcq}, got)

	// The initiator's channel serves by itself again.
	require.NoError(t, icq.Arm())
	_, err = ic.PostRecv(recvs(imr, []uint64{2}, 64))
	require.NoError(t, err)
	_, err = tc.PostSend([]ib.SendWR{{ID: 9, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr, Offset: 128, Length: 4}}}})
	require.NoError(t, err)
	got = nil
	require.NoError(t, ich.Serve(nil, func(fired []ib.CQ) bool {
		got = append(got, fired...)
		return len(got) > 0
	}))
	require.Equal(t, []ib.CQ{icq}, got)
}
