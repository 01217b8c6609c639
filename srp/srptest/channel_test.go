package srptest

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"

	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
)

var testTargetPort = iu.PortID{0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef}

// setup makes a fabric and a fake target; options are applied before it starts listening.
// Everything is closed at the end of the test, target first.
func setup(t *testing.T, opts memfabric.Options, tune func(ft *fakeTarget)) (*memfabric.Fabric, *fakeTarget) {
	t.Helper()
	fab := memfabric.New(opts)
	ft := newFakeTarget(t, fab)
	if tune != nil {
		tune(ft)
	}
	ft.start()
	t.Cleanup(func() {
		ft.close()
		_ = fab.Close()
	})
	return fab, ft
}

// mustLogin logs in with cfg and closes the channel when the test ends (before the target
// setup made).
func mustLogin(t *testing.T, fab *memfabric.Fabric, cfg Config) *Channel {
	t.Helper()
	ch, err := Login(testCtx(t), fab, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { ch.Close() })
	return ch
}

// goodOf returns a check of a command's outcome: good(ch.Read10(...)) requires the command sent
// and answered GOOD, and returns the response.
func goodOf(t *testing.T) func(*Response, error) *Response {
	return func(rsp *Response, err error) *Response {
		t.Helper()
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		return rsp
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLoginDoLogout(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync fabric", true: "async fabric"}[async], func(t *testing.T) {
			fab, ft := setup(t, memfabric.Options{Async: async}, nil)
			ctx := testCtx(t)
			ch, err := Login(ctx, fab, Config{Addr: ft.addr, TargetPortID: testTargetPort})
			require.NoError(t, err)

			lr := ch.LoginResponse()
			require.Equal(t, uint32(32), lr.ReqLimDelta)
			require.Equal(t, uint32(8260), lr.MaxTIIULen, "fake target echoes the requested IT IU length")
			require.True(t, ch.ImmediateData())
			require.Equal(t, int64(32), ch.Credits())
			require.Equal(t, 31, ch.CanQueue(), "min(credits-1, queue_size-2)")

			// What the target saw: the 56-byte RDMA/CM login of ib_srp.
			ft.mu.Lock()
			got := ft.logins[0]
			ft.mu.Unlock()
			require.Equal(t, uint32(8260), got.ReqITIULen)
			require.Equal(t, iu.ImmedRequested|iu.MultiChanSingle, got.ReqFlags)
			require.Equal(t, testTargetPort, got.TargetPortID)

			data := testutil.Pattern(4096, 1)
			rsp, err := ch.Do(ctx, &Request{CDB: CDBWrite10(8, 8), DataOut: data, Layout: Direct{}})
			require.NoError(t, err)
			require.NoError(t, rsp.Err())
			require.Equal(t, int64(32), ch.Credits(), "one credit taken, one returned")

			rsp, err = ch.Read10(ctx, 0, 8, 8, 512)
			require.NoError(t, err)
			require.NoError(t, rsp.Err())
			require.Equal(t, data, rsp.DataIn)

			fc := ft.channel(0)
			ius := fc.receivedIUs()
			require.Len(t, ius, 2)
			require.Equal(t, byte(0x10), ius[0][5], "write: direct data-out descriptor")
			require.Equal(t, byte(0x01), ius[1][5], "read: direct data-in descriptor")

			require.NoError(t, ch.Logout())
			select {
			case <-fc.downCh:
			case <-time.After(5 * time.Second):
				t.Fatal("target saw no disconnect")
			}
			ius = fc.receivedIUs()
			require.Equal(t, []byte{0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ius[len(ius)-1], "SRP_I_LOGOUT")
			_, err = ch.Do(ctx, &Request{CDB: CDBTestUnitReady()})
			require.ErrorIs(t, err, ErrClosed)
			require.Empty(t, ch.ProtocolErrors())
		})
	}
}

func TestLayoutsRoundTrip(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, nil)
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr, TargetPortID: testTargetPort, AllowExtSG: true})

	for i, tc := range []struct {
		layout  Layout
		blocks  int
		wantFmt byte // BUFFER FORMATS of the write, then of the read (low nibble)
		wantIn  byte
	}{
		{nil, 8, 0x30, 0x01},              // 4 KiB: immediate write, direct read
		{nil, 17, 0x10, 0x01},             // 8.5 KiB: too big for immediate data
		{Direct{}, 8, 0x10, 0x01},         //
		{Indirect{N: 3}, 8, 0x20, 0x02},   //
		{Indirect{N: 12}, 16, 0x20, 0x02}, //
		{External{N: 20}, 16, 0x20, 0x02}, // the target fetches the table
		{Immediate{}, 16, 0x30, 0x01},     // 8192 bytes: the largest immediate write
		{Indirect{N: 255}, 1, 0x20, 0x02}, // 255 regions of 2 bytes, table external
	} {
		data := testutil.Pattern(tc.blocks*512, i)
		lba := uint64(100 * i)
		rsp, err := ch.Do(ctx, &Request{CDB: CDBWrite16(lba, uint32(tc.blocks)), DataOut: data, Layout: tc.layout})
		require.NoError(t, err, "case %d", i)
		require.NoError(t, rsp.Err(), "case %d", i)
		rsp, err = ch.Do(ctx, &Request{CDB: CDBRead16(lba, uint32(tc.blocks)), DataInLen: len(data), Layout: tc.layout})
		require.NoError(t, err, "case %d", i)
		require.NoError(t, rsp.Err(), "case %d", i)
		require.Equal(t, data, rsp.DataIn, "case %d", i)

		ius := ft.channel(0).receivedIUs()
		require.Equal(t, tc.wantFmt, ius[len(ius)-2][5], "case %d write", i)
		require.Equal(t, tc.wantIn, ius[len(ius)-1][5], "case %d read", i)
	}
	require.Equal(t, int64(32), ch.Credits())
	require.Empty(t, ch.ProtocolErrors())
	require.Zero(t, ch.Outstanding())
}

func TestSCSIHelpers(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, nil)
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr, TargetPortID: testTargetPort})

	rsp, err := ch.TestUnitReady(ctx, 0)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Nil(t, rsp.DataIn)

	rsp, err = ch.Inquiry(ctx, 0, false, 0, 96)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Len(t, rsp.DataIn, 36, "96-byte buffer minus the DIUNDER residual of 60")
	require.Equal(t, iu.DIUNDER, rsp.Flags)
	require.Equal(t, uint32(60), rsp.DataInResidual)
	require.Equal(t, "FAKE    ", string(rsp.DataIn[8:16]))

	last, bs, rsp, err := ch.ReadCapacity16(ctx, 0)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, uint64(2047), last)
	require.Equal(t, uint32(512), bs)

	data := testutil.Pattern(1024, 9)
	good := goodOf(t)
	good(ch.Write10(ctx, 0, 3, data, 512))
	require.Equal(t, data, good(ch.Read10(ctx, 0, 3, 2, 512)).DataIn)
	good(ch.Write16(ctx, 0, 2000, data, 512))
	require.Equal(t, data, good(ch.Read16(ctx, 0, 2000, 2, 512)).DataIn)

	// Out of range: CHECK CONDITION, ILLEGAL REQUEST, LBA OUT OF RANGE, sense as sent.
	rsp, err = ch.Read16(ctx, 0, 2047, 2, 512)
	require.NoError(t, err)
	require.Equal(t, uint8(0x02), rsp.Status)
	require.Equal(t, iu.SNSVALID, rsp.Flags)
	key, asc, ascq, ok := rsp.SenseKey()
	require.True(t, ok)
	require.Equal(t, [3]uint8{0x05, 0x21, 0x00}, [3]uint8{key, asc, ascq})
	var se *StatusError
	require.ErrorAs(t, rsp.Err(), &se)
	require.Equal(t, uint8(0x21), se.ASC)
	require.Len(t, rsp.Sense, 18)
	require.Equal(t, rsp.IU[36:], rsp.Sense)

	_, err = ch.Write10(ctx, 0, 0, make([]byte, 100), 512)
	require.ErrorIs(t, err, ErrConfig)
}

func TestLoginRejected(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) {
		ft.login = func(f iu.LoginReqFields) (*iu.LoginRspFields, *iu.LoginRejFields) {
			return nil, &iu.LoginRejFields{Reason: iu.LoginRejUnableAssociateChannel, Tag: f.Tag,
				SupBufFmt: iu.BufFormatDirect | iu.BufFormatIndirect}
		}
	})
	_, err := Login(testCtx(t), fab, Config{Addr: ft.addr})
	var rej *LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.True(t, rej.Decoded)
	require.Equal(t, iu.LoginRejUnableAssociateChannel, rej.Reason)
	require.Equal(t, memfabric.RejectConsumerDefined, rej.CMReason)
	require.GreaterOrEqual(t, len(rej.Raw), iu.LoginRejSize)
	require.Equal(t, []byte{0xc2, 0, 0, 0, 0x00, 0x01, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x06, 0, 0, 0, 0, 0, 0}, rej.Raw[:iu.LoginRejSize])
	// Whatever the CM pads the REJ private data with (148 bytes on IB) is zero.
	require.Equal(t, make([]byte, len(rej.Raw)-iu.LoginRejSize), rej.Raw[iu.LoginRejSize:])

	// Nobody listening on the port: the CM rejects, no SRP_LOGIN_REJ.
	addr := ft.addr
	_, err = Login(testCtx(t), fab, Config{Addr: netip.AddrPortFrom(addr.Addr(), addr.Port()+1)})
	require.ErrorAs(t, err, &rej)
	require.False(t, rej.Decoded)
	require.Equal(t, memfabric.RejectInvalidServiceID, rej.CMReason)
}

func TestBadLoginResponse(t *testing.T) {
	for name, raw := range map[string][]byte{
		"wrong opcode": append([]byte{0xc1}, make([]byte, 51)...),
		"short":        {0xc0, 0, 0, 0, 0, 0, 0, 32},
		"MAXIMUM TI IU LENGTH 35": func() []byte {
			b := make([]byte, 52)
			iu.LoginRsp(b).Encode(&iu.LoginRspFields{ReqLimDelta: 8, MaxITIULen: 8260, MaxTIIULen: 35})
			return b
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) { ft.loginRaw = raw })
			_, err := Login(testCtx(t), fab, Config{Addr: ft.addr})
			require.ErrorIs(t, err, ErrLoginResponse)
			testutil.WaitFor(t, "target to see the disconnect", func() bool {
				if ft.numChans() == 0 {
					return false
				}
				select {
				case <-ft.channel(0).downCh:
					return true
				default:
					return false
				}
			})
		})
	}
}

func TestIBCMFormNeedsAFIB(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, nil)
	_, err := Login(testCtx(t), fab, Config{Addr: ft.addr, LoginForm: LoginFormIBCM, Family: ib.FamilyIP})
	require.ErrorIs(t, err, ib.ErrPrivateDataTooLong, "an IP-family sender carries 56 bytes")
	// By default the 64-byte form goes to the IB port space, where this target does not
	// listen: the CM answers for it.
	_, err = Login(testCtx(t), fab, Config{Addr: ft.addr, LoginForm: LoginFormIBCM})
	var rej *LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, memfabric.RejectInvalidServiceID, rej.CMReason)
	require.False(t, rej.Decoded)
	// Sent raw to the port of the target's IP-family listener, it finds no AF_IB listener:
	// the CM rejects it, with no SRP_LOGIN_REJ.
	_, err = Login(testCtx(t), fab, Config{Addr: ft.addr, LoginForm: LoginFormIBCM, PortSpace: memfabric.PortSpaceTCP})
	require.ErrorAs(t, err, &rej)
	require.Equal(t, memfabric.RejectConsumerDefined, rej.CMReason)
	require.False(t, rej.Decoded)
}

// TestIBCMLogin: the 64-byte form reaches a target listening as an AF_IB id as the raw
// 92 bytes of IB CM REQ private data, SRP_LOGIN_REQ first; the channel then works as usual.
func TestIBCMLogin(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) { ft.listenIB = true })
	ctx := testCtx(t)
	ch := mustLogin(t, fab, Config{Addr: ft.addr, LoginForm: LoginFormIBCM, TargetPortID: testTargetPort, LoginTag: 0x77})
	require.Equal(t, memfabric.PortSpaceIB, ch.Config().PortSpace)
	ft.mu.Lock()
	priv := ft.privs[0]
	ft.mu.Unlock()
	require.Len(t, priv, ib.MaxIBConnRequestPrivateData)
	require.Equal(t, ch.LoginRequestIU(), priv[:iu.LoginReqSize])
	require.Len(t, ch.LoginRequestIU(), iu.LoginReqSize)
	require.Equal(t, make([]byte, 92-64), priv[64:])
	require.Equal(t, iu.Tag(0x77), ch.LoginResponse().Tag)

	data := testutil.Pattern(4096, 3)
	rsp, err := ch.Write10(ctx, 0, 8, data, 512)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	rsp, err = ch.Read10(ctx, 0, 8, 8, 512)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, data, rsp.DataIn)
}

func TestSmallITIULenWarns(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, func(ft *fakeTarget) { ft.maxITIULen = 2116 })
	ch := mustLogin(t, fab, Config{Addr: ft.addr})
	errs := ch.ProtocolErrors()
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], ErrProtocol)
	require.Contains(t, errs[0].Error(), "MAXIMUM IT IU LENGTH 2116 is below the 8260")
}

func TestLoginMulti(t *testing.T) {
	fab, ft := setup(t, memfabric.Options{}, nil)
	ctx := testCtx(t)
	chans, err := LoginMulti(ctx, fab, Config{Addr: ft.addr, TargetPortID: testTargetPort}, 3)
	require.NoError(t, err)
	require.Len(t, chans, 3)
	for i, ch := range chans {
		defer ch.Close()
		require.Equal(t, uint16(i), ch.Index())
		require.Same(t, chans[0].Node(), ch.Node())
		_, err := ch.TestUnitReady(ctx, 0)
		require.NoError(t, err)
	}
	ft.mu.Lock()
	logins := append([]iu.LoginReqFields(nil), ft.logins...)
	ft.mu.Unlock()
	require.Len(t, logins, 3)
	require.Equal(t, iu.ImmedRequested|iu.MultiChanSingle, logins[0].ReqFlags)
	require.Equal(t, iu.ImmedRequested|iu.MultiChanMulti, logins[1].ReqFlags)
	require.Equal(t, iu.ImmedRequested|iu.MultiChanMulti, logins[2].ReqFlags)
	require.Equal(t, logins[0].InitiatorPortID, logins[2].InitiatorPortID, "one I_T nexus")
	require.Equal(t, iu.LoginRspMultiChanMaintained, chans[1].LoginResponse().RspFlags.MultiChanResult())

	// Tags carry the channel index as blk_mq_unique_tag does: channel 2, tag 0.
	ius := ft.channel(2).receivedIUs()
	require.Equal(t, []byte{0x00, 0x00, 0x02, 0x00, 0, 0, 0, 0}, ius[0][8:16])
}

// dreqConn delivers, on its first PollEvent, a DREQ together with a receive completion queued
// just before it: the response the target sent before disconnecting, which arrived while the
// poller was already past its completion drain.
type dreqConn struct {
	stubConn
	c      *Channel
	rsp    []byte
	mu     sync.Mutex
	queued []ib.Completion
	sent   bool
}

func (d *dreqConn) PollCompletions(wcs []ib.Completion) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := copy(wcs, d.queued)
	d.queued = d.queued[n:]
	return n, nil
}

func (d *dreqConn) PollEvent() (ib.Event, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sent {
		return 0, false
	}
	d.sent = true
	copy(d.c.rxBuf, d.rsp)
	d.queued = append(d.queued, ib.Completion{ID: wrRecv | 0, Status: ib.StatusSuccess, Opcode: ib.OpRecv, ByteLen: uint32(len(d.rsp))})
	return ib.EventDisconnected, true
}

// TestResponseBeforeDREQ: a response queued before the target's DREQ completes its request;
// only what is still pending after it fails with ErrDisconnected.
func TestResponseBeforeDREQ(t *testing.T) {
	c, sc, r := newStubChannel(t)
	rsp := make([]byte, 64)
	n, err := iu.Rsp(rsp).Encode(&iu.RspFields{Tag: fuzzTag, ReqLimDelta: 1})
	require.NoError(t, err)
	dc := &dreqConn{stubConn: *sc, c: c, rsp: rsp[:n]}
	dc.ReadyC = make(chan struct{}, 1)
	c.conn = dc
	c.stop, c.pollDone = make(chan struct{}), make(chan struct{})
	go c.poll()
	dc.ReadyC <- struct{}{}
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("request not completed")
	}
	require.NoError(t, r.err)
	require.Equal(t, fuzzTag, r.rsp.Tag)
	<-c.Disconnected()
	require.ErrorIs(t, c.Err(), ErrDisconnected)
	close(c.stop)
	<-c.pollDone
}
