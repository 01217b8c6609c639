//go:build linux && cgo

package verbs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
	"github.com/srptarget/srptarget/internal/testutil"
)

// The tests in this file need an RDMA device with an IP address (soft-RoCE in the VM harness:
// TestVerbs of integration/vm/guest/checks). Both ends run in this process and connect through
// the device. SRPT_VERBS_ADDRS lists the addresses to run against (space separated; an IPv6
// link-local address with its zone); without it, the IP addresses among the GIDs of active
// ports are used.

const (
	noDevice  = "no RDMA device: run in the VM harness"
	waitLimit = 30 * time.Second // qemu without KVM is slow

	slabSize = 1 << 20
	bufSize  = 4096
	nRecv    = 16
	recvOff  = 0                   // nRecv receive buffers
	sendOff  = nRecv * bufSize     // send buffers
	dataOff  = 2 * nRecv * bufSize // RDMA area
	dataSize = slabSize - 2*nRecv*bufSize
	allRW    = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead
)

func testAddrs(t *testing.T) []netip.Addr {
	t.Helper()
	devs, err := Devices()
	if err != nil || len(devs) == 0 {
		t.Skip(noDevice)
	}
	var out []netip.Addr
	if s := os.Getenv("SRPT_VERBS_ADDRS"); s != "" {
		for _, f := range strings.Fields(s) {
			out = append(out, netip.MustParseAddr(f))
		}
		return out
	}
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.State != PortActive {
				continue
			}
			for _, g := range p.GIDs {
				a := g.GID.Unmap()
				if g.Type == GIDTypeIB || a.IsLinkLocalUnicast() || slices.Contains(out, a) {
					continue
				}
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		t.Skip("no RDMA device with an IP address: run in the VM harness")
	}
	return out
}

// forEachAddr runs fn as a subtest per address.
func forEachAddr(t *testing.T, fn func(t *testing.T, a netip.Addr)) {
	for _, a := range testAddrs(t) {
		t.Run(a.String(), func(t *testing.T) { fn(t, a) })
	}
}

// side is one end of a connection with its registered slab.
type side struct {
	c    ib.Conn
	slab *ib.Slab
	mr   ib.MR
}

func (s *side) buf(off, n int) []byte { return s.mr.Bytes()[off : off+n] }

func (s *side) sge(off, n int) ib.SGE {
	return ib.SGE{MR: s.mr, Offset: uint64(off), Length: uint32(n)}
}

// recvs are nRecv receive buffers with IDs base+i.
func (s *side) recvs(base uint64) []ib.RecvWR {
	wrs := make([]ib.RecvWR, nRecv)
	for i := range wrs {
		wrs[i] = ib.RecvWR{ID: base + uint64(i), SGL: []ib.SGE{s.sge(recvOff+i*bufSize, bufSize)}}
	}
	return wrs
}

func register(t *testing.T, pd ib.ProtectionDomain) (*ib.Slab, ib.MR) {
	t.Helper()
	slab, err := ib.NewSlab(slabSize)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, slab.Close()) })
	mr, err := pd.RegisterMemory(slab.Bytes(), allRW)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := mr.Deregister(); !errors.Is(err, ib.ErrClosed) { // a test may deregister first
			require.NoError(t, err)
		}
	})
	return slab, mr
}

func testCapsFor(lim ib.DeviceLimits) ib.QPCaps {
	return ib.QPCaps{SendQueueDepth: 64, RecvQueueDepth: nRecv, MaxSendSGE: min(4, lim.MaxSendSGE),
		MaxRecvSGE: 1, MaxInlineData: min(64, lim.MaxInlineData)}
}

// link is a connection between a target (accepted) and an initiator (connected) side.
type link struct {
	ln       *Listener
	tgt, ini side
	iniConn  *Conn
	req      ib.ConnRequest
}

// linkOpts tune newLink.
type linkOpts struct {
	iniDepth   uint8 // initiator's InitiatorDepth (ib_srp: 0)
	tgtDepth   uint8 // target's InitiatorDepth (LIO: 4)
	reqPriv    []byte
	acceptPriv []byte
}

func defaultLinkOpts() linkOpts {
	return linkOpts{tgtDepth: 4, reqPriv: testutil.Pattern(56, 1), acceptPriv: testutil.Pattern(52, 2)}
}

type dialed struct {
	c   *Conn
	ini side
	err error
}

// dial resolves and connects to addr on a goroutine; the initiator's memory is registered in
// the route's PD and its receives are posted before the request goes out.
func dial(t *testing.T, addr netip.AddrPort, priv []byte, depth uint8) <-chan dialed {
	t.Helper()
	return dialWith(t, addr, priv, func(p *ConnectParams) { p.InitiatorDepth = depth })
}

// dialWith is dial with the connection parameters adjusted by mod.
func dialWith(t *testing.T, addr netip.AddrPort, priv []byte, mod func(p *ConnectParams)) <-chan dialed {
	t.Helper()
	ch := make(chan dialed, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	rt, err := Resolve(ctx, addr, ResolveOptions{})
	if err != nil {
		cancel()
		ch <- dialed{err: err}
		return ch
	}
	var s side
	s.slab, s.mr = register(t, rt.PD())
	go func() {
		defer cancel()
		p := ConnectParams{QP: testCapsFor(rt.Limits()), RNRRetryCount: 7, ResponderResources: 4, Recv: s.recvs(1000)}
		mod(&p)
		c, err := rt.Connect(ctx, priv, p)
		if c != nil {
			s.c = c
		}
		ch <- dialed{c: c, ini: s, err: err}
	}()
	return ch
}

func next(t *testing.T, ln *Listener) ib.ConnRequest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	r, err := ln.Next(ctx)
	require.NoError(t, err)
	return r
}

func listen(t *testing.T, a netip.Addr) *Listener {
	t.Helper()
	ln, err := Listen(netip.AddrPortFrom(a, 0), Options{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ln.Close()) })
	require.Equal(t, a, ln.Addr().Addr())
	require.NotZero(t, ln.Addr().Port())
	return ln
}

func newLink(t *testing.T, a netip.Addr, o linkOpts) *link {
	t.Helper()
	ln := listen(t, a)
	res := dial(t, ln.Addr(), o.reqPriv, o.iniDepth)
	l := accept(t, ln, next(t, ln), res, o, 2000)
	l.established(t)
	return l
}

// accept accepts r (from ln) as the target side of o, its memory registered in r's PD and
// its receives posted with IDs from recvBase, takes the initiator's end from res (dial), and
// closes both ends when the test ends.
func accept(t *testing.T, ln *Listener, r ib.ConnRequest, res <-chan dialed, o linkOpts, recvBase uint64) *link {
	t.Helper()
	l := &link{ln: ln, req: r}
	l.tgt.slab, l.tgt.mr = register(t, r.PD())
	c, err := r.Accept(ib.AcceptParams{
		PrivateData: o.acceptPriv, QP: testCapsFor(r.Limits()), RNRRetryCount: 7,
		ResponderResources: 4, InitiatorDepth: o.tgtDepth, Recv: l.tgt.recvs(recvBase),
	})
	require.NoError(t, err)
	l.tgt.c = c
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	d := <-res
	require.NoError(t, d.err)
	l.ini, l.iniConn = d.ini, d.c
	t.Cleanup(func() { require.NoError(t, d.c.Close()) })
	return l
}

// established waits for ESTABLISHED on both ends.
func (l *link) established(t *testing.T) {
	t.Helper()
	ibtest.WaitEvent(t, l.tgt.c, ib.EventEstablished)
	ibtest.WaitEvent(t, l.iniConn, ib.EventEstablished)
}

func post(t *testing.T, c ib.Conn, wrs ...ib.SendWR) {
	t.Helper()
	n, err := c.PostSend(wrs)
	require.NoError(t, err)
	require.Equal(t, len(wrs), n)
}

func TestDevices(t *testing.T) {
	devs, err := Devices()
	if err != nil || len(devs) == 0 {
		t.Skip(noDevice)
	}
	for _, d := range devs {
		require.NotEmpty(t, d.Name)
		require.NotZero(t, d.NodeGUID, d.Name)
		require.NotEmpty(t, d.Ports, d.Name)
		for _, p := range d.Ports {
			t.Logf("%s port %d: %v, %v, MTU %d", d.Name, p.Num, p.State, p.LinkLayer, p.ActiveMTU)
			for _, g := range p.GIDs {
				t.Logf("  gid[%d] %v %v %s", g.Index, g.GID, g.Type, g.Netdev)
				require.True(t, g.GID.Is6())
			}
		}
	}
	// Every test address is a GID of some port (that is how RDMA/CM finds the device).
	for _, a := range testAddrs(t) {
		found := false
		for _, d := range devs {
			for _, p := range d.Ports {
				for _, g := range p.GIDs {
					found = found || g.GID.Unmap() == a.WithZone("")
				}
			}
		}
		require.True(t, found, "%v is no GID", a)
	}
}

// TestConnect covers establishment: the request as the target sees it, the REP's private
// data at the initiator, events, and double answers.
func TestConnect(t *testing.T) {
	forEachAddr(t, func(t *testing.T, a netip.Addr) {
		ln := listen(t, a)
		reqPriv := testutil.Pattern(56, 1)
		res := dial(t, ln.Addr(), reqPriv, 0)
		r := next(t, ln)
		// The IB CM carries exactly 56 bytes of user private data in a REQ (RDMA/CM TCP port
		// space): the login request fills it.
		require.Equal(t, reqPriv, r.PrivateData())
		require.Equal(t, ln.Addr(), r.LocalAddr())
		require.Equal(t, a, r.RemoteAddr().Addr(), "both ends are on this host")
		require.NotZero(t, r.RemoteAddr().Port())
		require.Equal(t, uint8(4), r.ResponderResources(), "the initiator's offer")
		require.Equal(t, uint8(0), r.InitiatorDepth())
		lim := r.Limits()
		t.Logf("device limits: %+v", lim)
		require.Positive(t, lim.MaxQueueDepth)
		require.Positive(t, lim.MaxSendSGE)
		require.Positive(t, lim.MaxReadSGE)
		require.GreaterOrEqual(t, lim.MaxRDAtomic, 4)

		var tgt side
		tgt.slab, tgt.mr = register(t, r.PD())
		good := ib.AcceptParams{PrivateData: testutil.Pattern(52, 2), QP: testCapsFor(lim), RNRRetryCount: 7,
			ResponderResources: 4, InitiatorDepth: 4, Recv: tgt.recvs(0)}
		bad := good
		bad.InitiatorDepth = 5 // above the initiator's responder resources
		_, err := r.Accept(bad)
		require.ErrorIs(t, err, ib.ErrInvalidArgument)
		c, err := r.Accept(good) // a parameter error did not answer the request
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, c.Close()) })
		_, err = r.Accept(good)
		require.ErrorIs(t, err, ib.ErrAnswered)
		require.ErrorIs(t, r.Reject(nil), ib.ErrAnswered)

		d := <-res
		require.NoError(t, d.err)
		t.Cleanup(func() { require.NoError(t, d.c.Close()) })
		rep := d.c.PrivateData()
		require.GreaterOrEqual(t, len(rep), 52)
		require.Equal(t, testutil.Pattern(52, 2), rep[:52])
		require.Equal(t, make([]byte, len(rep)-52), rep[52:], "the CM pads with zeros")
		require.Equal(t, ln.Addr(), d.c.RemoteAddr())
		require.Equal(t, r.RemoteAddr(), d.c.LocalAddr())
		ibtest.WaitEvent(t, d.c, ib.EventEstablished)
		ibtest.WaitEvent(t, c, ib.EventEstablished)
		_, ok := c.PollEvent()
		require.False(t, ok)
	})
}

func TestReject(t *testing.T) {
	forEachAddr(t, func(t *testing.T, a netip.Addr) {
		ln := listen(t, a)
		res := dial(t, ln.Addr(), testutil.Pattern(56, 3), 0)
		r := next(t, ln)
		rej := testutil.Pattern(32, 4)
		require.ErrorIs(t, r.Reject(make([]byte, 149)), ib.ErrPrivateDataTooLong)
		require.NoError(t, r.Reject(rej))
		require.ErrorIs(t, r.Reject(rej), ib.ErrAnswered)
		_, err := r.Accept(ib.AcceptParams{QP: testCapsFor(r.Limits())})
		require.ErrorIs(t, err, ib.ErrAnswered)
		d := <-res
		var re *RejectedError
		require.True(t, errors.As(d.err, &re), "%v", d.err)
		require.Equal(t, RejectConsumerDefined, re.Reason)
		require.GreaterOrEqual(t, len(re.PrivateData), 32)
		require.Equal(t, rej, re.PrivateData[:32])
		require.Equal(t, make([]byte, len(re.PrivateData)-32), re.PrivateData[32:])

		// Nobody listening on the port: the passive side's CM rejects.
		port := ln.Addr().Port()
		require.NoError(t, ln.Close())
		d = <-dial(t, netip.AddrPortFrom(a, port), nil, 0)
		require.True(t, errors.As(d.err, &re), "%v", d.err)
		require.Equal(t, RejectInvalidServiceID, re.Reason)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = ln.Next(ctx)
		require.ErrorIs(t, err, ib.ErrClosed)
	})
}

// TestWildcardListen: a listener on the unspecified address receives requests for any
// address of any device; an IPv4 request to an IPv6 wildcard listener shows IPv4 addresses.
func TestWildcardListen(t *testing.T) {
	addrs := testAddrs(t)
	for _, wild := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()} {
		t.Run(wild.String(), func(t *testing.T) {
			ln, err := Listen(netip.AddrPortFrom(wild, 0), Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, ln.Close()) })
			require.Equal(t, wild, ln.Addr().Addr())
			for _, a := range addrs {
				if wild.Is4() && !a.Is4() {
					continue
				}
				dst := netip.AddrPortFrom(a, ln.Addr().Port())
				res := dial(t, dst, testutil.Pattern(56, 6), 0)
				r := next(t, ln)
				require.Equal(t, dst, r.LocalAddr())
				require.Equal(t, a, r.RemoteAddr().Addr())
				accept(t, ln, r, res, linkOpts{tgtDepth: 4}, 0).established(t)
			}
		})
	}
}

// TestRNRRetry: the initiator offers RNR retry count 0 and posts no receive; the target's
// SEND fails with an RNR retry error instead of waiting.
func TestRNRRetry(t *testing.T) {
	forEachAddr(t, func(t *testing.T, a netip.Addr) {
		ln := listen(t, a)
		res := dialWith(t, ln.Addr(), nil, func(p *ConnectParams) { p.RNRRetryCount, p.Recv = 0, nil })
		l := accept(t, ln, next(t, ln), res, linkOpts{tgtDepth: 4}, 0)
		c := l.tgt.c
		post(t, c, ib.SendWR{ID: 9, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{l.tgt.sge(sendOff, 16)}})
		got := ibtest.Poll(t, c, 1+nRecv)
		require.Equal(t, ib.Completion{ID: 9, Status: ib.StatusRNRRetryExceeded}, got[0])
		for _, wc := range got[1:] {
			require.Equal(t, ib.StatusWRFlushError, wc.Status)
		}
	})
}

// TestDataPathAllocs: posting and polling do not allocate in steady state.
func TestDataPathAllocs(t *testing.T) {
	a := testAddrs(t)[0]
	l := newLink(t, a, defaultLinkOpts())
	wrs := []ib.SendWR{
		{ID: 1, Op: ib.OpRDMAWrite, RemoteAddr: l.ini.mr.Addr() + dataOff, RKey: l.ini.mr.RKey(),
			SGL: []ib.SGE{l.tgt.sge(dataOff, 512), l.tgt.sge(dataOff+4096, 512)}},
		{ID: 2, Op: ib.OpRDMAWrite, Signaled: true, RemoteAddr: l.ini.mr.Addr() + dataOff + 1024, RKey: l.ini.mr.RKey(),
			SGL: []ib.SGE{l.tgt.sge(dataOff, 64)}},
	}
	wcs := make([]ib.Completion, 4)
	allocs := testing.AllocsPerRun(200, func() {
		if n, err := l.tgt.c.PostSend(wrs); n != 2 || err != nil {
			panic(fmt.Sprint(n, err))
		}
		for got := 0; got < 1; {
			n, err := l.tgt.c.PollCompletions(wcs)
			if err != nil || (n > 0 && wcs[0] != (ib.Completion{ID: 2, Opcode: ib.OpRDMAWrite})) {
				panic(fmt.Sprint(n, err, wcs[0]))
			}
			got += n
		}
		_, _ = l.tgt.c.PollEvent()
	})
	require.Zero(t, allocs)
}

// TestPostRegionChecks: regions must be this device's verbs regions.
func TestPostRegionChecks(t *testing.T) {
	forEachAddr(t, func(t *testing.T, a netip.Addr) {
		l := newLink(t, a, defaultLinkOpts())
		n, err := l.tgt.c.PostSend([]ib.SendWR{
			{ID: 1, Op: ib.OpRDMAWrite},
			{ID: 2, Op: ib.OpSend, SGL: []ib.SGE{{MR: lenMR{n: 4096}, Length: 8}}},
		})
		require.ErrorIs(t, err, ib.ErrInvalidArgument)
		require.Equal(t, 1, n)
		// Free a receive slot, then try to post a foreign region into it.
		post(t, l.ini.c, ib.SendWR{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{l.ini.sge(sendOff, 8)}})
		got := ibtest.Poll(t, l.tgt.c, 1)
		require.Equal(t, ib.Completion{ID: 2000, ByteLen: 8, Opcode: ib.OpRecv}, got[0])
		_, err = l.tgt.c.PostRecv([]ib.RecvWR{{ID: 1, SGL: []ib.SGE{{MR: lenMR{n: 4096}, Length: 8}}}})
		require.ErrorIs(t, err, ib.ErrInvalidArgument)
		n, err = l.tgt.c.PostRecv([]ib.RecvWR{{ID: 2000, SGL: []ib.SGE{l.tgt.sge(recvOff, bufSize)}}})
		require.NoError(t, err)
		require.Equal(t, 1, n, "the refused receive gave its slot back")
	})
}

// TestRoundTrips: 10,000 SEND/RECV round trips of 64 bytes, both ends waiting on Ready as the
// engine does. Logs the latencies. (Busy-polling both ends is not measured: on the VM's two
// vCPUs it starves rxe's kernel threads and says nothing about real hardware.)
func TestRoundTrips(t *testing.T) {
	forEachAddr(t, func(t *testing.T, a netip.Addr) {
		l := newLink(t, a, defaultLinkOpts())
		const rounds = 10000
		done := make(chan error, 1)
		go func() { done <- echo(l.tgt, rounds, false) }()
		rtts := make([]time.Duration, rounds)
		wcs := make([]ib.Completion, 4)
		msg := l.ini.buf(sendOff, 64)
		for i := range rounds {
			copy(msg, fmt.Sprintf("%08d", i))
			start := time.Now()
			post(t, l.ini.c, ib.SendWR{ID: uint64(i), Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{l.ini.sge(sendOff, 64)}})
			// Our SEND's completion and the echo's receive, in either order.
			got, err := poll(l.ini.c, wcs, 2, false)
			require.NoError(t, err)
			rtts[i] = time.Since(start)
			recv := got[0]
			if recv.Opcode != ib.OpRecv {
				recv = got[1]
			}
			require.Equal(t, ib.StatusSuccess, got[0].Status)
			require.Equal(t, ib.StatusSuccess, got[1].Status)
			require.Equal(t, ib.OpRecv, recv.Opcode)
			require.Equal(t, uint32(64), recv.ByteLen)
			slot := int(recv.ID - 1000)
			require.Equal(t, fmt.Sprintf("%08d", i), string(l.ini.buf(recvOff+slot*bufSize, 8)))
			_, err = l.ini.c.PostRecv([]ib.RecvWR{{ID: recv.ID, SGL: []ib.SGE{l.ini.sge(recvOff+slot*bufSize, bufSize)}}})
			require.NoError(t, err)
		}
		require.NoError(t, <-done)
		slices.Sort(rtts)
		var sum time.Duration
		for _, d := range rtts {
			sum += d
		}
		t.Logf("%v ready: %d round trips of 64 B: mean %v, p50 %v, p99 %v, max %v",
			a, rounds, sum/rounds, rtts[rounds/2], rtts[rounds*99/100], rtts[rounds-1])
	})
}

// poll returns exactly n completions, busy-polling or waiting on Ready.
func poll(c ib.Conn, wcs []ib.Completion, n int, busy bool) ([]ib.Completion, error) {
	got := 0
	for got < n {
		k, err := c.PollCompletions(wcs[got:n])
		if err != nil {
			return nil, err
		}
		got += k
		if k == 0 && !busy {
			select {
			case <-c.Ready():
			case <-time.After(waitLimit):
				return nil, fmt.Errorf("%v: %d of %d completions within %v", c, got, n, waitLimit)
			}
		}
	}
	return wcs[:n], nil
}

// echo sends every message it receives back from its receive buffer, and posts the buffer
// again once the SEND is complete: the target half of TestRoundTrips.
func echo(s side, rounds int, busy bool) error {
	wcs := make([]ib.Completion, 1)
	for sent := 0; sent < rounds; {
		got, err := poll(s.c, wcs, 1, busy)
		if err != nil {
			return err
		}
		c := got[0]
		if c.Status != ib.StatusSuccess {
			return fmt.Errorf("echo: %+v", c)
		}
		switch c.Opcode {
		case ib.OpRecv:
			slot := int(c.ID - 2000)
			sg := s.sge(recvOff+slot*bufSize, int(c.ByteLen))
			if _, err := s.c.PostSend([]ib.SendWR{{ID: uint64(slot), Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{sg}}}); err != nil {
				return err
			}
		case ib.OpSend:
			slot := int(c.ID)
			sent++
			if _, err := s.c.PostRecv([]ib.RecvWR{{ID: uint64(2000 + slot), SGL: []ib.SGE{s.sge(recvOff+slot*bufSize, bufSize)}}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestServeAllocs: a wake-up under Serve (ib.Waiter) allocates nothing: the park in the
// netpoller, the read of the completion event, the interrupt-free round and the step, which
// polls, re-posts the receive and arms as the SRP channel does.
func TestServeAllocs(t *testing.T) {
	a := testAddrs(t)[0]
	l := newLink(t, a, defaultLinkOpts())
	tc := l.tgt.c.(*Conn)
	woke := make(chan uint64, 1)
	var stop atomic.Bool
	wcs := make([]ib.Completion, 4)
	recv := make([]ib.RecvWR, 1)
	sgl := make([]ib.SGE, 1)
	drain := func() int {
		n, err := tc.PollCompletions(wcs)
		if err != nil {
			panic(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != ib.StatusSuccess || wc.Opcode != ib.OpRecv {
				panic(fmt.Sprint(wc))
			}
			sgl[0] = l.tgt.sge(recvOff+int(wc.ID-2000)*bufSize, bufSize)
			recv[0] = ib.RecvWR{ID: wc.ID, SGL: sgl}
			if _, err := tc.PostRecv(recv); err != nil {
				panic(err)
			}
			woke <- wc.ID
		}
		return n
	}
	step := func(bool) bool {
		if stop.Load() {
			return true
		}
		for drain() > 0 {
		}
		if err := tc.ArmNotify(false); err != nil {
			panic(err)
		}
		for drain() > 0 {
		}
		return false
	}
	served := make(chan error, 1)
	go func() { served <- tc.Serve(step) }()

	send := []ib.SendWR{{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{l.ini.sge(sendOff, 64)}}}
	iwcs := make([]ib.Completion, 1)
	round := func() {
		if _, err := l.iniConn.PostSend(send); err != nil {
			panic(err)
		}
		<-woke
		for {
			n, err := l.iniConn.PollCompletions(iwcs)
			if err != nil || (n == 1 && iwcs[0] != (ib.Completion{ID: 1, Opcode: ib.OpSend})) {
				panic(fmt.Sprint(n, err, iwcs[0]))
			}
			if n == 1 {
				return
			}
		}
	}
	round() // the first wake-up starts what runs once (the netpoller's registration)
	allocs := testing.AllocsPerRun(200, round)
	stop.Store(true)
	tc.Interrupt()
	require.NoError(t, <-served)
	require.Zero(t, allocs)
}
