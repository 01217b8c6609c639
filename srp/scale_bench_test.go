package srp_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// scaleInflight is the commands BenchmarkChannels keeps in flight, whatever the channel count.
const scaleInflight = 64

// BenchmarkChannels measures 4 KiB READs on a null LUN as the number of channels grows, with
// scaleInflight commands in flight in total, each sent on the next channel round robin: at 1
// channel they share one queue pair, at 512 most channels are idle at any moment. The
// initiator polls one completion queue for all its connections and allocates nothing, so its
// cost per command does not grow with the channel count: a growth of ns/op is the engine's.
// Run with -cpu 2 (GOMAXPROCS=2).
//
// channels=512/active=64 opens 512 channels but sends on 64 of them: the others only cost
// by being there. Against channels=64 it tells the cost of idle channels from that of a
// working set spread over more of them.
//
// The qd=1 rows keep one command in flight per channel instead: 1, 64 and 512 in all.
func BenchmarkChannels(b *testing.B) {
	for _, n := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("channels=%d", n), func(b *testing.B) { benchChannels(b, n, n, scaleInflight) })
	}
	b.Run("channels=512/active=64", func(b *testing.B) { benchChannels(b, 512, 64, scaleInflight) })
	for _, n := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("channels=%d/qd=1", n), func(b *testing.B) { benchChannels(b, n, n, n) })
	}
}

// scaleConn is one channel of the benchmark's initiator.
type scaleConn struct {
	conn           *memfabric.Conn
	qd, busy       int
	tx, rx, data   []byte
	txMR, rxMR, mr ib.MR
	free           []int // free command slots
	recvWRs        []ib.RecvWR
}

const (
	scaleTx = 64
	scaleRx = 256
)

func benchChannels(b *testing.B, n, active, inflight int) {
	h := newHarness(b, harnessOpts{nullLUN: true, logLevel: zapcore.ErrorLevel, limits: srp.Limits{
		BufferPoolSize: 16 << 20, Credits: 128, SendQueueDepth: 32, MaxChannels: 256,
		MaxChannelsTotal: 1024, MaxChannelsPerSource: 1024}})
	node, err := h.fab.NewNode(netip.MustParseAddr("198.19.0.1"))
	if err != nil {
		b.Fatal(err)
	}
	pd := node.PD()
	cch, err := pd.(ib.SharedQueues).NewCompChannel()
	if err != nil {
		b.Fatal(err)
	}
	cq, err := pd.(ib.SharedQueues).NewCQ(cch, 1<<16, 0)
	if err != nil {
		b.Fatal(err)
	}
	qd := max(1, inflight/active)
	conns := make([]*scaleConn, n)
	byQPN := map[uint32]*scaleConn{}
	for i := range conns {
		c := &scaleConn{qd: qd}
		c.tx, c.rx, c.data = make([]byte, qd*scaleTx), make([]byte, (qd+2)*scaleRx), make([]byte, qd*benchIO)
		for _, m := range []struct {
			buf []byte
			mr  *ib.MR
			acc ib.Access
		}{{c.tx, &c.txMR, 0}, {c.rx, &c.rxMR, ib.AccessLocalWrite}, {c.data, &c.mr, ib.AccessLocalWrite | ib.AccessRemoteWrite}} {
			if *m.mr, err = pd.RegisterMemory(m.buf, m.acc); err != nil {
				b.Fatal(err)
			}
		}
		c.recvWRs = make([]ib.RecvWR, qd+2)
		for j := range c.recvWRs {
			c.recvWRs[j] = ib.RecvWR{ID: uint64(j), SGL: []ib.SGE{{MR: c.rxMR, Offset: uint64(j * scaleRx), Length: scaleRx}}}
		}
		for j := qd - 1; j >= 0; j-- {
			c.free = append(c.free, j)
		}
		// Up to 128 channels per I_T nexus: the first of each single, the others multi.
		cfg := h.cfg()
		cfg.InitiatorPortID[15] = byte(i / 128)
		cfg.ChannelIndex = uint16(i % 128)
		if i%128 != 0 {
			cfg.MultiChannel = iu.MultiChanMulti
		}
		login, err := srptest.LoginRequest(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.conn, err = node.Connect(ctx, h.addr, login, memfabric.ConnectParams{
			QP:            ib.QPCaps{SendQueueDepth: qd + 4, RecvQueueDepth: qd + 2, MaxSendSGE: 1, MaxRecvSGE: 1},
			RNRRetryCount: 7, ResponderResources: 4, Recv: c.recvWRs, CQ: cq,
		})
		cancel()
		if err != nil {
			b.Fatalf("channel %d: %v", i, err)
		}
		conns[i] = c
		byQPN[c.conn.QPNum()] = c
	}
	defer func() {
		for _, c := range conns {
			c.conn.Close()
			for _, mr := range []ib.MR{c.txMR, c.rxMR, c.mr} {
				_ = mr.Deregister()
			}
		}
		_ = cq.Close()
	}()
	d := &scaleDriver{conns: conns, byQPN: byQPN, cq: cq, cch: cch, wcs: make([]ib.Completion, 256), inflight: inflight}
	d.run(b, 2*n, 0x00) // the POWER ON unit attention, on every channel
	d.conns = conns[:active]
	// Warm up: every send-queue slot of every queue pair and every receive of the shared
	// queue used once (the fabric sizes its per-slot SGE lists lazily), caches filled.
	d.run(b, max(32*n, 4096), 0x28)
	b.ReportAllocs()
	b.SetBytes(benchIO)
	cpu0 := testutil.CPUTime(b)
	b.ResetTimer()
	d.run(b, b.N, 0x28)
	b.StopTimer()
	// The process's CPU time, initiator's and fabric's included: ns/op is wall time, on
	// GOMAXPROCS Ps.
	b.ReportMetric(float64(testutil.CPUTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// scaleDriver keeps commands in flight over its connections.
type scaleDriver struct {
	conns    []*scaleConn
	byQPN    map[uint32]*scaleConn
	inflight int
	cq       ib.CQ
	cch      ib.CompChannel
	wcs      []ib.Completion
	next     int
	fields   iu.CmdFields
	sge      [1]ib.SGE
	wr       [1]ib.SendWR
}

// submit sends op (READ(10) of 4 KiB, or TEST UNIT READY) on the next channel with a free slot.
func (d *scaleDriver) submit(b *testing.B, op byte) {
	for {
		c := d.conns[d.next]
		d.next = (d.next + 1) % len(d.conns)
		if len(c.free) == 0 {
			continue
		}
		s := c.free[len(c.free)-1]
		c.free = c.free[:len(c.free)-1]
		f := &d.fields
		*f = iu.CmdFields{Tag: iu.Tag(s)}
		f.CDB[0] = op
		if op == 0x28 {
			binary.BigEndian.PutUint16(f.CDB[7:], benchIO/512)
			f.DataIn = iu.DataBufFields{Format: iu.DescDirect,
				Direct: iu.DirectBufFields{VA: c.mr.Addr() + uint64(s*benchIO), Key: c.mr.RKey(), Len: benchIO}}
		}
		k, err := iu.Cmd(c.tx[s*scaleTx : (s+1)*scaleTx]).Encode(f)
		if err != nil {
			b.Fatal(err)
		}
		d.sge[0] = ib.SGE{MR: c.txMR, Offset: uint64(s * scaleTx), Length: uint32(k)}
		d.wr[0] = ib.SendWR{ID: uint64(s), Op: ib.OpSend, Signaled: true, SGL: d.sge[:]}
		if _, err := c.conn.PostSend(d.wr[:]); err != nil {
			b.Fatal(err)
		}
		return
	}
}

// run completes n commands, d.inflight at a time at most.
func (d *scaleDriver) run(b *testing.B, n int, op byte) {
	inflight := min(n, d.inflight, len(d.conns)*d.conns[0].qd)
	for range inflight {
		d.submit(b, op)
	}
	submitted, done := inflight, 0
	for done < n {
		k, err := d.cq.Poll(d.wcs)
		if err != nil {
			b.Fatal(err)
		}
		if k == 0 {
			if err := d.cq.Arm(); err != nil {
				b.Fatal(err)
			}
			if k, err = d.cq.Poll(d.wcs); k == 0 && err == nil {
				_ = d.cch.Serve(nil, awaitEvent)
				continue
			}
		}
		for i := 0; i < k; i++ {
			wc := &d.wcs[i]
			if !received(b, wc) {
				continue
			}
			c := d.byQPN[wc.QPNum]
			msg := rspIn(b, wc, c.rx, scaleRx)
			if op != 0x00 && msg.Status() != 0 {
				b.Fatalf("status %#x", msg.Status())
			}
			c.free = append(c.free, int(msg.Tag()))
			if _, err := c.conn.PostRecv(c.recvWRs[wc.ID : wc.ID+1]); err != nil {
				b.Fatal(err)
			}
			done++
			if submitted < n {
				d.submit(b, op)
				submitted++
			}
		}
	}
}

// awaitEvent is a CompChannel.Serve step that ends the Serve at the first event.
func awaitEvent(fired []ib.CQ) bool { return len(fired) > 0 }
