package srp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
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
	h.gate.hold()
	var held []*srptest.Pending
	for i := 0; i < n; i++ {
		p, err := idle.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(uint32(8*i), 8), DataInLen: 4096})
		require.NoError(t, err)
		held = append(held, p)
	}
	testutil.WaitFor(t, "the reads in the backstore", func() bool { return h.gate.entered.Load() == int32(n) })
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
		msg, err := chs[1].NextUnsolicited(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, credReqBytes(3, round), msg)
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
	msg, err := chs[1].NextUnsolicited(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, credReqBytes(3, 1), msg)
	testutil.WaitFor(t, "the credits back", func() bool { return chs[1].Credits() == 4 })
	clearUA(t, chs[1], 0)
	// Three commands in flight at once again.
	h.gate.hold()
	var ps []*srptest.Pending
	for i := 0; i < 3; i++ {
		p, err := chs[1].Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(uint32(8*i), 8), DataInLen: 4096})
		require.NoError(t, err)
		ps = append(ps, p)
	}
	testutil.WaitFor(t, "three reads in the backstore", func() bool { return h.gate.entered.Load() == 3 })
	h.gate.release()
	for _, p := range ps {
		rsp, err := p.Wait(ctxT(t))
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
	}
	require.Equal(t, int64(4), chs[1].Credits())
	require.Zero(t, h.tgt.Stats().CreditViolations)
}

// TestCredReqUnanswered: an initiator that does not answer SRP_CRED_REQ gets no second one;
// credits owed meanwhile come back with the next response. A SRP_CRED_RSP with the wrong tag
// is ignored; the right one lets the next SRP_CRED_REQ go out.
func TestCredReqUnanswered(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	r := newRawConn(t, h, "198.19.2.1", 16)
	r.send(tur(1))
	require.Equal(t, iu.Tag(1), iu.Rsp(r.recv()).Tag()) // POWER ON unit attention
	other := h.login(h.cfg())
	clearUA(t, other, 0)
	buf := make([]byte, 4096)
	dmr, err := r.pd.RegisterMemory(buf, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	require.NoError(t, err)
	defer func() { _ = dmr.Deregister() }()
	read := func(tag iu.Tag) []byte {
		n, _ := iu.CmdLen(&iu.CmdFields{DataIn: iu.DataBufFields{Format: iu.DescDirect}})
		b := make([]byte, n)
		_, err := iu.Cmd(b).Encode(&iu.CmdFields{Tag: tag, CDB: [16]byte{0x28, 0, 0, 0, 0, 0, 0, 0, 8},
			DataIn: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: dmr.Addr(), Key: dmr.RKey(), Len: 4096}}})
		require.NoError(t, err)
		return b
	}
	// abort has a read of the raw initiator aborted by a LUN reset from the other session.
	aborted := uint64(0)
	abort := func(tag iu.Tag) {
		// The previous reset left BUS DEVICE RESET FUNCTION OCCURRED pending: take it first,
		// or the read would not reach the backstore.
		r.send(tur(tag + 100))
		require.Equal(t, tag+100, iu.Rsp(r.recv()).Tag())
		h.gate.hold()
		r.send(read(tag))
		testutil.WaitFor(t, "the read in the backstore", func() bool { return h.gate.entered.Load() == 1 })
		time.AfterFunc(30*time.Millisecond, h.gate.release)
		code, err := other.ResetLUN(ctxT(t), 0)
		require.NoError(t, err)
		require.Equal(t, uint8(iu.TskMgmtSuccess), code)
		aborted++
		h.waitStats("the abort", func(s srp.Stats) bool { return s.Aborted == aborted })
		clearUA(t, other, 0)
	}

	abort(2)
	require.Equal(t, credReqBytes(1, 1), r.recv())
	abort(3)
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, uint64(1), h.tgt.Stats().CreditRequests, "one SRP_CRED_REQ outstanding at a time")
	r.send(tur(4))
	rsp := iu.Rsp(r.recv())
	require.Equal(t, iu.Tag(4), rsp.Tag())
	require.Equal(t, uint32(2), rsp.ReqLimDelta(), "1 + the credit owed for tag 3")

	// SRP_CRED_RSP with a tag no request had: ignored, the channel stays up.
	rspIU := make([]byte, iu.CredRspSize)
	iu.CredRsp(rspIU).Encode(&iu.CredRspFields{Tag: 7})
	r.send(rspIU)
	abort(5)
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, uint64(1), h.tgt.Stats().CreditRequests)
	_, ok := h.logged("SRP_CRED_RSP answers no outstanding SRP_CRED_REQ: ignored")
	require.True(t, ok)
	// The real answer: the credit owed for tag 5 goes out in the next SRP_CRED_REQ.
	iu.CredRsp(rspIU).Encode(&iu.CredRspFields{Tag: 1})
	r.send(rspIU)
	require.Equal(t, credReqBytes(1, 2), r.recv())
	require.Equal(t, uint64(2), h.tgt.Stats().CreditRequests)
	require.Zero(t, h.tgt.Stats().ProtocolErrors)
	h.waitIdle()
}
