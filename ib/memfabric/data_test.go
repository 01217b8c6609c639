package memfabric

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
)

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
			ibtest.Fill(imr.Bytes(), 9)
			wrs := make([]ib.SendWR, n)
			for i := range wrs {
				wrs[i] = ib.SendWR{ID: uint64(i), Op: ib.OpSend, Signaled: i%2 == 1, SGL: []ib.SGE{{MR: imr, Offset: uint64(i) * 8, Length: uint32(i%8 + 1)}}}
			}
			got, err := ic.PostSend(wrs)
			require.NoError(t, err)
			require.Equal(t, n, got)

			var want []ib.Completion
			for i := 1; i < n; i += 2 {
				want = append(want, ibtest.OK(uint64(i), ib.OpSend))
			}
			require.Equal(t, want, poll(t, ic, n/2))
			rc := poll(t, tc, n)
			for i, wc := range rc {
				require.Equal(t, ibtest.Recvd(100+uint64(i), i%8+1), wc)
				require.Equal(t, imr.Bytes()[i*8:i*8+i%8+1], tmr.Bytes()[i*8:i*8+i%8+1])
			}
			requireNoCompletions(t, tc)
		})
	}
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
		if wcs[0] != ibtest.Recvd(100, 16) {
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
		if wcs[0] != ibtest.OK(2, ib.OpSend) {
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
	ibtest.Fill(slab.Bytes()[4096:8192], 4)
	_, err = tc.PostSend([]ib.SendWR{{ID: 1, Op: ib.OpRDMAWrite, Signaled: true, SGL: []ib.SGE{{MR: tmr, Offset: 4096, Length: 4096}},
		RemoteAddr: imr.Addr(), RKey: imr.RKey()}})
	require.NoError(t, err)
	require.Equal(t, []ib.Completion{ibtest.OK(1, ib.OpRDMAWrite)}, poll(t, tc, 1))
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
			want := bytes.Clone(ibtest.Fill(imr.Bytes(), 5))
			_, err := tc2.PostSend([]ib.SendWR{
				{ID: 1, Op: ib.OpRDMARead, Signaled: true, SGL: []ib.SGE{{MR: sink, Length: 4096}},
					RemoteAddr: imr.Addr(), RKey: imr.RKey()},
				{ID: 2, Op: ib.OpRDMAWrite, Signaled: true}, // zero-length marker behind it
			})
			require.NoError(t, err)
			if tc.want == ib.StatusSuccess {
				require.Equal(t, []ib.Completion{ibtest.OK(1, ib.OpRDMARead), ibtest.OK(2, ib.OpRDMAWrite)}, poll(t, tc2, 2))
				require.Equal(t, want, sink.Bytes())
				return
			}
			require.Equal(t, []ib.Completion{ibtest.Failed(1, tc.want), ibtest.Failed(2, ib.StatusWRFlushError)}, poll(t, tc2, 2))
			require.Equal(t, make([]byte, 4096), sink.Bytes(), "nothing was placed")
		})
	}
}
