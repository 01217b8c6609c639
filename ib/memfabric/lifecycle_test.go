package memfabric

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

// connected is a connection with receives posted on both sides: target 100 and 101,
// initiator 100.
type connected struct {
	e      *env
	r      *ibtest.Regions
	tc     ib.Conn
	ic     *Conn
	target ib.Conn // tc or ic, by the test's choice of side
}

func newConnected(t *testing.T, opts Options) *connected {
	e := newEnv(t, opts)
	r := newRegions(t, e)
	ap := srpAccept()
	ap.Recv = recvs(r.TMR, []uint64{100, 101}, 64)
	cp := srpConnect()
	cp.Recv = recvs(r.IRecv, []uint64{100}, 64)
	tc, ic := e.connect(t, cp, ap)
	return &connected{e: e, r: r, tc: tc, ic: ic}
}

func TestDisconnect(t *testing.T) {
	const retry = 15 * time.Millisecond
	tests := []struct {
		name      string
		byTarget  bool
		withClose bool
	}{
		{"initiator disconnects", false, false},
		{"target disconnects", true, false},
		{"initiator closes", false, true},
		{"target closes", true, true},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				c := newConnected(t, Options{Async: m.async, RetryTimeout: retry})
				// x disconnects, y is the other side; yMR is y's local region, yRecvs its receives.
				var x, y ib.Conn = c.ic, c.tc
				xRecvs, yRecvs := []uint64{100}, []uint64{100, 101}
				yMR := c.r.TMR
				if tt.byTarget {
					x, y = c.tc, c.ic
					xRecvs, yRecvs = yRecvs, xRecvs
					yMR = c.r.IMR
				}

				if tt.withClose {
					require.NoError(t, x.Close())
					require.NoError(t, x.Close(), "Close is idempotent")
					_, err := x.PostSend(nil)
					require.ErrorIs(t, err, ib.ErrClosed)
					_, err = x.PostRecv(nil)
					require.ErrorIs(t, err, ib.ErrClosed)
					_, err = x.PollCompletions(make([]ib.Completion, 1))
					require.ErrorIs(t, err, ib.ErrClosed)
					require.ErrorIs(t, x.Disconnect(), ib.ErrClosed)
				} else {
					require.NoError(t, x.Disconnect())
					requireEvent(t, x, ib.EventDisconnected)
					_, rq := ibtest.Split(poll(t, x, len(xRecvs)))
					require.Equal(t, flushed(xRecvs), rq)
					require.NoError(t, x.Disconnect(), "a second Disconnect is harmless")
					requireNoEvent(t, x)
				}

				// The DREQ reaches y, but y's QP stays up until y itself disconnects...
				requireEvent(t, y, ib.EventDisconnected)
				requireNoCompletions(t, y)
				// ...and what it sends meets a QP that no longer answers.
				start := time.Now()
				_, err := y.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: yMR, Length: 8}}}})
				require.NoError(t, err)
				sq, rq := ibtest.Split(poll(t, y, 1+len(yRecvs)))
				require.GreaterOrEqual(t, time.Since(start), retry)
				require.Equal(t, []ib.Completion{ibtest.Failed(1, ib.StatusTransportRetryExceeded)}, sq)
				require.Equal(t, flushed(yRecvs), rq)

				require.NoError(t, y.Disconnect())
				requireNoEvent(t, y) // EventDisconnected comes once
				require.NoError(t, y.Close())
				require.NoError(t, x.Close())
			})
		}
	}
}

func flushed(ids []uint64) []ib.Completion {
	var out []ib.Completion
	for _, id := range ids {
		out = append(out, ibtest.Failed(id, ib.StatusWRFlushError))
	}
	return out
}

// LIO's drain: after Disconnect, a zero-length RDMA WRITE posted last completes last.
func TestDrainMarker(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			c := newConnected(t, Options{Async: m.async})
			// In RTS a zero-length WRITE succeeds without any key.
			_, err := c.tc.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpRDMAWrite, Signaled: true, RKey: 0xbad}})
			require.NoError(t, err)
			require.Equal(t, []ib.Completion{ibtest.OK(1, ib.OpRDMAWrite)}, poll(t, c.tc, 1))

			require.NoError(t, c.tc.Disconnect())
			_, err = c.tc.PostSend([]ib.SendWR{{ID: 99, Op: ib.OpRDMAWrite}})
			require.NoError(t, err)
			wcs := poll(t, c.tc, 3)
			require.Equal(t, ibtest.Failed(99, ib.StatusWRFlushError), wcs[2])
			require.Equal(t, []uint64{99, 100, 101}, sortedIDs(wcs))
			requireEvent(t, c.tc, ib.EventDisconnected)
		})
	}
}

func TestDeviceRemoved(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const retry = 15 * time.Millisecond
			c := newConnected(t, Options{Async: m.async, RetryTimeout: retry})
			c.e.target.Remove()
			c.e.target.Remove() // idempotent

			requireEvent(t, c.tc, ib.EventDeviceRemoved)
			requireNoEvent(t, c.tc)
			_, err := c.tc.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpRDMAWrite}})
			require.ErrorIs(t, err, ib.ErrDeviceRemoved)
			_, err = c.tc.PostRecv(recvs(c.r.TMR, []uint64{102}, 64))
			require.ErrorIs(t, err, ib.ErrDeviceRemoved)
			require.ErrorIs(t, c.tc.Disconnect(), ib.ErrDeviceRemoved)
			// No flush completions for the two posted receives: nothing to wait for.
			requireNoCompletions(t, c.tc)

			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			_, err = c.e.ln.Next(ctx)
			require.ErrorIs(t, err, ib.ErrDeviceRemoved)
			_, err = c.e.target.Listen(targetPort + 1)
			require.ErrorIs(t, err, ib.ErrDeviceRemoved)
			_, err = c.e.target.PD().RegisterMemory(make([]byte, 8), 0)
			require.ErrorIs(t, err, ib.ErrDeviceRemoved)
			_, err = c.e.initiator.Connect(ctx, c.e.ln.Addr(), nil, srpConnect())
			require.ErrorIs(t, err, unix.EHOSTUNREACH)

			// The initiator is told nothing; its SENDs time out.
			_, err = c.ic.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: c.r.IMR, Length: 8}}}})
			require.NoError(t, err)
			sq, rq := ibtest.Split(poll(t, c.ic, 2))
			require.Equal(t, []ib.Completion{ibtest.Failed(1, ib.StatusTransportRetryExceeded)}, sq)
			require.Equal(t, flushed([]uint64{100}), rq)
			requireNoEvent(t, c.ic)
			require.NoError(t, c.tc.Close())

			// The device comes back under the same address.
			tn, err := c.e.f.NewNode(targetAddr)
			require.NoError(t, err)
			ln, err := tn.Listen(targetPort)
			require.NoError(t, err)
			c.e.target, c.e.ln = tn, ln
			tc, ic := c.e.connect(t, srpConnect(), srpAccept())
			require.NoError(t, ic.Close())
			requireEvent(t, tc, ib.EventDisconnected)
		})
	}
}

func TestVanish(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const retry = 15 * time.Millisecond
			c := newConnected(t, Options{Async: m.async, RetryTimeout: retry})
			c.ic.Vanish()
			c.ic.Vanish()
			_, err := c.ic.PostSend(nil)
			require.ErrorIs(t, err, ib.ErrClosed)

			requireNoEvent(t, c.tc)
			requireNoCompletions(t, c.tc)
			start := time.Now()
			_, err = c.tc.PostSend([]ib.SendWR{
				{ID: 1, Op: ib.OpRDMAWrite, SGL: []ib.SGE{{MR: c.r.TMR, Length: 8}}, RemoteAddr: c.r.IMR.Addr(), RKey: c.r.IMR.RKey()},
				{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: c.r.TMR, Length: 8}}},
			})
			require.NoError(t, err)
			sq, rq := ibtest.Split(poll(t, c.tc, 4))
			require.GreaterOrEqual(t, time.Since(start), retry)
			require.Equal(t, []ib.Completion{ibtest.Failed(1, ib.StatusTransportRetryExceeded), ibtest.Failed(2, ib.StatusWRFlushError)}, sq)
			require.Equal(t, flushed([]uint64{100, 101}), rq)
			requireNoEvent(t, c.tc)

			// Disconnecting towards a vanished peer still ends in EventDisconnected (after the
			// DREQ times out, on a real fabric).
			require.NoError(t, c.tc.Disconnect())
			requireEvent(t, c.tc, ib.EventDisconnected)
		})
	}
}

// Fabric.Close tears down connections that nobody closed, with timers still armed; goleak in
// TestMain checks that nothing is left behind.
func TestFabricCloseWithBusyConnections(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			f := New(Options{Async: m.async, RNRTimer: time.Hour, RetryTimeout: time.Hour})
			t.Cleanup(func() { f.Close() })
			e := envOn(t, f)
			ap := srpAccept()
			ap.RNRRetryCount = 6
			tc, ic := e.connect(t, srpConnect(), ap)
			mr := register(t, e.initiator.PD(), 64, 0)
			// A SEND waiting on an RNR timer of an hour, and a vanished peer's retry timer.
			_, err := ic.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: mr, Length: 8}}}})
			require.NoError(t, err)
			tc2, ic2 := e.connect(t, srpConnect(), ap)
			ic2.Vanish()
			tmr := register(t, e.target.PD(), 64, 0)
			_, err = tc2.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr, Length: 8}}}})
			require.NoError(t, err)
			// A pending request nobody answers.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch := e.dialAsync(ctx, nil, srpConnect())
			require.Eventually(t, func() bool { return len(e.ln.(*listener).reqs) == 1 }, waitLimit, time.Millisecond)

			require.NoError(t, f.Close())
			requireRejected(t, (<-ch).err, RejectInvalidServiceID)
			_, err = tc.PostSend(nil)
			require.ErrorIs(t, err, ib.ErrClosed)
			_, err = f.NewNode(netip.MustParseAddr("192.0.2.9"))
			require.ErrorIs(t, err, ib.ErrClosed)
			require.NoError(t, f.Close())
		})
	}
}

// A request already handed out by Next but never answered is rejected when its node goes away,
// so the initiator's Connect does not hang; answering it afterwards fails.
func TestUnansweredRequestOnRemoval(t *testing.T) {
	e := newEnv(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ch := e.dialAsync(ctx, nil, srpConnect())
	req := e.next(t)
	e.target.Remove()
	requireRejected(t, (<-ch).err, RejectInvalidServiceID)
	_, err := req.Accept(srpAccept())
	require.ErrorIs(t, err, ib.ErrAnswered)
	require.ErrorIs(t, req.Reject(nil), ib.ErrAnswered)
}
