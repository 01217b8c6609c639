package memfabric

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// regions is the memory of an error test: target-side (t*) and initiator-side (i*) regions.
type regions struct {
	tmr    ib.MR // target, local write: SEND source, READ sink, receive buffers
	tnone  ib.MR // target, no access flags
	town   ib.MR // target, remote write: an rkey that is valid, but on the wrong node
	tdereg ib.MR // target, deregistered
	imr    ib.MR // initiator, all access
	iro    ib.MR // initiator, remote read only
	iwo    ib.MR // initiator, remote write only (plus the required local write)
	idereg ib.MR // initiator, deregistered
	irecv  ib.MR // initiator receive buffers
}

func newRegions(t *testing.T, e *env) *regions {
	tpd, ipd := e.target.PD(), e.initiator.PD()
	r := &regions{
		tmr:    register(t, tpd, 4096, ib.AccessLocalWrite),
		tnone:  register(t, tpd, 4096, 0),
		town:   register(t, tpd, 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite),
		tdereg: register(t, tpd, 4096, ib.AccessLocalWrite),
		imr:    register(t, ipd, 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead),
		iro:    register(t, ipd, 4096, ib.AccessRemoteRead),
		iwo:    register(t, ipd, 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite),
		idereg: register(t, ipd, 4096, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead),
		irecv:  register(t, ipd, 4096, ib.AccessLocalWrite),
	}
	require.NoError(t, r.tdereg.Deregister())
	require.NoError(t, r.idereg.Deregister())
	fill(r.tmr.Bytes(), 11)
	fill(r.imr.Bytes(), 22)
	fill(r.iro.Bytes(), 33)
	fill(r.iwo.Bytes(), 44)
	return r
}

func (r *regions) snapshot() [][]byte {
	var out [][]byte
	for _, mr := range []ib.MR{r.tmr, r.tnone, r.town, r.imr, r.iro, r.iwo, r.irecv} {
		out = append(out, bytes.Clone(mr.Bytes()))
	}
	return out
}

func write(sgl []ib.SGE, mr ib.MR, off uint64) ib.SendWR {
	return ib.SendWR{Op: ib.OpRDMAWrite, SGL: sgl, RemoteAddr: mr.Addr() + off, RKey: mr.RKey()}
}

// The requester errors of package ib's contract are checked by the conformance suite
// (ib/ibtest, TestConformance). These are the cases only the in-memory fabric can set up: two
// nodes with separate key spaces (over one soft-RoCE device both ends share the device's keys)
// and an SGE offset no real address could carry.
func TestRequesterErrors(t *testing.T) {
	tests := []struct {
		name   string
		wr     func(r *regions) ib.SendWR
		status ib.Status
	}{
		{"write with an rkey of the target's own node", func(r *regions) ib.SendWR {
			return write([]ib.SGE{{MR: r.tmr, Length: 16}}, r.town, 0)
		}, ib.StatusRemoteAccessError},
		{"local SGE offset beyond its region", func(r *regions) ib.SendWR {
			return ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{{MR: r.tmr, Offset: 1 << 40, Length: 1}}}
		}, ib.StatusLocalProtectionError},
		{"local SGE in a region of the other node", func(r *regions) ib.SendWR {
			return write([]ib.SGE{{MR: r.imr, Length: 8}}, r.imr, 0)
		}, ib.StatusLocalProtectionError},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, Options{Async: m.async})
				r := newRegions(t, e)
				ap := srpAccept()
				ap.Recv = recvs(r.tmr, []uint64{100, 101}, 64)
				cp := srpConnect()
				cp.Recv = recvs(r.irecv, []uint64{100, 101}, 64)
				tc, ic := e.connect(t, cp, ap)
				before := r.snapshot()

				bad := tt.wr(r)
				bad.ID = 1 // unsignaled: errors complete anyway
				n, err := tc.PostSend([]ib.SendWR{
					bad,
					{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.tmr, Length: 8}}},
					{ID: 3, Op: ib.OpRDMAWrite, Signaled: true, SGL: []ib.SGE{{MR: r.tmr, Length: 8}}, RemoteAddr: r.imr.Addr(), RKey: r.imr.RKey()},
				})
				require.NoError(t, err)
				require.Equal(t, 3, n)

				sq, rq := split(poll(t, tc, 5))
				require.Equal(t, []ib.Completion{failed(1, tt.status), failed(2, ib.StatusWRFlushError), failed(3, ib.StatusWRFlushError)}, sq)
				require.Equal(t, []ib.Completion{failed(100, ib.StatusWRFlushError), failed(101, ib.StatusWRFlushError)}, rq)
				require.Equal(t, before, r.snapshot(), "a failed work request moves no data")

				if tt.status == ib.StatusRemoteAccessError {
					// The responder's QP is in the error state as well.
					require.Equal(t, []ib.Completion{failed(100, ib.StatusWRFlushError), failed(101, ib.StatusWRFlushError)}, poll(t, ic, 2))
				} else {
					requireNoCompletions(t, ic)
				}

				// In the error state posts succeed and flush at once, in posting order; a
				// zero-length WRITE is the drain marker.
				_, err = tc.PostRecv(recvs(r.tmr, []uint64{102}, 64))
				require.NoError(t, err)
				_, err = tc.PostSend([]ib.SendWR{{ID: 4, Op: ib.OpSend, SGL: []ib.SGE{{MR: r.tmr, Length: 8}}}, {ID: 5, Op: ib.OpRDMAWrite}})
				require.NoError(t, err)
				sq, rq = split(poll(t, tc, 3))
				require.Equal(t, []ib.Completion{failed(4, ib.StatusWRFlushError), failed(5, ib.StatusWRFlushError)}, sq)
				require.Equal(t, []ib.Completion{failed(102, ib.StatusWRFlushError)}, rq)
				// QP errors are no CM events.
				requireNoEvent(t, tc)
				requireNoEvent(t, ic)
			})
		}
	}
}

// Errors detected at the receiver of a SEND complete the receive with a local error and the
// SEND with the matching remote error; both QPs go to the error state.
func TestReceiverErrors(t *testing.T) {
	tests := []struct {
		name      string
		recv      func(r *regions) ib.RecvWR
		msgLen    uint32
		recvWant  ib.Completion
		sendWant  ib.Completion
		bothError bool
	}{
		{
			name:     "exact fit",
			recv:     func(r *regions) ib.RecvWR { return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.tmr, Length: 64}}} },
			msgLen:   64,
			recvWant: recvd(100, 64),
			sendWant: ok(1, ib.OpSend),
		},
		{
			name:      "message larger than the receive buffer",
			recv:      func(r *regions) ib.RecvWR { return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.tmr, Length: 64}}} },
			msgLen:    65,
			recvWant:  failed(100, ib.StatusLocalLengthError),
			sendWant:  failed(1, ib.StatusRemoteInvalidRequest),
			bothError: true,
		},
		{
			name: "message larger than two receive SGEs",
			recv: func(r *regions) ib.RecvWR {
				return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.tmr, Length: 32}, {MR: r.tmr, Offset: 64, Length: 32}}}
			},
			msgLen:    65,
			recvWant:  failed(100, ib.StatusLocalLengthError),
			sendWant:  failed(1, ib.StatusRemoteInvalidRequest),
			bothError: true,
		},
		{
			name:      "receive buffer without local write",
			recv:      func(r *regions) ib.RecvWR { return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.tnone, Length: 64}}} },
			msgLen:    16,
			recvWant:  failed(100, ib.StatusLocalProtectionError),
			sendWant:  failed(1, ib.StatusRemoteOperationError),
			bothError: true,
		},
		{
			name:      "receive buffer deregistered",
			recv:      func(r *regions) ib.RecvWR { return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.tdereg, Length: 64}}} },
			msgLen:    16,
			recvWant:  failed(100, ib.StatusLocalProtectionError),
			sendWant:  failed(1, ib.StatusRemoteOperationError),
			bothError: true,
		},
		{
			name: "receive SGE past the end of its region",
			recv: func(r *regions) ib.RecvWR {
				return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.tmr, Offset: 4090, Length: 64}}}
			},
			msgLen:    16,
			recvWant:  failed(100, ib.StatusLocalProtectionError),
			sendWant:  failed(1, ib.StatusRemoteOperationError),
			bothError: true,
		},
		{
			// The HCA only checks the SGEs it writes into.
			name: "unused bad receive SGE",
			recv: func(r *regions) ib.RecvWR {
				return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.tmr, Length: 64}, {MR: r.tdereg, Length: 64}}}
			},
			msgLen:   64,
			recvWant: recvd(100, 64),
			sendWant: ok(1, ib.OpSend),
		},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, Options{Async: m.async})
				r := newRegions(t, e)
				ap := srpAccept()
				ap.Recv = []ib.RecvWR{tt.recv(r), {ID: 101, SGL: []ib.SGE{{MR: r.tmr, Offset: 1024, Length: 64}}}}
				cp := srpConnect()
				cp.Recv = recvs(r.irecv, []uint64{100}, 64)
				tc, ic := e.connect(t, cp, ap)

				_, err := ic.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.imr, Length: tt.msgLen}}}})
				require.NoError(t, err)
				require.Equal(t, tt.recvWant, poll(t, tc, 1)[0])
				if !tt.bothError {
					require.Equal(t, []ib.Completion{tt.sendWant}, poll(t, ic, 1))
					require.Equal(t, r.imr.Bytes()[:tt.msgLen], r.tmr.Bytes()[:tt.msgLen])
					requireNoCompletions(t, tc)
					return
				}
				require.Equal(t, []ib.Completion{failed(101, ib.StatusWRFlushError)}, poll(t, tc, 1))
				sq, rq := split(poll(t, ic, 2))
				require.Equal(t, []ib.Completion{tt.sendWant}, sq)
				require.Equal(t, []ib.Completion{failed(100, ib.StatusWRFlushError)}, rq)
			})
		}
	}
}

func TestRNR(t *testing.T) {
	const timer = 5 * time.Millisecond
	tests := []struct {
		name  string
		retry uint8
		// recvAfter posts the two receives after this long; 0 means never.
		recvAfter time.Duration
		rnrTimer  time.Duration
		wantFail  bool
		minWait   time.Duration
	}{
		{name: "count 0 fails at once", retry: 0, wantFail: true},
		{name: "count 3 fails after three RNR timers", retry: 3, wantFail: true, minWait: 3 * timer},
		{name: "count 3 with a receive posted in time", retry: 3, recvAfter: 10 * time.Millisecond, rnrTimer: time.Hour},
		{name: "count 7 waits for ever", retry: 7, recvAfter: 60 * time.Millisecond},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				rnrTimer := timer
				if tt.rnrTimer != 0 {
					rnrTimer = tt.rnrTimer
				}
				e := newEnv(t, Options{Async: m.async, RNRTimer: rnrTimer})
				r := newRegions(t, e)
				ap := srpAccept()
				ap.RNRRetryCount = tt.retry // governs the initiator's SENDs
				cp := srpConnect()
				cp.Recv = recvs(r.irecv, []uint64{100}, 64)
				tc, ic := e.connect(t, cp, ap)

				start := time.Now()
				_, err := ic.PostSend([]ib.SendWR{
					{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: r.imr, Length: 8}}},
					{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.imr, Offset: 8, Length: 8}}},
				})
				require.NoError(t, err)
				if tt.wantFail {
					sq, rq := split(poll(t, ic, 3))
					require.GreaterOrEqual(t, time.Since(start), tt.minWait)
					require.Equal(t, []ib.Completion{failed(1, ib.StatusRNRRetryExceeded), failed(2, ib.StatusWRFlushError)}, sq)
					require.Equal(t, []ib.Completion{failed(100, ib.StatusWRFlushError)}, rq)
					// RNR is the requester's error only: the target's QP is fine.
					requireNoCompletions(t, tc)
					return
				}
				time.Sleep(tt.recvAfter)
				requireNoCompletions(t, ic)
				requireNoCompletions(t, tc)
				_, err = tc.PostRecv(recvs(r.tmr, []uint64{100, 101}, 64))
				require.NoError(t, err)
				require.Equal(t, []ib.Completion{ok(2, ib.OpSend)}, poll(t, ic, 1))
				require.Equal(t, []ib.Completion{recvd(100, 8), recvd(101, 8)}, poll(t, tc, 2))
				require.Equal(t, r.imr.Bytes()[8:16], r.tmr.Bytes()[64:72])
			})
		}
	}
}

// A SEND blocked on RNR holds back the WRITE behind it (in-order execution); when the peer then
// disappears it fails with a transport retry error instead of waiting for ever.
func TestBlockedSendPeerGone(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, Options{Async: m.async})
			r := newRegions(t, e)
			tc, ic := e.connect(t, srpConnect(), srpAccept()) // RNR retry 7 both ways
			_, err := tc.PostSend([]ib.SendWR{
				{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.tmr, Length: 8}}},
				{ID: 2, Op: ib.OpRDMAWrite, Signaled: true, SGL: []ib.SGE{{MR: r.tmr, Length: 8}}, RemoteAddr: r.imr.Addr(), RKey: r.imr.RKey()},
			})
			require.NoError(t, err)
			time.Sleep(20 * time.Millisecond)
			requireNoCompletions(t, tc)
			require.Equal(t, fill(make([]byte, 8), 22), r.imr.Bytes()[:8], "the WRITE waits behind the SEND")

			ic.Vanish()
			require.Equal(t, []ib.Completion{failed(1, ib.StatusTransportRetryExceeded), failed(2, ib.StatusWRFlushError)}, poll(t, tc, 2))
			requireNoEvent(t, tc)
		})
	}
}
