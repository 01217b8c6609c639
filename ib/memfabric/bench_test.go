package memfabric

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

// roundTrip drives one connection the way the SRP engine and ib_srp do, with preallocated work
// requests and completion arrays, so that its steady state must not allocate.
type roundTrip struct {
	tc, ic       ib.Conn
	tbuf, idata  ib.MR
	tRecv, iRecv []ib.RecvWR
	iSend        []ib.SendWR
	tChain       []ib.SendWR // [RDMA WRITE 4 KiB, SEND] or [SEND]
	wcs          [4]ib.Completion
}

var errUnexpected = errors.New("unexpected completion")

func newRoundTrip(tb testing.TB, e *env, withWrite bool) *roundTrip {
	tb.Helper()
	tbuf := register(tb, e.target.PD(), 64+4096, ib.AccessLocalWrite) // [0:64] receive, then data
	ibuf := register(tb, e.initiator.PD(), 128, ib.AccessLocalWrite)  // [0:64] receive, [64:80] request
	idata := register(tb, e.initiator.PD(), 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	rt := &roundTrip{
		tbuf:  tbuf,
		idata: idata,
		tRecv: []ib.RecvWR{{ID: 100, SGL: []ib.SGE{{MR: tbuf, Length: 64}}}},
		iRecv: []ib.RecvWR{{ID: 100, SGL: []ib.SGE{{MR: ibuf, Length: 64}}}},
		iSend: []ib.SendWR{{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: ibuf, Offset: 64, Length: 16}}}},
	}
	if withWrite {
		rt.tChain = append(rt.tChain, ib.SendWR{ID: 2, Op: ib.OpRDMAWrite, SGL: []ib.SGE{{MR: tbuf, Offset: 64, Length: 4096}},
			RemoteAddr: idata.Addr(), RKey: idata.RKey()})
	}
	rt.tChain = append(rt.tChain, ib.SendWR{ID: 3, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tbuf, Offset: 64, Length: 36}}})
	ap := srpAccept()
	ap.Recv = rt.tRecv
	cp := srpConnect()
	cp.Recv = rt.iRecv
	rt.tc, rt.ic = e.connect(tb, cp, ap)
	return rt
}

// await waits for one completion and checks it.
func (rt *roundTrip) await(c ib.Conn, want ib.Completion) error {
	for {
		n, err := c.PollCompletions(rt.wcs[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			if rt.wcs[0] != want {
				return errUnexpected
			}
			return nil
		}
		<-c.Ready()
	}
}

// request: the initiator SENDs a 16-byte IU, the target receives it and reposts the buffer.
func (rt *roundTrip) request() error { return rt.pass(rt.ic, rt.iSend, 1, rt.tc, rt.tRecv, 16) }

// respond: the target posts its chain, the initiator receives the response and reposts.
func (rt *roundTrip) respond() error { return rt.pass(rt.tc, rt.tChain, 3, rt.ic, rt.iRecv, 36) }

// pass is one way of the round trip: from posts sends, whose signaled SEND is work request
// sendID; to receives n bytes in work request 100 and reposts recv; from sees its SEND complete.
func (rt *roundTrip) pass(from ib.Conn, sends []ib.SendWR, sendID uint64, to ib.Conn, recv []ib.RecvWR, n int) error {
	if _, err := from.PostSend(sends); err != nil {
		return err
	}
	if err := rt.await(to, ibtest.Recvd(100, n)); err != nil {
		return err
	}
	if _, err := to.PostRecv(recv); err != nil {
		return err
	}
	return rt.await(from, ibtest.OK(sendID, ib.OpSend))
}

func (rt *roundTrip) both() error {
	if err := rt.request(); err != nil {
		return err
	}
	return rt.respond()
}

func TestSteadyStateAllocs(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{Async: m.async})
			rt := newRoundTrip(t, e, true)
			want := ibtest.Fill(rt.tbuf.Bytes()[64:], 5)
			// Warm up: every queue slot gets its SGE array once.
			for range 64 {
				require.NoError(t, rt.both())
			}
			require.Equal(t, want, rt.idata.Bytes())
			var err error
			allocs := testing.AllocsPerRun(500, func() {
				if e := rt.both(); e != nil {
					err = e
				}
			})
			require.NoError(t, err)
			t.Logf("%s: %v allocations per request + 4 KiB WRITE + response round trip", m.name, allocs)
			require.Zero(t, allocs)
		})
	}
}

func BenchmarkSendRecvRoundTrip(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			rt := newRoundTrip(b, newEnv(b, Options{Async: m.async}), false)
			b.ReportAllocs()
			for b.Loop() {
				if err := rt.both(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWrite4KAndSend(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			rt := newRoundTrip(b, newEnv(b, Options{Async: m.async}), true)
			b.ReportAllocs()
			b.SetBytes(4096)
			for b.Loop() {
				if err := rt.respond(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
