package memfabric

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

func TestSendRecv(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{Async: m.async})
			// Target: two receive buffers, the second split over two SGEs of 10 and 54 bytes.
			tmr := register(t, e.target.PD(), 256, ib.AccessLocalWrite)
			ap := srpAccept()
			ap.Recv = []ib.RecvWR{
				{ID: 100, SGL: []ib.SGE{{MR: tmr, Offset: 0, Length: 64}}},
				{ID: 101, SGL: []ib.SGE{{MR: tmr, Offset: 100, Length: 10}, {MR: tmr, Offset: 200, Length: 54}}},
			}
			imr := register(t, e.initiator.PD(), 256, ib.AccessLocalWrite)
			cp := srpConnect()
			cp.Recv = recvs(imr, []uint64{100}, 64)
			tc, ic := e.connect(t, cp, ap)

			want1 := bytes.Clone(fill(imr.Bytes()[:40], 1))
			src := fill(imr.Bytes()[128:188], 2)
			want2 := bytes.Clone(src)
			// Two SENDs in one post: the first gathered from two SGEs, the second inline.
			n, err := ic.PostSend([]ib.SendWR{
				{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: imr, Offset: 0, Length: 25}, {MR: imr, Offset: 25, Length: 15}}},
				{ID: 2, Op: ib.OpSend, Signaled: true, Inline: true, SGL: []ib.SGE{{MR: imr, Offset: 128, Length: 60}}},
			})
			require.NoError(t, err)
			require.Equal(t, 2, n)
			// Inline data was copied at post time: scribbling over the source now is harmless
			// (in async mode the SEND has typically not executed yet).
			clear(src)
			require.Equal(t, []ib.Completion{ok(1, ib.OpSend), ok(2, ib.OpSend)}, poll(t, ic, 2))

			require.Equal(t, []ib.Completion{recvd(100, 40), recvd(101, 60)}, poll(t, tc, 2))
			require.Equal(t, want1, tmr.Bytes()[:40])
			require.Equal(t, want2[:10], tmr.Bytes()[100:110])
			require.Equal(t, want2[10:], tmr.Bytes()[200:250])
			require.Equal(t, make([]byte, 4), tmr.Bytes()[250:254], "bytes past the message untouched")

			// And back: target to initiator, unsignaled SEND produces no completion.
			copy(tmr.Bytes()[64:], "srp-rsp")
			_, err = tc.PostSend([]ib.SendWR{{ID: 3, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr, Offset: 64, Length: 7}}}})
			require.NoError(t, err)
			require.Equal(t, []ib.Completion{recvd(100, 7)}, poll(t, ic, 1))
			require.Equal(t, []byte("srp-rsp"), imr.Bytes()[:7])
			requireNoCompletions(t, tc)
		})
	}
}

// The SRP data-in path: RDMA WRITEs and the response SEND posted as one chain. When the
// initiator sees the receive completion, the written data must already be in its memory.
func TestWriteThenSendOrdering(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{Async: m.async})
			const rounds = 50
			tmr := register(t, e.target.PD(), 8192, ib.AccessLocalWrite)
			imr := register(t, e.initiator.PD(), 8192, ib.AccessLocalWrite|ib.AccessRemoteWrite)
			irecv := register(t, e.initiator.PD(), 64, ib.AccessLocalWrite)
			cp := srpConnect()
			cp.Recv = recvs(irecv, []uint64{100}, 64)
			tc, ic := e.connect(t, cp, srpAccept())

			for round := range rounds {
				data := fill(tmr.Bytes()[:6000], byte(round))
				copy(tmr.Bytes()[6000:], []byte{byte(round)})
				chain := []ib.SendWR{
					{ID: 1, Op: ib.OpRDMAWrite, SGL: []ib.SGE{{MR: tmr, Offset: 0, Length: 4096}}, RemoteAddr: imr.Addr(), RKey: imr.RKey()},
					{ID: 2, Op: ib.OpRDMAWrite, SGL: []ib.SGE{{MR: tmr, Offset: 4096, Length: 1000}, {MR: tmr, Offset: 5096, Length: 904}},
						RemoteAddr: imr.Addr() + 4096, RKey: imr.RKey()},
					{ID: 3, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 6000, Length: 1}}},
				}
				_, err := tc.PostSend(chain)
				require.NoError(t, err)

				require.Equal(t, []ib.Completion{recvd(100, 1)}, poll(t, ic, 1))
				require.Equal(t, byte(round), irecv.Bytes()[0])
				require.Equal(t, data, imr.Bytes()[:6000], "round %d", round)
				_, err = ic.PostRecv(recvs(irecv, []uint64{100}, 64))
				require.NoError(t, err)
				// Only the signaled SEND completes at the target.
				require.Equal(t, []ib.Completion{ok(3, ib.OpSend)}, poll(t, tc, 1))
			}
		})
	}
}

// The SRP data-out path: the target RDMA READs the initiator's buffer.
func TestRDMARead(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{Async: m.async})
			tmr := register(t, e.target.PD(), 4096, ib.AccessLocalWrite)
			imr := register(t, e.initiator.PD(), 4096, ib.AccessRemoteRead)
			tc, _ := e.connect(t, srpConnect(), srpAccept())
			want := bytes.Clone(fill(imr.Bytes(), 3)[1000:3000])

			_, err := tc.PostSend([]ib.SendWR{
				{ID: 1, Op: ib.OpRDMARead, SGL: []ib.SGE{{MR: tmr, Offset: 10, Length: 500}, {MR: tmr, Offset: 2000, Length: 1500}},
					RemoteAddr: imr.Addr() + 1000, RKey: imr.RKey()},
				// A zero-length READ is legal and checks no key.
				{ID: 2, Op: ib.OpRDMARead, Signaled: true, RKey: 0xdead},
			})
			require.NoError(t, err)
			require.Equal(t, []ib.Completion{ok(2, ib.OpRDMARead)}, poll(t, tc, 1))
			require.Equal(t, want[:500], tmr.Bytes()[10:510])
			require.Equal(t, want[500:], tmr.Bytes()[2000:3500])
		})
	}
}

func TestBatchPostPoll(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{Async: m.async})
			const n = 40
			qp := ib.QPCaps{SendQueueDepth: n, RecvQueueDepth: n, MaxSendSGE: 1, MaxRecvSGE: 1}
			tmr := register(t, e.target.PD(), n*8, ib.AccessLocalWrite)
			ids := make([]uint64, n)
			for i := range ids {
				ids[i] = 100 + uint64(i)
			}
			ap := srpAccept()
			ap.QP = qp
			ap.Recv = recvs(tmr, ids, 8)
			cp := srpConnect()
			cp.QP = qp
			tc, ic := e.connect(t, cp, ap)

			imr := register(t, e.initiator.PD(), n*8, 0)
			fill(imr.Bytes(), 9)
			wrs := make([]ib.SendWR, n)
			for i := range wrs {
				wrs[i] = ib.SendWR{ID: uint64(i), Op: ib.OpSend, Signaled: i%2 == 1, SGL: []ib.SGE{{MR: imr, Offset: uint64(i) * 8, Length: uint32(i%8 + 1)}}}
			}
			got, err := ic.PostSend(wrs)
			require.NoError(t, err)
			require.Equal(t, n, got)

			var want []ib.Completion
			for i := 1; i < n; i += 2 {
				want = append(want, ok(uint64(i), ib.OpSend))
			}
			require.Equal(t, want, poll(t, ic, n/2))
			rc := poll(t, tc, n)
			for i, wc := range rc {
				require.Equal(t, recvd(100+uint64(i), i%8+1), wc)
				require.Equal(t, imr.Bytes()[i*8:i*8+i%8+1], tmr.Bytes()[i*8:i*8+i%8+1])
			}
			requireNoCompletions(t, tc)
		})
	}
}

func TestSlots(t *testing.T) {
	e := newEnv(t, Options{})
	qp := ib.QPCaps{SendQueueDepth: 4, RecvQueueDepth: 2, MaxSendSGE: 1, MaxRecvSGE: 1}
	tmr := register(t, e.target.PD(), 64, ib.AccessLocalWrite)
	imr := register(t, e.initiator.PD(), 64, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	ap := srpAccept()
	ap.QP = qp
	cp := srpConnect()
	cp.QP = qp
	tc, ic := e.connect(t, cp, ap)
	write := func(id uint64, signaled bool) ib.SendWR {
		return ib.SendWR{ID: id, Op: ib.OpRDMAWrite, Signaled: signaled, SGL: []ib.SGE{{MR: tmr, Length: 8}}, RemoteAddr: imr.Addr(), RKey: imr.RKey()}
	}

	// Six unsignaled WRITEs into a 4-deep send queue: four are posted (and execute), the
	// fifth is refused.
	wrs := []ib.SendWR{write(1, false), write(2, false), write(3, false), write(4, false), write(5, false), write(6, false)}
	n, err := tc.PostSend(wrs)
	require.ErrorIs(t, err, ib.ErrQueueFull)
	require.Equal(t, 4, n)
	// They all succeeded, yet no completion will ever free their slots: the classic
	// "all unsignaled" wedge.
	requireNoCompletions(t, tc)
	_, err = tc.PostSend([]ib.SendWR{write(7, true)})
	require.ErrorIs(t, err, ib.ErrQueueFull)

	// A fresh QP: three unsignaled and one signaled; polling the one completion frees all four.
	tc2, _ := e.connect(t, cp, ap)
	n, err = tc2.PostSend([]ib.SendWR{write(1, false), write(2, false), write(3, false), write(4, true)})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	_, err = tc2.PostSend([]ib.SendWR{write(5, true)})
	require.ErrorIs(t, err, ib.ErrQueueFull, "slots are freed by polling, not by execution")
	require.Equal(t, []ib.Completion{ok(4, ib.OpRDMAWrite)}, poll(t, tc2, 1))
	n, err = tc2.PostSend([]ib.SendWR{write(5, false), write(6, false), write(7, false), write(8, true)})
	require.NoError(t, err)
	require.Equal(t, 4, n)

	// Receive queue: a consumed receive holds its slot until its completion is polled.
	n, err = ic.PostRecv(recvs(imr, []uint64{100, 101, 102}, 8))
	require.ErrorIs(t, err, ib.ErrQueueFull)
	require.Equal(t, 2, n)
	_, err = tc2.PostSend(nil) // empty post is fine
	require.NoError(t, err)
	tc3, ic3 := e.connect(t, cp, ap)
	_, err = ic3.PostRecv(recvs(imr, []uint64{100, 101}, 8))
	require.NoError(t, err)
	_, err = tc3.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr, Length: 4}}}})
	require.NoError(t, err)
	_, err = ic3.PostRecv(recvs(imr, []uint64{102}, 8))
	require.ErrorIs(t, err, ib.ErrQueueFull)
	require.Equal(t, []ib.Completion{recvd(100, 4)}, poll(t, ic3, 1))
	_, err = ic3.PostRecv(recvs(imr, []uint64{102}, 8))
	require.NoError(t, err)
}

func TestPostValidation(t *testing.T) {
	lim := DefaultLimits
	lim.MaxReadSGE = 1 // iWARP-like
	e := newEnv(t, Options{Limits: lim})
	tmr := register(t, e.target.PD(), 256, ib.AccessLocalWrite)
	imr := register(t, e.initiator.PD(), 256, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
	tc, ic := e.connect(t, srpConnect(), srpAccept())
	sge := ib.SGE{MR: tmr, Length: 8}
	read := func(sgl ...ib.SGE) ib.SendWR {
		return ib.SendWR{ID: 1, Op: ib.OpRDMARead, SGL: sgl, RemoteAddr: imr.Addr(), RKey: imr.RKey()}
	}

	tests := []struct {
		name string
		conn ib.Conn
		wr   ib.SendWR
	}{
		{"zero opcode", tc, ib.SendWR{ID: 1, SGL: []ib.SGE{sge}}},
		{"recv opcode", tc, ib.SendWR{ID: 1, Op: ib.OpRecv, SGL: []ib.SGE{sge}}},
		{"too many SGEs", tc, ib.SendWR{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{sge, sge, sge, sge, sge}}},
		{"zero-length SGE", tc, ib.SendWR{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr}}}},
		{"SGE without region", tc, ib.SendWR{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{Length: 8}}}},
		{"inline too long", tc, ib.SendWR{ID: 1, Op: ib.OpSend, Inline: true, SGL: []ib.SGE{{MR: tmr, Length: 65}}}},
		{"inline outside region", tc, ib.SendWR{ID: 1, Op: ib.OpSend, Inline: true, SGL: []ib.SGE{{MR: tmr, Offset: 250, Length: 8}}}},
		{"inline read", tc, ib.SendWR{ID: 1, Op: ib.OpRDMARead, Inline: true, SGL: []ib.SGE{sge}}},
		{"read SGEs above max_sge_rd", tc, read(sge, sge)},
		// ib_srp offers initiator depth 0, so the initiator side may not READ.
		{"read with initiator depth 0", ic, read(ib.SGE{MR: imr, Length: 8})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := tt.conn.PostSend([]ib.SendWR{tt.wr})
			require.ErrorIs(t, err, ib.ErrInvalidArgument)
			require.Zero(t, n)
		})
	}
	_, err := tc.PostRecv([]ib.RecvWR{{ID: 100, SGL: []ib.SGE{sge, sge, sge, sge, sge}}})
	require.ErrorIs(t, err, ib.ErrInvalidArgument)

	// None of that hurt the QP. A partial post: the good work request before the bad one runs.
	n, err := tc.PostSend([]ib.SendWR{
		{ID: 1, Op: ib.OpRDMARead, Signaled: true, SGL: []ib.SGE{sge}, RemoteAddr: imr.Addr(), RKey: imr.RKey()},
		{ID: 2},
		{ID: 3, Op: ib.OpRDMARead, Signaled: true, SGL: []ib.SGE{sge}, RemoteAddr: imr.Addr(), RKey: imr.RKey()},
	})
	require.Equal(t, 1, n)
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	require.ErrorContains(t, err, "work request 1")
	require.Equal(t, []ib.Completion{ok(1, ib.OpRDMARead)}, poll(t, tc, 1))
}

// Many connections, each driven by its own pair of goroutines, as the engine runs them.
func TestParallelConnections(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{Async: m.async})
			const conns, rounds = 8, 100
			var wg sync.WaitGroup
			errs := make(chan error, 2*conns)
			for c := range conns {
				tmr := register(t, e.target.PD(), 4096+64, ib.AccessLocalWrite)
				imr := register(t, e.initiator.PD(), 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite)
				ireq := register(t, e.initiator.PD(), 64, ib.AccessLocalWrite)
				ap := srpAccept()
				ap.Recv = recvs(tmr, []uint64{100}, 64)
				cp := srpConnect()
				cp.Recv = recvs(ireq, []uint64{100}, 64)
				tc, ic := e.connect(t, cp, ap)
				wg.Add(2)
				go func() { defer wg.Done(); errs <- serveTarget(tc, tmr, rounds) }()
				go func() { defer wg.Done(); errs <- driveInitiator(ic, imr, ireq, byte(c), rounds) }()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
		})
	}
}

// serveTarget answers each 1-byte request with 4 KiB of RDMA WRITE (the request byte repeated)
// plus a response SEND, like a SCSI READ.
func serveTarget(c ib.Conn, mr ib.MR, rounds int) error {
	var wcs [4]ib.Completion
	remote := make([]byte, 16)
	for done := 0; done < rounds; {
		if err := waitOne(c, wcs[:1]); err != nil {
			return err
		}
		if wcs[0] != recvd(100, 16) {
			return errors.New("target: unexpected " + wcs[0].Status.String())
		}
		copy(remote, mr.Bytes()[:16])
		seed := remote[0]
		data := mr.Bytes()[64:]
		for i := range data {
			data[i] = seed
		}
		addr, rkey := leUint64(remote[1:9]), uint32(leUint64(remote[9:16]))
		if _, err := c.PostRecv([]ib.RecvWR{{ID: 100, SGL: []ib.SGE{{MR: mr, Length: 64}}}}); err != nil {
			return err
		}
		if _, err := c.PostSend([]ib.SendWR{
			{ID: 1, Op: ib.OpRDMAWrite, SGL: []ib.SGE{{MR: mr, Offset: 64, Length: 4096}}, RemoteAddr: addr, RKey: rkey},
			{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: mr, Offset: 64, Length: 1}}},
		}); err != nil {
			return err
		}
		if err := waitOne(c, wcs[:1]); err != nil {
			return err
		}
		if wcs[0] != ok(2, ib.OpSend) {
			return errors.New("target: send " + wcs[0].Status.String())
		}
		done++
	}
	return nil
}

func driveInitiator(c *Conn, data, req ib.MR, id byte, rounds int) error {
	var wcs [4]ib.Completion
	for round := range rounds {
		seed := id*31 + byte(round)
		msg := req.Bytes()[32:48]
		msg[0] = seed
		putLeUint64(msg[1:9], data.Addr())
		putLeUint64(msg[9:16], uint64(data.RKey()))
		// Posted before the request goes out, so the response can never meet an empty queue.
		if _, err := c.PostRecv([]ib.RecvWR{{ID: 100, SGL: []ib.SGE{{MR: req, Length: 32}}}}); err != nil {
			return err
		}
		if _, err := c.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: req, Offset: 32, Length: 16}}}}); err != nil {
			return err
		}
		// Two completions, in either order: our SEND and the response.
		for range 2 {
			if err := waitOne(c, wcs[:1]); err != nil {
				return err
			}
			if wcs[0].Status != ib.StatusSuccess {
				return errors.New("initiator: " + wcs[0].Status.String())
			}
			if wcs[0].Opcode == ib.OpRecv && !bytes.Equal(data.Bytes(), bytes.Repeat([]byte{seed}, 4096)) {
				return errors.New("initiator: RDMA WRITE data not in place at the response")
			}
		}
	}
	return nil
}

func waitOne(c ib.Conn, wcs []ib.Completion) error {
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		n, err := c.PollCompletions(wcs)
		if err != nil || n > 0 {
			return err
		}
		select {
		case <-c.Ready():
		case <-deadline.C:
			return errors.New("timeout waiting for a completion")
		}
	}
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func putLeUint64(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v)
		v >>= 8
	}
}

func TestSlabMemory(t *testing.T) {
	e := newEnv(t, Options{})
	slab, err := ib.NewSlab(10000)
	require.NoError(t, err)
	defer func() { require.NoError(t, slab.Close()) }()
	tmr, err := e.target.PD().RegisterMemory(slab.Bytes(), ib.AccessLocalWrite)
	require.NoError(t, err)
	imr := register(t, e.initiator.PD(), 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	tc, _ := e.connect(t, srpConnect(), srpAccept())
	fill(slab.Bytes()[4096:8192], 4)
	_, err = tc.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpRDMAWrite, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 4096, Length: 4096}},
		RemoteAddr: imr.Addr(), RKey: imr.RKey()}})
	require.NoError(t, err)
	require.Equal(t, []ib.Completion{ok(1, ib.OpRDMAWrite)}, poll(t, tc, 1))
	require.Equal(t, slab.Bytes()[4096:8192], imr.Bytes())
	require.NoError(t, tc.Close())
	require.NoError(t, tmr.Deregister())
}

func TestRegisterMemory(t *testing.T) {
	e := newEnv(t, Options{})
	pd := e.target.PD()
	for _, tt := range []struct {
		name string
		size int
		acc  ib.Access
	}{
		{"empty", 0, ib.AccessLocalWrite},
		{"remote write without local write", 8, ib.AccessRemoteWrite},
		{"unknown access bit", 8, 1 << 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := pd.RegisterMemory(make([]byte, tt.size), tt.acc)
			require.ErrorIs(t, err, ib.ErrInvalidArgument)
		})
	}
	a := register(t, pd, 8, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
	b := register(t, pd, 8, 0)
	require.NotEqual(t, a.LKey(), a.RKey())
	require.NotEqual(t, a.RKey(), b.RKey())
	require.NotEqual(t, a.Addr(), b.Addr())
	require.Equal(t, 8, a.Len())
	require.Equal(t, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead, a.Access())
	require.NoError(t, a.Deregister())
	require.ErrorIs(t, a.Deregister(), ib.ErrClosed)
}

// TestRDMAReadIWARP: with Options.IWARP an RDMA READ sink needs remote write access as well;
// without it the READ fails and the QP goes to the error state. Without the option local write
// is enough (IB, RoCE).
func TestRDMAReadIWARP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		iwarp  bool
		access ib.Access
		want   ib.Status
	}{
		{"IB: local write", false, ib.AccessLocalWrite, ib.StatusSuccess},
		{"iWARP: local write only", true, ib.AccessLocalWrite, ib.StatusLocalProtectionError},
		{"iWARP: local and remote write", true, ib.AccessLocalWrite | ib.AccessRemoteWrite, ib.StatusSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{IWARP: tc.iwarp})
			sink := register(t, e.target.PD(), 4096, tc.access)
			imr := register(t, e.initiator.PD(), 4096, ib.AccessRemoteRead)
			tc2, _ := e.connect(t, srpConnect(), srpAccept())
			want := bytes.Clone(fill(imr.Bytes(), 5))
			_, err := tc2.PostSend([]ib.SendWR{
				{ID: 1, Op: ib.OpRDMARead, Signaled: true, SGL: []ib.SGE{{MR: sink, Length: 4096}},
					RemoteAddr: imr.Addr(), RKey: imr.RKey()},
				{ID: 2, Op: ib.OpRDMAWrite, Signaled: true}, // zero-length marker behind it
			})
			require.NoError(t, err)
			if tc.want == ib.StatusSuccess {
				require.Equal(t, []ib.Completion{ok(1, ib.OpRDMARead), ok(2, ib.OpRDMAWrite)}, poll(t, tc2, 2))
				require.Equal(t, want, sink.Bytes())
				return
			}
			require.Equal(t, []ib.Completion{failed(1, tc.want), failed(2, ib.StatusWRFlushError)}, poll(t, tc2, 2))
			require.Equal(t, make([]byte, 4096), sink.Bytes(), "nothing was placed")
		})
	}
}
