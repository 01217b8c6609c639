package srp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestSecOverdrawCannotTakeSharedReceives: the receive buffers of a poll group's shared
// receive queue serve all of its channels, so an initiator that sends more IUs than its
// credits would take the buffers the others' commands land in. The attacker sends READs that
// stay in the logical unit (each holds its IU's buffer) well beyond its 8 credits: once it
// holds more than its credits and the spare one it is logged out and its channel closed, its
// buffers go back, and another initiator of the same group keeps being served throughout.
func TestSecOverdrawCannotTakeSharedReceives(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true, limits: srp.Limits{Credits: 8, SRQDepth: 32, PollGroups: 1}})
	victim := h.login(srptest.Config{Addr: h.addr, TargetPortID: testPortID, Source: netip.MustParseAddr("198.19.4.2")})
	clearUA(t, victim, 0)

	attacker := newRawConn(t, h, "198.19.4.1", 32)
	attacker.send(tur(1)) // the unit attention of the attacker's nexus
	attacker.recv()
	mem := make([]byte, 8*testBlockSize)
	mr, err := attacker.pd.RegisterMemory(mem, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	require.NoError(t, err)
	defer func() { _ = mr.Deregister() }()

	h.gate.hold()
	for tag := iu.Tag(2); tag < 2+16; tag++ {
		attacker.send(stuckRead(tag, mr, 8))
	}
	h.waitStats("the attacker logged out", func(s srp.Stats) bool { return s.ProtocolErrors == 1 })
	e, ok := h.logged("protocol violation: logging the initiator out and closing the channel")
	require.True(t, ok)
	require.Contains(t, e.ContextMap()["what"], "more than the 8 credits granted")
	require.Contains(t, e.ContextMap()["src"], "198.19.4.1")
	// The protocol-error counter moves before SRP_T_LOGOUT is on the wire: wait for it (recv
	// fails the test after 10 s without an IU).
	for iu.Opcode(attacker.recv()[0]) != iu.OpTLogout {
	}

	// The victim's commands land in the shared queue meanwhile (TEST UNIT READY does not
	// reach the held logical unit).
	for range 20 {
		rsp, err := victim.TestUnitReady(ctxT(t), 0)
		require.NoError(t, err)
		require.True(t, rsp.Good())
	}
	h.gate.release()
	h.waitStats("the attacker's channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 1 })
	start := time.Now()
	rsp, err := victim.Read10(ctxT(t), 0, 0, 8, testBlockSize)
	require.NoError(t, err)
	require.True(t, rsp.Good())
	require.Less(t, time.Since(start), time.Second)
	h.waitIdle()
}
