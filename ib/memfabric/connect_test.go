package memfabric

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

func TestConnectAccept(t *testing.T) {
	e := newEnv(t, Options{})
	login := bytes.Repeat([]byte{0xa5}, ib.MaxConnRequestPrivateData) // exactly the limit
	rsp := bytes.Repeat([]byte{0x5a}, ib.MaxAcceptPrivateData)

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cp := srpConnect()
	cp.ResponderResources, cp.InitiatorDepth = 4, 2
	ch := e.dialAsync(ctx, login, cp)
	req := e.next(t)
	require.Equal(t, login, req.PrivateData())
	require.Equal(t, netip.AddrPortFrom(targetAddr, targetPort), req.LocalAddr())
	require.Equal(t, initiatorAddr, req.RemoteAddr().Addr())
	require.NotZero(t, req.RemoteAddr().Port())
	require.Equal(t, uint8(4), req.ResponderResources())
	require.Equal(t, uint8(2), req.InitiatorDepth())
	require.Equal(t, DefaultLimits, req.Limits())
	require.NotNil(t, req.PD())

	ap := srpAccept()
	ap.PrivateData = rsp
	tc, err := req.Accept(ap)
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	require.Equal(t, rsp, r.c.PrivateData())
	require.Equal(t, req.RemoteAddr(), tc.RemoteAddr())
	require.Equal(t, req.LocalAddr(), tc.LocalAddr())
	require.Equal(t, tc.LocalAddr(), r.c.RemoteAddr())
	require.Equal(t, tc.RemoteAddr(), r.c.LocalAddr())
	requireEvent(t, tc, ib.EventEstablished)
	requireEvent(t, r.c, ib.EventEstablished)
	requireNoEvent(t, tc)

	_, err = req.Accept(ap)
	require.ErrorIs(t, err, ib.ErrAnswered)
	require.ErrorIs(t, req.Reject(nil), ib.ErrAnswered)
}

// Private data arrives zero-padded to the CM field size, as on IB and RoCE.
func TestPrivateDataPadding(t *testing.T) {
	e := newEnv(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ch := e.dialAsync(ctx, []byte("short-login"), srpConnect())
	req := e.next(t)
	require.Equal(t, append([]byte("short-login"), make([]byte, ib.MaxConnRequestPrivateData-11)...), req.PrivateData())
	ap := srpAccept()
	ap.PrivateData = bytes.Repeat([]byte{0xc0}, 52) // SRP_LOGIN_RSP size
	_, err := req.Accept(ap)
	require.NoError(t, err)
	r := <-ch
	require.NoError(t, r.err)
	require.Equal(t, append(bytes.Repeat([]byte{0xc0}, 52), make([]byte, ib.MaxAcceptPrivateData-52)...), r.c.PrivateData())
}

func TestConnectErrors(t *testing.T) {
	tests := []struct {
		name string
		// answer is the target's part; nil means nobody calls Next.
		answer func(t *testing.T, req ib.ConnRequest)
		dst    netip.AddrPort
		priv   []byte
		cp     func(*ConnectParams)
		check  func(t *testing.T, err error)
	}{
		{
			name: "reject with private data",
			answer: func(t *testing.T, req ib.ConnRequest) {
				require.NoError(t, req.Reject([]byte("login-rej")))
				require.ErrorIs(t, req.Reject(nil), ib.ErrAnswered)
				_, err := req.Accept(srpAccept())
				require.ErrorIs(t, err, ib.ErrAnswered)
			},
			check: func(t *testing.T, err error) {
				var rej *RejectedError
				require.ErrorAs(t, err, &rej)
				require.Equal(t, RejectConsumerDefined, rej.Reason)
				require.Equal(t, padded([]byte("login-rej"), ib.MaxRejectPrivateData), rej.PrivateData)
			},
		},
		{
			name: "reject private data at the limit",
			answer: func(t *testing.T, req ib.ConnRequest) {
				require.NoError(t, req.Reject(bytes.Repeat([]byte{1}, ib.MaxRejectPrivateData)))
			},
			check: func(t *testing.T, err error) {
				var rej *RejectedError
				require.ErrorAs(t, err, &rej)
				require.Equal(t, bytes.Repeat([]byte{1}, ib.MaxRejectPrivateData), rej.PrivateData)
			},
		},
		{
			name: "oversized REP and REJ do not answer the request",
			answer: func(t *testing.T, req ib.ConnRequest) {
				ap := srpAccept()
				ap.PrivateData = make([]byte, ib.MaxAcceptPrivateData+1)
				_, err := req.Accept(ap)
				require.ErrorIs(t, err, ib.ErrPrivateDataTooLong)
				require.ErrorIs(t, req.Reject(make([]byte, ib.MaxRejectPrivateData+1)), ib.ErrPrivateDataTooLong)
				require.NoError(t, req.Reject([]byte{7}))
			},
			check: func(t *testing.T, err error) {
				var rej *RejectedError
				require.ErrorAs(t, err, &rej)
				require.Equal(t, padded([]byte{7}, ib.MaxRejectPrivateData), rej.PrivateData)
			},
		},
		{
			name: "bad accept parameters do not answer the request",
			answer: func(t *testing.T, req ib.ConnRequest) {
				for _, mod := range []func(*ib.AcceptParams){
					func(ap *ib.AcceptParams) { ap.InitiatorDepth = 5 }, // > initiator's 4 responder resources
					func(ap *ib.AcceptParams) { ap.QP.SendQueueDepth = 0 },
					func(ap *ib.AcceptParams) { ap.QP.MaxSendSGE = DefaultLimits.MaxSendSGE + 1 },
					func(ap *ib.AcceptParams) { ap.QP.MaxInlineData = DefaultLimits.MaxInlineData + 1 },
					func(ap *ib.AcceptParams) { ap.RNRRetryCount = 8 },
					func(ap *ib.AcceptParams) { ap.Recv = make([]ib.RecvWR, ap.QP.RecvQueueDepth+1) },
					func(ap *ib.AcceptParams) { ap.Recv = []ib.RecvWR{{ID: 1, SGL: []ib.SGE{{Length: 8}}}} },
				} {
					ap := srpAccept()
					mod(&ap)
					_, err := req.Accept(ap)
					require.Error(t, err)
					require.True(t, errors.Is(err, ib.ErrInvalidArgument) || errors.Is(err, ib.ErrQueueFull), "%v", err)
				}
				require.NoError(t, req.Reject(nil))
			},
			check: func(t *testing.T, err error) {
				var rej *RejectedError
				require.ErrorAs(t, err, &rej)
				require.Equal(t, make([]byte, ib.MaxRejectPrivateData), rej.PrivateData)
			},
		},
		{
			name:  "oversized REQ",
			priv:  make([]byte, ib.MaxConnRequestPrivateData+1),
			check: func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) },
		},
		{
			name:  "no listener on the port",
			dst:   netip.AddrPortFrom(targetAddr, targetPort+1),
			check: func(t *testing.T, err error) { requireRejected(t, err, RejectInvalidServiceID) },
		},
		{
			name:  "unknown address",
			dst:   netip.MustParseAddrPort("192.0.2.99:5555"),
			check: func(t *testing.T, err error) { require.ErrorIs(t, err, unix.EHOSTUNREACH) },
		},
		{
			name:  "bad QP caps",
			cp:    func(cp *ConnectParams) { cp.QP.RecvQueueDepth = DefaultLimits.MaxQueueDepth + 1 },
			check: func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrInvalidArgument) },
		},
		{
			name:  "nobody answers",
			check: func(t *testing.T, err error) { require.ErrorIs(t, err, context.DeadlineExceeded) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Options{})
			dst := e.ln.Addr()
			if tt.dst.IsValid() {
				dst = tt.dst
			}
			priv := tt.priv
			if priv == nil {
				priv = []byte("login-req")
			}
			cp := srpConnect()
			if tt.cp != nil {
				tt.cp(&cp)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			if tt.answer != nil {
				ctx, cancel = context.WithTimeout(context.Background(), waitLimit)
			}
			defer cancel()
			ch := make(chan dialResult, 1)
			go func() {
				c, err := e.initiator.Connect(ctx, dst, priv, cp)
				ch <- dialResult{c, err}
			}()
			if tt.answer != nil {
				tt.answer(t, e.next(t))
			}
			r := <-ch
			require.Nil(t, r.c)
			tt.check(t, r.err)
		})
	}
}

func requireRejected(t *testing.T, err error, reason RejectReason) {
	t.Helper()
	var rej *RejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, reason, rej.Reason)
}

func TestListen(t *testing.T) {
	e := newEnv(t, Options{})
	_, err := e.target.Listen(targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE)

	// Requests queued when the listener closes are rejected; Next then fails.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ch := e.dialAsync(ctx, nil, srpConnect())
	require.Eventually(t, func() bool { return len(e.ln.(*listener).reqs) == 1 }, waitLimit, time.Millisecond)
	require.NoError(t, e.ln.Close())
	require.NoError(t, e.ln.Close())
	requireRejected(t, (<-ch).err, RejectInvalidServiceID)
	_, err = e.ln.Next(ctx)
	require.ErrorIs(t, err, ib.ErrClosed)

	// The port is free again.
	ln, err := e.target.Listen(targetPort)
	require.NoError(t, err)
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	_, err = ln.Next(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A request whose initiator gave up before the REP: Accept still returns a Conn, which gets
// EventDisconnected instead of EventEstablished and whose SENDs find nobody.
func TestAcceptAfterInitiatorGaveUp(t *testing.T) {
	e := newEnv(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := e.initiator.Connect(ctx, e.ln.Addr(), []byte("x"), srpConnect())
	require.ErrorIs(t, err, context.DeadlineExceeded)

	tc, err := e.next(t).Accept(srpAccept())
	require.NoError(t, err)
	requireEvent(t, tc, ib.EventDisconnected)
	requireNoEvent(t, tc)
	mr := register(t, e.target.PD(), 64, 0)
	_, err = tc.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: mr, Length: 8}}}})
	require.NoError(t, err)
	require.Equal(t, []ib.Completion{ibtest.Failed(1, ib.StatusTransportRetryExceeded)}, poll(t, tc, 1))
	require.NoError(t, tc.Close())
}

func TestDelayEstablished(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{DelayEstablished: true, Async: m.async})
			tmr := register(t, e.target.PD(), 64, ib.AccessLocalWrite)
			ap := srpAccept()
			ap.Recv = recvs(tmr, []uint64{100}, 64)
			tc, ic := e.connect(t, srpConnect(), ap)
			requireNoEvent(t, tc)

			imr := register(t, e.initiator.PD(), 64, 0)
			_, err := ic.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: imr, Length: 16}}}})
			require.NoError(t, err)
			// The receive completion is queued before the event: an engine that looks at
			// events first still sees the IU first.
			require.Equal(t, []ib.Completion{ibtest.Recvd(100, 16)}, poll(t, tc, 1))
			requireEvent(t, tc, ib.EventEstablished)
		})
	}
}
