package ibtest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// testSendRecv: SENDs both ways, gathered from several SGEs and scattered over several, inline
// data copied at post time, exact byte counts, completions in posting order carrying the WR
// IDs, no completion for an unsignaled success.
func testSendRecv(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	tmr := register(t, f, p.TPD, 4096, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 4096, ib.AccessLocalWrite)
	rsge := 1
	if p.Limits.MaxRecvSGE >= 2 {
		rsge = 2
	}
	// Target: two receive buffers of 64 bytes, the second split over two SGEs of 10 and 54.
	second := ib.RecvWR{ID: 101, SGL: []ib.SGE{{MR: tmr, Offset: 100, Length: 10}, {MR: tmr, Offset: 200, Length: 54}}}
	if rsge == 1 {
		second.SGL = []ib.SGE{{MR: tmr, Offset: 100, Length: 64}}
	}
	postRecv(t, p.T, ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: tmr, Length: 64}}}, second)
	postRecv(t, p.I, recvs(imr, 64, 100)...)

	want1 := bytes.Clone(Fill(imr.Bytes()[1024:1064], 1))
	wrs := []ib.SendWR{{ID: 1, Op: ib.OpSend, Signaled: true,
		SGL: []ib.SGE{{MR: imr, Offset: 1024, Length: 25}, {MR: imr, Offset: 1049, Length: 15}}}}
	src := Fill(imr.Bytes()[2048:2108], 2)
	want2 := bytes.Clone(src)
	inline := p.Limits.MaxInlineData >= 60
	if inline {
		wrs = append(wrs, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, Inline: true,
			SGL: []ib.SGE{{MR: imr, Offset: 2048, Length: 60}}})
	} else {
		t.Logf("device inline limit %d: inline SEND not exercised", p.Limits.MaxInlineData)
		wrs = append(wrs, ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: imr, Offset: 2048, Length: 60}}})
	}
	postSend(t, p.I, wrs...)
	if inline {
		// Copied at post time: scribbling over the source now is harmless.
		clear(src)
	}
	require.Equal(t, []ib.Completion{OK(1, ib.OpSend), OK(2, ib.OpSend)}, Poll(t, p.I, 2))
	require.Equal(t, []ib.Completion{Recvd(100, 40), Recvd(101, 60)}, Poll(t, p.T, 2))
	require.Equal(t, want1, tmr.Bytes()[:40])
	if rsge == 2 {
		require.Equal(t, want2[:10], tmr.Bytes()[100:110])
		require.Equal(t, want2[10:], tmr.Bytes()[200:250])
		require.Equal(t, make([]byte, 4), tmr.Bytes()[250:254], "bytes past the message untouched")
	} else {
		require.Equal(t, want2, tmr.Bytes()[100:160])
		require.Equal(t, make([]byte, 4), tmr.Bytes()[160:164], "bytes past the message untouched")
	}

	// And back: an unsignaled SEND, then a signaled one; only the second completes.
	postRecv(t, p.I, recvs(imr, 64, 101)...)
	copy(tmr.Bytes()[1024:], "srp-rsp")
	postSend(t, p.T,
		ib.SendWR{ID: 3, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr, Offset: 1024, Length: 7}}},
		ib.SendWR{ID: 4, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 1024, Length: 3}}})
	require.Equal(t, []ib.Completion{Recvd(100, 7), Recvd(101, 3)}, Poll(t, p.I, 2))
	require.Equal(t, []byte("srp-rsp"), imr.Bytes()[:7])
	require.Equal(t, []ib.Completion{OK(4, ib.OpSend)}, Poll(t, p.T, 1), "the unsignaled SEND has none")
	requireNoCompletions(t, p.T)
}

// testWriteThenSend is SRP's data-in: unsignaled RDMA WRITEs and the response SEND posted as
// one chain. When the initiator sees the receive completion, the written data must already be
// in its memory (RC ordering), every round.
func testWriteThenSend(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	const rounds = 100
	tmr := register(t, f, p.TPD, 8192, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 8192, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	irecv := register(t, f, p.IPD, 64, ib.AccessLocalWrite)
	postRecv(t, p.I, recvs(irecv, 64, 100)...)
	for round := range rounds {
		n := 1024 + (round*997)%5000
		data := bytes.Clone(Fill(tmr.Bytes()[:n], byte(round)))
		off := uint64(round%7) * 8
		half := n / 2
		copy(tmr.Bytes()[7000:], fmt.Sprintf("rsp%05d", round))
		postSend(t, p.T,
			ib.SendWR{ID: 1, Op: ib.OpRDMAWrite, RemoteAddr: imr.Addr() + off, RKey: imr.RKey(),
				SGL: []ib.SGE{{MR: tmr, Length: uint32(half)}}},
			ib.SendWR{ID: 2, Op: ib.OpRDMAWrite, RemoteAddr: imr.Addr() + off + uint64(half), RKey: imr.RKey(),
				SGL: []ib.SGE{{MR: tmr, Offset: uint64(half), Length: uint32(n - half - 1)}, {MR: tmr, Offset: uint64(n - 1), Length: 1}}},
			ib.SendWR{ID: 3, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 7000, Length: 8}}},
		)
		require.Equal(t, []ib.Completion{Recvd(100, 8)}, Poll(t, p.I, 1))
		// Checked at once, before anything else happens: ordering, not luck.
		if !bytes.Equal(data, imr.Bytes()[off:off+uint64(n)]) {
			t.Fatalf("round %d: RDMA WRITE data not in place when the SEND arrived", round)
		}
		require.Equal(t, fmt.Sprintf("rsp%05d", round), string(irecv.Bytes()[:8]))
		postRecv(t, p.I, recvs(irecv, 64, 100)...)
		// Only the signaled SEND completes at the target.
		require.Equal(t, []ib.Completion{OK(3, ib.OpSend)}, Poll(t, p.T, 1))
	}
}

// testRDMARead is SRP's data-out: the target reads the initiator's buffer into one or more
// SGEs. A zero-length READ checks no key. The initiator, which offered initiator depth 0 as
// ib_srp does, may not READ at all.
func testRDMARead(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	tmr := register(t, f, p.TPD, 65536, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 65536, ib.AccessRemoteRead)
	want := bytes.Clone(Fill(imr.Bytes(), 3)[1000:41000])
	sgl := []ib.SGE{{MR: tmr, Offset: 10, Length: 40000}}
	if p.Limits.MaxReadSGE >= 2 {
		sgl = []ib.SGE{{MR: tmr, Offset: 10, Length: 30000}, {MR: tmr, Offset: 40000, Length: 10000}}
	}
	postSend(t, p.T,
		ib.SendWR{ID: 1, Op: ib.OpRDMARead, SGL: sgl, RemoteAddr: imr.Addr() + 1000, RKey: imr.RKey()},
		ib.SendWR{ID: 2, Op: ib.OpRDMARead, Signaled: true, RKey: 0xdead},
	)
	require.Equal(t, []ib.Completion{OK(2, ib.OpRDMARead)}, Poll(t, p.T, 1))
	off := 0
	for _, g := range sgl {
		require.Equal(t, want[off:off+int(g.Length)], tmr.Bytes()[g.Offset:g.Offset+uint64(g.Length)])
		off += int(g.Length)
	}

	iown := register(t, f, p.IPD, 64, ib.AccessLocalWrite)
	tsrc := register(t, f, p.TPD, 64, ib.AccessRemoteRead)
	n, err := p.I.PostSend([]ib.SendWR{{ID: 3, Op: ib.OpRDMARead, RemoteAddr: tsrc.Addr(), RKey: tsrc.RKey(),
		SGL: []ib.SGE{{MR: iown, Length: 8}}}})
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	require.Zero(t, n)
}

// testPostTimeErrors: work requests that break the post-time rules (ib.CheckSendWR,
// ib.CheckRecvWR) are refused with ErrInvalidArgument, the QP is not hurt, and a chain is
// posted up to the bad work request, which the error names.
func testPostTimeErrors(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	caps := Caps(p.Limits)
	tmr := register(t, f, p.TPD, 256, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 256, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
	sge := ib.SGE{MR: tmr, Length: 8}
	tooMany := func(n int) []ib.SGE {
		out := make([]ib.SGE, n+1)
		for i := range out {
			out[i] = ib.SGE{MR: tmr, Offset: uint64(i), Length: 1}
		}
		return out
	}
	read := func(sgl ...ib.SGE) ib.SendWR {
		return ib.SendWR{ID: 1, Op: ib.OpRDMARead, SGL: sgl, RemoteAddr: imr.Addr(), RKey: imr.RKey()}
	}
	tests := []struct {
		name string
		wr   ib.SendWR
	}{
		{"zero opcode", ib.SendWR{ID: 1, SGL: []ib.SGE{sge}}},
		{"receive opcode", ib.SendWR{ID: 1, Op: ib.OpRecv, SGL: []ib.SGE{sge}}},
		{"too many SGEs", ib.SendWR{ID: 1, Op: ib.OpSend, SGL: tooMany(caps.MaxSendSGE)}},
		{"zero-length SGE", ib.SendWR{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: tmr}}}},
		{"SGE without region", ib.SendWR{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{Length: 8}}}},
		{"inline too long", ib.SendWR{ID: 1, Op: ib.OpSend, Inline: true, SGL: []ib.SGE{{MR: tmr, Length: uint32(caps.MaxInlineData) + 1}}}},
		{"inline read", ib.SendWR{ID: 1, Op: ib.OpRDMARead, Inline: true, SGL: []ib.SGE{sge}}},
		{"read SGEs above max_sge_rd", read(tooMany(min(caps.MaxSendSGE, p.Limits.MaxReadSGE))...)},
	}
	if caps.MaxInlineData >= 8 {
		tests = append(tests, struct {
			name string
			wr   ib.SendWR
		}{"inline outside its region", ib.SendWR{ID: 1, Op: ib.OpSend, Inline: true, SGL: []ib.SGE{{MR: tmr, Offset: 250, Length: 8}}}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := p.T.PostSend([]ib.SendWR{tt.wr})
			require.ErrorIs(t, err, ib.ErrInvalidArgument)
			require.Zero(t, n)
		})
	}
	n, err := p.T.PostRecv([]ib.RecvWR{{ID: 100, SGL: tooMany(caps.MaxRecvSGE)}})
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	require.Zero(t, n)

	// None of that hurt the QP. A partial post: the good work request before the bad one runs.
	n, err = p.T.PostSend([]ib.SendWR{
		{ID: 1, Op: ib.OpRDMARead, Signaled: true, SGL: []ib.SGE{sge}, RemoteAddr: imr.Addr(), RKey: imr.RKey()},
		{ID: 2},
		{ID: 3, Op: ib.OpRDMARead, Signaled: true, SGL: []ib.SGE{sge}, RemoteAddr: imr.Addr(), RKey: imr.RKey()},
	})
	require.Equal(t, 1, n)
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	require.ErrorContains(t, err, "work request 1")
	require.Equal(t, []ib.Completion{OK(1, ib.OpRDMARead)}, Poll(t, p.T, 1))
	requireNoCompletions(t, p.T)
}

// Regions is the memory of an error test: target-side (T*) and initiator-side (I*) regions of
// 4096 bytes. Exported for the error cases a fabric checks beyond the suite's (RequesterErrors).
type Regions struct {
	TMR    ib.MR // target, local write: SEND source, READ sink, receive buffers
	TNone  ib.MR // target, no access flags
	TOwn   ib.MR // target, remote write: an rkey of the target's own side
	TDereg ib.MR // target, deregistered
	IMR    ib.MR // initiator, all access
	IRO    ib.MR // initiator, remote read only
	IWO    ib.MR // initiator, remote write only (plus the required local write)
	IDereg ib.MR // initiator, deregistered
	IRecv  ib.MR // initiator receive buffers
}

// NewRegions registers the regions in tpd and ipd, memory from f, and fills TMR, IMR, IRO and
// IWO with distinct patterns.
func NewRegions(t *testing.T, f Fabric, tpd, ipd ib.ProtectionDomain) *Regions {
	all := ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead
	r := &Regions{
		TMR:    register(t, f, tpd, 4096, ib.AccessLocalWrite),
		TNone:  register(t, f, tpd, 4096, 0),
		TOwn:   register(t, f, tpd, 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite),
		TDereg: register(t, f, tpd, 4096, ib.AccessLocalWrite),
		IMR:    register(t, f, ipd, 4096, all),
		IRO:    register(t, f, ipd, 4096, ib.AccessRemoteRead),
		IWO:    register(t, f, ipd, 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite),
		IDereg: register(t, f, ipd, 4096, all),
		IRecv:  register(t, f, ipd, 4096, ib.AccessLocalWrite),
	}
	require.NoError(t, r.TDereg.Deregister())
	require.NoError(t, r.IDereg.Deregister())
	Fill(r.TMR.Bytes(), 11)
	Fill(r.IMR.Bytes(), 22)
	Fill(r.IRO.Bytes(), 33)
	Fill(r.IWO.Bytes(), 44)
	return r
}

// Snapshot copies the contents of the regions that are still registered.
func (r *Regions) Snapshot() [][]byte {
	var out [][]byte
	for _, mr := range []ib.MR{r.TMR, r.TNone, r.TOwn, r.IMR, r.IRO, r.IWO, r.IRecv} {
		out = append(out, bytes.Clone(mr.Bytes()))
	}
	return out
}

func write(sgl []ib.SGE, mr ib.MR, off uint64) ib.SendWR {
	return ib.SendWR{Op: ib.OpRDMAWrite, SGL: sgl, RemoteAddr: mr.Addr() + off, RKey: mr.RKey()}
}

func read(sgl []ib.SGE, mr ib.MR, off uint64) ib.SendWR {
	return ib.SendWR{Op: ib.OpRDMARead, SGL: sgl, RemoteAddr: mr.Addr() + off, RKey: mr.RKey()}
}

// RequesterError is one case of RequesterErrors: the work request that fails at execution
// and the status it completes with.
type RequesterError struct {
	Name   string
	WR     func(r *Regions) ib.SendWR
	Status ib.Status
	// StaleLKey: see Pair.StaleLKeyQPOperationError.
	StaleLKey bool
}

// requesterErrors are the suite's cases, which any fabric can set up.
var requesterErrors = []RequesterError{
	{"write wrong rkey", func(r *Regions) ib.SendWR {
		wr := write([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IMR, 0)
		wr.RKey ^= 0x5a5a00
		return wr
	}, ib.StatusRemoteAccessError, false},
	{"write past the end", func(r *Regions) ib.SendWR {
		return write([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IMR, 4096-8)
	}, ib.StatusRemoteAccessError, false},
	{"write before the start", func(r *Regions) ib.SendWR {
		wr := write([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IMR, 0)
		wr.RemoteAddr--
		return wr
	}, ib.StatusRemoteAccessError, false},
	{"write to a region without remote write", func(r *Regions) ib.SendWR {
		return write([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IRO, 0)
	}, ib.StatusRemoteAccessError, false},
	{"write with an address of another region", func(r *Regions) ib.SendWR {
		wr := write([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IMR, 0)
		wr.RemoteAddr = r.IWO.Addr()
		return wr
	}, ib.StatusRemoteAccessError, false},
	{"write to a deregistered region", func(r *Regions) ib.SendWR {
		return write([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IDereg, 0)
	}, ib.StatusRemoteAccessError, false},
	{"read wrong rkey", func(r *Regions) ib.SendWR {
		wr := read([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IMR, 0)
		wr.RKey ^= 0x5a5a00
		return wr
	}, ib.StatusRemoteAccessError, false},
	{"read past the end", func(r *Regions) ib.SendWR {
		return read([]ib.SGE{{MR: r.TMR, Length: 1200}}, r.IMR, 4096-1199)
	}, ib.StatusRemoteAccessError, false},
	{"read from a region without remote read", func(r *Regions) ib.SendWR {
		return read([]ib.SGE{{MR: r.TMR, Length: 16}}, r.IWO, 0)
	}, ib.StatusRemoteAccessError, false},
	{"local SGE past the end of its region", func(r *Regions) ib.SendWR {
		return write([]ib.SGE{{MR: r.TMR, Length: 8}, {MR: r.TMR, Offset: 4090, Length: 16}}, r.IMR, 0)
	}, ib.StatusLocalProtectionError, false},
	{"local SGE in a deregistered region", func(r *Regions) ib.SendWR {
		return ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{{MR: r.TDereg, Length: 8}}}
	}, ib.StatusLocalProtectionError, true},
	{"read into a region without local write", func(r *Regions) ib.SendWR {
		return read([]ib.SGE{{MR: r.TNone, Length: 16}}, r.IMR, 0)
	}, ib.StatusLocalProtectionError, false},
}

// testRequesterErrors runs the suite's requester errors.
func testRequesterErrors(t *testing.T, f Fabric) { RequesterErrors(t, f, requesterErrors) }

// RequesterErrors: a work request of the target (as requester) that fails at execution
// completes with its own status even though it is unsignaled, moves no data, and puts the QP
// in the error state: everything behind it and every posted receive is flushed with
// StatusWRFlushError in posting order, and later posts succeed and flush at once. For remote
// access errors the initiator's QP (the responder) goes to the error state too. QP errors are
// no CM events. The suite runs its own cases; a fabric runs with it the cases only it can set
// up.
func RequesterErrors(t *testing.T, f Fabric, cases []RequesterError) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			p := f.Connect(t, Caps)
			r := NewRegions(t, f, p.TPD, p.IPD)
			postRecv(t, p.T, recvs(r.TMR, 64, 100, 101)...)
			postRecv(t, p.I, recvs(r.IRecv, 64, 100, 101)...)
			before := r.Snapshot()

			bad := tt.WR(r)
			bad.ID = 1 // unsignaled: errors complete anyway
			postSend(t, p.T,
				bad,
				ib.SendWR{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.TMR, Length: 8}}},
				ib.SendWR{ID: 3, Op: ib.OpRDMAWrite, Signaled: true, SGL: []ib.SGE{{MR: r.TMR, Length: 8}}, RemoteAddr: r.IMR.Addr(), RKey: r.IMR.RKey()},
			)
			status := tt.Status
			if tt.StaleLKey && p.StaleLKeyQPOperationError {
				status = ib.StatusLocalQPOperationError
			}
			sq, rq := Split(Poll(t, p.T, 5))
			require.Equal(t, []ib.Completion{Failed(1, status), Failed(2, ib.StatusWRFlushError), Failed(3, ib.StatusWRFlushError)}, sq)
			require.Equal(t, flushed(100, 101), rq)
			require.Equal(t, before, r.Snapshot(), "a failed work request moves no data")

			if tt.Status == ib.StatusRemoteAccessError {
				require.Equal(t, flushed(100, 101), Poll(t, p.I, 2), "the responder's QP is in the error state as well")
			} else {
				requireNoCompletions(t, p.I)
			}

			// In the error state posts succeed and flush at once, in posting order; a
			// zero-length WRITE is the drain marker.
			postSend(t, p.T, ib.SendWR{ID: 4, Op: ib.OpSend, SGL: []ib.SGE{{MR: r.TMR, Length: 8}}}, ib.SendWR{ID: 5, Op: ib.OpRDMAWrite})
			require.Equal(t, flushed(4, 5), Poll(t, p.T, 2))
			postRecv(t, p.T, recvs(r.TMR, 64, 102)...)
			if p.RecvInErrorNotFlushed {
				requireNoCompletions(t, p.T)
			} else {
				require.Equal(t, flushed(102), Poll(t, p.T, 1))
			}
			requireNoEvent(t, p.T)
			requireNoEvent(t, p.I)
		})
	}
}

// testQueueFull: a send-queue work request holds its slot until its own completion or a later
// one of the same queue is polled, so unsignaled work requests alone fill the queue; a consumed
// receive holds its slot until its completion is polled. A post beyond the free slots posts what
// fits and fails with ErrQueueFull.
func testQueueFull(t *testing.T, f Fabric) {
	const depth = 4
	small := func(lim ib.DeviceLimits) ib.QPCaps {
		c := Caps(lim)
		c.SendQueueDepth, c.RecvQueueDepth = depth, 2
		return c
	}
	p := f.Connect(t, small)
	tmr := register(t, f, p.TPD, 64, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 64, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	write := func(id uint64, signaled bool) ib.SendWR {
		return ib.SendWR{ID: id, Op: ib.OpRDMAWrite, Signaled: signaled, SGL: []ib.SGE{{MR: tmr, Length: 8}}, RemoteAddr: imr.Addr(), RKey: imr.RKey()}
	}

	// Six unsignaled WRITEs into a 4-deep send queue: four are posted (and execute), the
	// fifth is refused. They all succeed, yet no completion will ever free their slots.
	n, err := p.T.PostSend([]ib.SendWR{write(1, false), write(2, false), write(3, false), write(4, false), write(5, false), write(6, false)})
	require.ErrorIs(t, err, ib.ErrQueueFull)
	require.Equal(t, depth, n)
	requireNoCompletions(t, p.T)
	_, err = p.T.PostSend([]ib.SendWR{write(7, true)})
	require.ErrorIs(t, err, ib.ErrQueueFull)

	// A fresh QP: three unsignaled and one signaled; polling the one completion frees all four.
	p = f.Connect(t, small)
	tmr = register(t, f, p.TPD, 64, ib.AccessLocalWrite)
	imr = register(t, f, p.IPD, 64, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	postSend(t, p.T, write(1, false), write(2, false), write(3, false), write(4, true))
	_, err = p.T.PostSend([]ib.SendWR{write(5, true)})
	require.ErrorIs(t, err, ib.ErrQueueFull, "slots are freed by polling, not by execution")
	require.Equal(t, []ib.Completion{OK(4, ib.OpRDMAWrite)}, Poll(t, p.T, 1))
	postSend(t, p.T, write(5, false), write(6, false), write(7, false), write(8, true))
	require.Equal(t, []ib.Completion{OK(8, ib.OpRDMAWrite)}, Poll(t, p.T, 1))
	n, err = p.T.PostSend(nil)
	require.NoError(t, err, "an empty post is fine")
	require.Zero(t, n)

	// Receive queue: two slots; a third receive is refused, and a consumed receive holds its
	// slot until its completion is polled.
	n, err = p.I.PostRecv(recvs(imr, 8, 100, 101, 102))
	require.ErrorIs(t, err, ib.ErrQueueFull)
	require.Equal(t, 2, n)
	postSend(t, p.T, ib.SendWR{ID: 9, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: tmr, Length: 4}}})
	require.Equal(t, []ib.Completion{OK(9, ib.OpSend)}, Poll(t, p.T, 1))
	_, err = p.I.PostRecv(recvs(imr, 8, 102))
	require.ErrorIs(t, err, ib.ErrQueueFull)
	require.Equal(t, []ib.Completion{Recvd(100, 4)}, Poll(t, p.I, 1))
	postRecv(t, p.I, recvs(imr, 8, 102)...)
}

// testDisconnect: Disconnect flushes the receives with their IDs in posting order and the peer
// gets EventDisconnected, exactly once each side; the peer's QP stays up until it disconnects
// itself; a second Disconnect is harmless; Close of a connected QP disconnects the peer.
func testDisconnect(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	tmr := register(t, f, p.TPD, 4096, ib.AccessLocalWrite)
	imr := register(t, f, p.IPD, 4096, ib.AccessLocalWrite)
	postRecv(t, p.T, recvs(tmr, 64, 100, 101, 102)...)
	postRecv(t, p.I, recvs(imr, 64, 100, 101)...)

	require.NoError(t, p.I.Disconnect())
	require.Equal(t, flushed(100, 101), Poll(t, p.I, 2))
	WaitEvent(t, p.T, ib.EventDisconnected)
	// The peer's DREQ does not touch our QP: the engine disconnects, which answers the DREQ
	// and flushes.
	requireNoCompletions(t, p.T)
	require.NoError(t, p.T.Disconnect())
	require.Equal(t, flushed(100, 101, 102), Poll(t, p.T, 3))
	WaitEvent(t, p.I, ib.EventDisconnected)
	require.NoError(t, p.T.Disconnect(), "a second Disconnect is harmless")
	time.Sleep(quiet)
	requireNoEvent(t, p.T)
	requireNoEvent(t, p.I)

	// Close without Disconnect: the peer gets the DREQ.
	p2 := f.Connect(t, Caps)
	require.NoError(t, p2.T.Close())
	WaitEvent(t, p2.I, ib.EventDisconnected)
}

// testPostAfterClose: after Close every call fails with ErrClosed and a second Close is a
// no-op.
func testPostAfterClose(t *testing.T, f Fabric) {
	p := f.Connect(t, Caps)
	require.NoError(t, p.T.Close())
	require.NoError(t, p.T.Close(), "Close is idempotent")
	_, err := p.T.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpRDMAWrite}})
	require.ErrorIs(t, err, ib.ErrClosed)
	_, err = p.T.PostRecv(nil)
	require.ErrorIs(t, err, ib.ErrClosed)
	_, err = p.T.PollCompletions(make([]ib.Completion, 1))
	require.ErrorIs(t, err, ib.ErrClosed)
	require.ErrorIs(t, p.T.Disconnect(), ib.ErrClosed)
	WaitEvent(t, p.I, ib.EventDisconnected)
}
