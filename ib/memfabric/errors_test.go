package memfabric

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

// newRegions is ibtest's error-test memory on e's two nodes.
func newRegions(t *testing.T, e *env) *ibtest.Regions {
	return ibtest.NewRegions(t, suiteFabric{}, e.target.PD(), e.initiator.PD())
}

// The requester errors of package ib's contract are checked by the conformance suite
// (ib/ibtest, TestConformance). These are the cases only the in-memory fabric can set up: two
// nodes with separate key spaces (over one soft-RoCE device both ends share the device's keys)
// and an SGE offset no real address could carry; ibtest.RequesterErrors runs them as it runs
// its own.
func TestRequesterErrors(t *testing.T) {
	cases := []ibtest.RequesterError{
		{Name: "write with an rkey of the target's own node", WR: func(r *ibtest.Regions) ib.SendWR {
			return ib.SendWR{Op: ib.OpRDMAWrite, SGL: []ib.SGE{{MR: r.TMR, Length: 16}}, RemoteAddr: r.TOwn.Addr(), RKey: r.TOwn.RKey()}
		}, Status: ib.StatusRemoteAccessError},
		{Name: "local SGE offset beyond its region", WR: func(r *ibtest.Regions) ib.SendWR {
			return ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{{MR: r.TMR, Offset: 1 << 40, Length: 1}}}
		}, Status: ib.StatusLocalProtectionError},
		{Name: "local SGE in a region of the other node", WR: func(r *ibtest.Regions) ib.SendWR {
			return ib.SendWR{Op: ib.OpRDMAWrite, SGL: []ib.SGE{{MR: r.IMR, Length: 8}}, RemoteAddr: r.IMR.Addr(), RKey: r.IMR.RKey()}
		}, Status: ib.StatusLocalProtectionError},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { ibtest.RequesterErrors(t, suiteFabric{async: m.async}, cases) })
	}
}

// Errors detected at the receiver of a SEND complete the receive with a local error and the
// SEND with the matching remote error; both QPs go to the error state.
func TestReceiverErrors(t *testing.T) {
	tests := []struct {
		name      string
		recv      func(r *ibtest.Regions) ib.RecvWR
		msgLen    uint32
		recvWant  ib.Completion
		sendWant  ib.Completion
		bothError bool
	}{
		{
			name:     "exact fit",
			recv:     func(r *ibtest.Regions) ib.RecvWR { return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.TMR, Length: 64}}} },
			msgLen:   64,
			recvWant: ibtest.Recvd(100, 64),
			sendWant: ibtest.OK(1, ib.OpSend),
		},
		{
			name:      "message larger than the receive buffer",
			recv:      func(r *ibtest.Regions) ib.RecvWR { return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.TMR, Length: 64}}} },
			msgLen:    65,
			recvWant:  ibtest.Failed(100, ib.StatusLocalLengthError),
			sendWant:  ibtest.Failed(1, ib.StatusRemoteInvalidRequest),
			bothError: true,
		},
		{
			name: "message larger than two receive SGEs",
			recv: func(r *ibtest.Regions) ib.RecvWR {
				return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.TMR, Length: 32}, {MR: r.TMR, Offset: 64, Length: 32}}}
			},
			msgLen:    65,
			recvWant:  ibtest.Failed(100, ib.StatusLocalLengthError),
			sendWant:  ibtest.Failed(1, ib.StatusRemoteInvalidRequest),
			bothError: true,
		},
		{
			name:      "receive buffer without local write",
			recv:      func(r *ibtest.Regions) ib.RecvWR { return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.TNone, Length: 64}}} },
			msgLen:    16,
			recvWant:  ibtest.Failed(100, ib.StatusLocalProtectionError),
			sendWant:  ibtest.Failed(1, ib.StatusRemoteOperationError),
			bothError: true,
		},
		{
			name: "receive buffer deregistered",
			recv: func(r *ibtest.Regions) ib.RecvWR {
				return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.TDereg, Length: 64}}}
			},
			msgLen:    16,
			recvWant:  ibtest.Failed(100, ib.StatusLocalProtectionError),
			sendWant:  ibtest.Failed(1, ib.StatusRemoteOperationError),
			bothError: true,
		},
		{
			name: "receive SGE past the end of its region",
			recv: func(r *ibtest.Regions) ib.RecvWR {
				return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.TMR, Offset: 4090, Length: 64}}}
			},
			msgLen:    16,
			recvWant:  ibtest.Failed(100, ib.StatusLocalProtectionError),
			sendWant:  ibtest.Failed(1, ib.StatusRemoteOperationError),
			bothError: true,
		},
		{
			// The HCA only checks the SGEs it writes into.
			name: "unused bad receive SGE",
			recv: func(r *ibtest.Regions) ib.RecvWR {
				return ib.RecvWR{ID: 100, SGL: []ib.SGE{{MR: r.TMR, Length: 64}, {MR: r.TDereg, Length: 64}}}
			},
			msgLen:   64,
			recvWant: ibtest.Recvd(100, 64),
			sendWant: ibtest.OK(1, ib.OpSend),
		},
	}
	for _, m := range modes {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, Options{Async: m.async})
				r := newRegions(t, e)
				ap := srpAccept()
				ap.Recv = []ib.RecvWR{tt.recv(r), {ID: 101, SGL: []ib.SGE{{MR: r.TMR, Offset: 1024, Length: 64}}}}
				cp := srpConnect()
				cp.Recv = recvs(r.IRecv, []uint64{100}, 64)
				tc, ic := e.connect(t, cp, ap)

				_, err := ic.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.IMR, Length: tt.msgLen}}}})
				require.NoError(t, err)
				require.Equal(t, tt.recvWant, poll(t, tc, 1)[0])
				if !tt.bothError {
					require.Equal(t, []ib.Completion{tt.sendWant}, poll(t, ic, 1))
					require.Equal(t, r.IMR.Bytes()[:tt.msgLen], r.TMR.Bytes()[:tt.msgLen])
					requireNoCompletions(t, tc)
					return
				}
				require.Equal(t, []ib.Completion{ibtest.Failed(101, ib.StatusWRFlushError)}, poll(t, tc, 1))
				sq, rq := ibtest.Split(poll(t, ic, 2))
				require.Equal(t, []ib.Completion{tt.sendWant}, sq)
				require.Equal(t, []ib.Completion{ibtest.Failed(100, ib.StatusWRFlushError)}, rq)
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
				cp.Recv = recvs(r.IRecv, []uint64{100}, 64)
				tc, ic := e.connect(t, cp, ap)

				start := time.Now()
				_, err := ic.PostSend([]ib.SendWR{
					{ID: 1, Op: ib.OpSend, SGL: []ib.SGE{{MR: r.IMR, Length: 8}}},
					{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.IMR, Offset: 8, Length: 8}}},
				})
				require.NoError(t, err)
				if tt.wantFail {
					sq, rq := ibtest.Split(poll(t, ic, 3))
					require.GreaterOrEqual(t, time.Since(start), tt.minWait)
					require.Equal(t, []ib.Completion{ibtest.Failed(1, ib.StatusRNRRetryExceeded), ibtest.Failed(2, ib.StatusWRFlushError)}, sq)
					require.Equal(t, []ib.Completion{ibtest.Failed(100, ib.StatusWRFlushError)}, rq)
					// RNR is the requester's error only: the target's QP is fine.
					requireNoCompletions(t, tc)
					return
				}
				time.Sleep(tt.recvAfter)
				requireNoCompletions(t, ic)
				requireNoCompletions(t, tc)
				_, err = tc.PostRecv(recvs(r.TMR, []uint64{100, 101}, 64))
				require.NoError(t, err)
				require.Equal(t, []ib.Completion{ibtest.OK(2, ib.OpSend)}, poll(t, ic, 1))
				require.Equal(t, []ib.Completion{ibtest.Recvd(100, 8), ibtest.Recvd(101, 8)}, poll(t, tc, 2))
				require.Equal(t, r.IMR.Bytes()[8:16], r.TMR.Bytes()[64:72])
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
				{ID: 1, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: r.TMR, Length: 8}}},
				{ID: 2, Op: ib.OpRDMAWrite, Signaled: true, SGL: []ib.SGE{{MR: r.TMR, Length: 8}}, RemoteAddr: r.IMR.Addr(), RKey: r.IMR.RKey()},
			})
			require.NoError(t, err)
			time.Sleep(20 * time.Millisecond)
			requireNoCompletions(t, tc)
			require.Equal(t, ibtest.Fill(make([]byte, 8), 22), r.IMR.Bytes()[:8], "the WRITE waits behind the SEND")

			ic.Vanish()
			require.Equal(t, []ib.Completion{ibtest.Failed(1, ib.StatusTransportRetryExceeded), ibtest.Failed(2, ib.StatusWRFlushError)}, poll(t, tc, 2))
			requireNoEvent(t, tc)
		})
	}
}
