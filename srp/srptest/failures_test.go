package srptest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp/iu"
)

// holdReads makes the fake target keep READ commands without answering.
func holdReads(ft *fakeTarget) {
	ft.onCmd = func(fc *fakeChan, msg []byte) bool {
		if op := iu.Cmd(msg).CDB()[0]; op == opRead10 || op == opRead16 {
			return hold(fc, msg)
		}
		return false
	}
}

func heldIU(t *testing.T, fc *fakeChan) []byte {
	t.Helper()
	testutil.WaitFor(t, "a held command", func() bool { return len(fc.heldTags()) == 1 })
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, msg := range fc.held {
		return msg
	}
	return nil
}

// loggedIn sets up a fake target tuned by tune on an in-memory fabric and logs one channel in
// to it, closed when the test ends; ctx bounds the test's waits.
func loggedIn(t *testing.T, tune func(ft *fakeTarget)) (context.Context, *fakeTarget, *Channel) {
	t.Helper()
	fab, ft := setup(t, memfabric.Options{}, tune)
	ctx := testCtx(t)
	ch, err := Login(ctx, fab, Config{Addr: ft.addr})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ctx, ft, ch
}

// submitHeld submits a one-block READ(10), which the fake target (holdReads) keeps without
// an answer, and returns it with the SRP_CMD the target's channel fc holds.
func submitHeld(t *testing.T, ctx context.Context, ch *Channel, fc *fakeChan) (*Pending, []byte) {
	t.Helper()
	p, err := ch.Submit(ctx, &Request{CDB: CDBRead10(0, 1), DataInLen: 512})
	require.NoError(t, err)
	return p, heldIU(t, fc)
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Vanish: no DREQ reaches the target, and its next SEND towards the initiator fails with a
// transport retry error; commands in flight end with ErrClosed.
func TestVanish(t *testing.T) {
	ctx, ft, ch := loggedIn(t, holdReads)
	fc := ft.channel(0)
	p, held := submitHeld(t, ctx, ch, fc)

	ch.Vanish()
	_, err := p.Wait(ctx)
	require.ErrorIs(t, err, ErrClosed)
	waitClosed(t, "Disconnected", ch.Disconnected())
	require.ErrorIs(t, ch.Err(), ErrClosed)
	require.NoError(t, ch.Close(), "Close after Vanish does nothing")

	fc.exec(func() {
		fc.respond(&iu.RspFields{Tag: iu.Cmd(held).Tag(), ReqLimDelta: 1}, nil)
	})
	testutil.WaitFor(t, "the target's SEND to fail", func() bool { return len(fc.errors()) > 0 })
	require.Equal(t, ib.StatusTransportRetryExceeded, fc.errors()[0].Status)
	fc.mu.Lock()
	require.False(t, fc.sawDREQ, "a vanished initiator sends no DREQ")
	fc.mu.Unlock()
}

// A target DREQ ends the channel: commands in flight fail with ErrDisconnected and the
// initiator answers the DREQ.
func TestTargetDisconnects(t *testing.T) {
	ctx, ft, ch := loggedIn(t, holdReads)
	fc := ft.channel(0)
	p, _ := submitHeld(t, ctx, ch, fc)

	fc.exec(func() { require.NoError(t, fc.conn.Disconnect()) })
	_, err := p.Wait(ctx)
	require.ErrorIs(t, err, ErrDisconnected)
	waitClosed(t, "Disconnected", ch.Disconnected())
	require.ErrorIs(t, ch.Err(), ErrDisconnected)
	_, err = ch.TestUnitReady(ctx, 0)
	require.ErrorIs(t, err, ErrDisconnected)
	_, err = ch.TaskMgmt(ctx, iu.TskAbortTask, 0, p.Tag())
	require.ErrorIs(t, err, ErrDisconnected)
	require.ErrorIs(t, ch.SendRaw([]byte{0x03}), ErrDisconnected)
	_, err = ch.NextUnsolicited(ctx)
	require.ErrorIs(t, err, ErrDisconnected)
	require.NoError(t, ch.Close())
}

// Data buffers are deregistered when the response arrives: an RDMA WRITE after it fails with a
// remote access error, which (RC semantics) breaks the connection.
func TestLateRDMAFails(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) {
		ft.onCmd = func(fc *fakeChan, msg []byte) bool {
			if iu.Cmd(msg).CDB()[0] != opRead10 {
				return false
			}
			hold(fc, msg)
			// Answer at once, without data.
			fc.respond(&iu.RspFields{Tag: iu.Cmd(msg).Tag(), ReqLimDelta: 1, Flags: iu.DIUNDER, DataInResCnt: 512}, nil)
			return true
		}
	})
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr})
	fc := ft.channel(0)
	rsp, err := ch.Read10(ctx, 0, 0, 1, 512)
	require.NoError(t, err)
	require.Empty(t, rsp.DataIn)

	_, in, err := iu.Cmd(heldIU(t, fc)).DataBuffers(fc.immOff)
	require.NoError(t, err)
	d := in.DescriptorAt(0)
	var st ib.Status
	fc.exec(func() {
		src, err := fc.pd.RegisterMemory(make([]byte, 512), 0)
		require.NoError(t, err)
		st = fc.rdma(ib.OpRDMAWrite, src, 0, 512, d.VA(), d.Key())
		_ = src.Deregister()
	})
	require.Equal(t, ib.StatusRemoteAccessError, st)
	waitClosed(t, "Disconnected", ch.Disconnected())
	require.ErrorIs(t, ch.Err(), ErrTransport)
}

// Registration access rights are per direction: reading a data-in buffer fails.
func TestWrongDirectionFails(t *testing.T) {
	ctx, ft, ch := loggedIn(t, holdReads)
	fc := ft.channel(0)
	_, msg := submitHeld(t, ctx, ch, fc)
	_, in, err := iu.Cmd(msg).DataBuffers(fc.immOff)
	require.NoError(t, err)
	d := in.DescriptorAt(0)
	var st ib.Status
	fc.exec(func() {
		dst, err := fc.pd.RegisterMemory(make([]byte, 512), ib.AccessLocalWrite)
		require.NoError(t, err)
		st = fc.rdma(ib.OpRDMARead, dst, 0, 512, d.VA(), d.Key())
		_ = dst.Deregister()
	})
	require.Equal(t, ib.StatusRemoteAccessError, st)
}

// An IU longer than the MAXIMUM TI IU LENGTH the target granted does not fit the receive
// buffer: a protocol error, and the connection breaks.
func TestOversizedIU(t *testing.T) {
	_, ft, ch := loggedIn(t, nil)
	msg := make([]byte, 8261)
	_, _ = iu.Rsp(msg).Encode(&iu.RspFields{Tag: 1, ReqLimDelta: 1})
	ft.channel(0).send(msg)
	waitClosed(t, "Disconnected", ch.Disconnected())
	require.ErrorIs(t, ch.Err(), ErrTransport)
	errs := ch.ProtocolErrors()
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), "longer than the MAXIMUM TI IU LENGTH 8260")
}

func TestMalformedResponses(t *testing.T) {
	ctx, ft, ch := loggedIn(t, holdReads)
	fc := ft.channel(0)

	// SNSVALID without sense data: the command ends with ErrProtocol, its credits count.
	p, msg := submitHeld(t, ctx, ch, fc)
	tag := iu.Cmd(msg).Tag()
	bad := encodeIU(t, iu.RspMinSize, func(b []byte) (int, error) {
		return iu.Rsp(b).Encode(&iu.RspFields{Tag: tag, ReqLimDelta: 2})
	})
	bad[18] |= byte(iu.SNSVALID)
	fc.mu.Lock()
	delete(fc.held, tag)
	fc.mu.Unlock()
	fc.send(bad)
	_, err := p.Wait(ctx)
	require.ErrorIs(t, err, ErrProtocol)
	require.Equal(t, int64(33), ch.Credits())

	// A DIUNDER residual larger than the buffer: no valid data, a protocol error.
	p, msg = submitHeld(t, ctx, ch, fc)
	tag = iu.Cmd(msg).Tag()
	fc.send(encodeIU(t, iu.RspMinSize, func(b []byte) (int, error) {
		return iu.Rsp(b).Encode(&iu.RspFields{Tag: tag, ReqLimDelta: 1, Flags: iu.DIUNDER, DataInResCnt: 513})
	}))
	rsp, err := p.Wait(ctx)
	require.NoError(t, err)
	require.Empty(t, rsp.DataIn)
	require.Equal(t, uint32(513), rsp.DataInResidual)

	// Opcodes a target never sends, and an empty-tag SRP_RSP.
	fc.send([]byte{0x02, 0, 0, 0})
	fc.send([]byte{0xc1, 0, 0, 0, 0, 0, 0, 1, 0, 0})
	testutil.WaitFor(t, "protocol errors", func() bool { return len(ch.ProtocolErrors()) == 4 })
	errs := ch.ProtocolErrors()
	require.Contains(t, errs[0].Error(), "inconsistent")
	require.Contains(t, errs[1].Error(), "DIUNDER residual 513 exceeds the 512-byte data-in buffer")
	require.Contains(t, errs[2].Error(), "unexpected SRP_CMD from the target")
	require.Contains(t, errs[3].Error(), "SRP_RSP of 10 bytes has no TAG")
	for _, want := range [][]byte{{0x02, 0, 0, 0}, {0xc1, 0, 0, 0, 0, 0, 0, 1, 0, 0}} {
		msg, err := ch.NextUnsolicited(ctx)
		require.NoError(t, err)
		require.Equal(t, want, msg)
	}
	require.Equal(t, int64(34), ch.Credits(), "32 - 1 + 2 - 1 + 1, and the short SRP_RSP still carried a delta of 1")
	require.Equal(t, uint64(4), ch.Stats().ProtocolErrors)
}

func TestDeviceRemoved(t *testing.T) {
	ctx, _, ch := loggedIn(t, holdReads)
	p, err := ch.Submit(ctx, &Request{CDB: CDBRead10(0, 1), DataInLen: 512})
	require.NoError(t, err)
	ch.Node().Remove()
	_, err = p.Wait(ctx)
	require.ErrorIs(t, err, ErrDisconnected)
	require.Contains(t, ch.Err().Error(), "device removed")
}

func TestCreditWaitContext(t *testing.T) {
	fab, ft := stingyTarget(t, 2)
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr})
	_, err := ch.TestUnitReady(ctx, 0)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = ch.TestUnitReady(short, 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, int64(1), ch.Credits())
	require.Equal(t, uint64(1), ch.Stats().ZeroReqLim)
	require.Equal(t, uint64(1), ch.Stats().Commands)
}

// A later channel that is rejected leaves the earlier ones in place, as in ib_srp.
func TestLoginMultiPartial(t *testing.T) {
	n := 0
	fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) {
		ft.login = func(f iu.LoginReqFields) (*iu.LoginRspFields, *iu.LoginRejFields) {
			n++ // the fake target accepts one request at a time
			if n == 3 {
				return nil, &iu.LoginRejFields{Reason: iu.LoginRejChannelLimitReached}
			}
			return &iu.LoginRspFields{ReqLimDelta: 8, Tag: f.Tag, MaxITIULen: 8276, MaxTIIULen: 8260}, nil
		}
	})
	ctx := testCtx(t)
	chans, err := LoginMulti(ctx, fab, Config{Addr: ft.addr}, 4)
	var rej *LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, iu.LoginRejChannelLimitReached, rej.Reason)
	require.Len(t, chans, 2)
	for _, ch := range chans {
		_, err := ch.TestUnitReady(ctx, 0)
		require.NoError(t, err)
		require.NoError(t, ch.Close())
	}
	ft.mu.Lock()
	require.Len(t, ft.logins, 3, "no fourth attempt")
	ft.mu.Unlock()
}

// Logging in again from the same node keeps the initiator port identifier (one I_T nexus).
func TestReloginFromSameNode(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, nil)
	ctx := testCtx(t)
	ch, err := Login(ctx, fab, Config{Addr: ft.addr})
	require.NoError(t, err)
	ch.Vanish()
	ch2, err := Login(ctx, fab, Config{Addr: ft.addr, Node: ch.Node()})
	require.NoError(t, err)
	defer ch2.Close()
	require.Equal(t, ch.LoginRequestIU(), ch2.LoginRequestIU())
	ft.mu.Lock()
	require.Equal(t, ft.logins[0].InitiatorPortID, ft.logins[1].InitiatorPortID)
	ft.mu.Unlock()
	// A different node is a different initiator.
	ch3, err := Login(ctx, fab, Config{Addr: ft.addr})
	require.NoError(t, err)
	defer ch3.Close()
	require.NotEqual(t, ch.LoginRequestIU(), ch3.LoginRequestIU())
}

// Closing the fabric under a channel ends it, and its goroutine, without Close.
func TestFabricClosedUnderChannel(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, nil)
	ch, err := Login(testCtx(t), fab, Config{Addr: ft.addr})
	require.NoError(t, err)
	require.NoError(t, fab.Close())
	waitClosed(t, "Disconnected", ch.Disconnected())
	require.ErrorIs(t, ch.Err(), ErrDisconnected)
	// goleak in TestMain checks that the poller is gone.
}

// A target that disconnects as soon as it receives SRP_I_LOGOUT: the logout still succeeded.
func TestLogoutTargetDisconnectsAtOnce(t *testing.T) {
	for _, async := range []bool{false, true} {
		fab, ft := setup(t, memfabric.Options{Async: async}, func(ft *fakeTarget) { ft.dreqOnLogout = true })
		for range 20 {
			ch, err := Login(testCtx(t), fab, Config{Addr: ft.addr})
			require.NoError(t, err)
			require.NoError(t, ch.Logout())
		}
	}
}
