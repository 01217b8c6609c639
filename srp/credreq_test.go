package srp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// credReqBytes is an SRP_CRED_REQ written out by hand (include/scsi/srp.h struct srp_cred_req): opcode 81h,
// SOLNT 0, REQUEST LIMIT DELTA, TAG.
func credReqBytes(delta uint32, tag uint64) []byte {
	b := []byte{0x81, 0, 0, 0, byte(delta >> 24), byte(delta >> 16), byte(delta >> 8), byte(delta)}
	for i := 0; i < 8; i++ {
		b = append(b, byte(tag>>(56-8*i)))
	}
	return b
}

// abortOnOtherChannel holds n reads of idle in the logical unit, resets LUN 0 from resetter,
// and waits until the reset is answered: idle's commands end without a response.
func abortOnOtherChannel(t *testing.T, h *harness, idle, resetter *srptest.Channel, n int) {
	t.Helper()
	lbas := make([]uint32, n)
	for i := range lbas {
		lbas[i] = uint32(8 * i)
	}
	held := h.holdReads(t, idle, lbas...)
	time.AfterFunc(30*time.Millisecond, h.gate.release)
	code, err := resetter.ResetLUN(ctxT(t), 0)
	require.NoError(t, err)
	require.Equal(t, uint8(iu.TskMgmtSuccess), code)
	for _, p := range held {
		select {
		case <-p.Done():
			t.Fatal("an aborted command got a response")
		default:
		}
		p.Forget() // as ib_srp does after the reset: the credit is not given back
	}
}

// TestCredReqIdleChannel: a LOGICAL UNIT RESET on channel 0 aborts the commands of channel 1,
// which then has nothing outstanding. The credits it owes come back at once in an SRP_CRED_REQ
// (not only with a later response, which an initiator short of credits might never get), the
// initiator answers SRP_CRED_RSP, and the next time the same happens another SRP_CRED_REQ goes
// out (so the answer was taken).
func TestCredReqIdleChannel(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	chs := h.loginMulti(h.cfg(), 2)
	clearUA(t, chs[0], 0)
	for round := uint64(1); round <= 2; round++ {
		abortOnOtherChannel(t, h, chs[1], chs[0], 3)
		iu, err := chs[1].NextUnsolicited(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, credReqBytes(3, round), iu)
		testutil.WaitFor(t, "the credits back", func() bool { return chs[1].Credits() == 128 })
		require.Equal(t, round, chs[1].Stats().CredReqs)
		require.Equal(t, round, h.tgt.Stats().CreditRequests)
		// Channel 1 works; its response grants 1, nothing is owed any more.
		rsp, err := chs[1].TestUnitReady(ctxT(t), 0)
		require.NoError(t, err)
		k, asc, ascq := senseOf(t, rsp)
		require.Equal(t, []uint8{0x06, 0x29, 0x03}, []uint8{k, asc, ascq})
		require.Equal(t, uint32(1), rsp.ReqLimDelta)
	}
	require.Equal(t, int64(128), chs[0].Credits())
	require.Zero(t, chs[0].Stats().CredReqs, "channel 0 owed nothing")
	for _, ch := range chs {
		require.Empty(t, ch.ProtocolErrors())
	}
	h.waitIdle()
}

// TestCredReqFewCredits: with 4 credits, channel 1 can have 3 commands in flight and keeps one
// for task management; all 3 aborted leave it one credit, too few for another command. The
// SRP_CRED_REQ gives it all 4 back without granting more than the receive buffers posted
// (minus the one that takes the SRP_CRED_RSP: the harness checks CreditViolations).
func TestCredReqFewCredits(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true, limits: srp.Limits{Credits: 4}})
	chs := h.loginMulti(h.cfg(), 2)
	require.Equal(t, uint32(4), chs[1].LoginResponse().ReqLimDelta)
	require.Equal(t, 3, chs[1].CanQueue())
	clearUA(t, chs[0], 0)
	abortOnOtherChannel(t, h, chs[1], chs[0], 3)
	iu, err := chs[1].NextUnsolicited(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, credReqBytes(3, 1), iu)
	testutil.WaitFor(t, "the credits back", func() bool { return chs[1].Credits() == 4 })
	clearUA(t, chs[1], 0)
	// Three commands in flight at once again.
	ps := h.holdReads(t, chs[1], 0, 8, 16)
	h.gate.release()
	for _, p := range ps {
		rsp, err := p.Wait(ctxT(t))
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
	}
	require.Equal(t, int64(4), chs[1].Credits())
	require.Zero(t, h.tgt.Stats().CreditViolations)
}
