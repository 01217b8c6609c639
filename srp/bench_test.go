package srp_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// rawInitiator is a minimal SRP initiator for benchmarks: every buffer, work request and IU
// field is preallocated, so that allocs/op measures the target (and the fabric) alone. It
// reuses one registered data buffer per queue slot and one rkey, which a real initiator would
// not, and checks only the status of each response.
type rawInitiator struct {
	conn    *memfabric.Conn
	qd      int
	txSize  int
	rxSize  int
	tx, rx  []byte
	data    []byte
	txMR    ib.MR
	rxMR    ib.MR
	dataMR  ib.MR
	recvWRs []ib.RecvWR
	sendWR  []ib.SendWR
	sendSGE []ib.SGE
	wcs     []ib.Completion
	fields  iu.CmdFields
	immOK   bool
	// blocks4K, when set, makes each READ or WRITE address a random 4 KiB block of the
	// first blocks4K (rng is the generator's state); else slot s addresses block s.
	blocks4K uint64
	rng      uint64
}

const benchIO = 4096

func newRawInitiator(b *testing.B, h *harness, qd int) *rawInitiator {
	b.Helper()
	node, err := h.fab.NewNode(netip.MustParseAddr("198.19.0.1"))
	if err != nil {
		b.Fatal(err)
	}
	r := &rawInitiator{qd: qd, txSize: 68 + benchIO, rxSize: 256}
	pd := node.PD()
	r.tx = make([]byte, qd*r.txSize)
	r.rx = make([]byte, (qd+2)*r.rxSize)
	r.data = make([]byte, qd*benchIO)
	if r.txMR, err = pd.RegisterMemory(r.tx, 0); err != nil {
		b.Fatal(err)
	}
	if r.rxMR, err = pd.RegisterMemory(r.rx, ib.AccessLocalWrite); err != nil {
		b.Fatal(err)
	}
	if r.dataMR, err = pd.RegisterMemory(r.data, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
		b.Fatal(err)
	}
	r.recvWRs = make([]ib.RecvWR, qd+2)
	for i := range r.recvWRs {
		r.recvWRs[i] = ib.RecvWR{ID: uint64(i), SGL: []ib.SGE{{MR: r.rxMR, Offset: uint64(i * r.rxSize), Length: uint32(r.rxSize)}}}
	}
	r.sendSGE = make([]ib.SGE, 1)
	r.sendWR = make([]ib.SendWR, 1)
	r.wcs = make([]ib.Completion, 2*qd+4)
	login, err := srptest.LoginRequest(h.cfg())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.conn, err = node.Connect(ctx, h.addr, login, memfabric.ConnectParams{
		QP:                 ib.QPCaps{SendQueueDepth: 2*qd + 4, RecvQueueDepth: qd + 2, MaxSendSGE: 1, MaxRecvSGE: 1},
		RNRRetryCount:      7,
		ResponderResources: 4,
		Recv:               r.recvWRs,
	})
	if err != nil {
		b.Fatal(err)
	}
	rsp, err := iu.Parse[iu.LoginRsp](r.conn.PrivateData()[:iu.LoginRspSize])
	if err != nil {
		b.Fatal(err)
	}
	r.immOK = rsp.RspFlags&iu.LoginRspImmedSupp != 0
	return r
}

func (r *rawInitiator) close() {
	r.conn.Close()
	_ = r.txMR.Deregister()
	_ = r.rxMR.Deregister()
	_ = r.dataMR.Deregister()
}

// submit sends the command of slot s: a 4 KiB READ(10) or WRITE(10) (immediate data when
// imm, else a direct descriptor), or TEST UNIT READY.
func (r *rawInitiator) submit(b *testing.B, s int, op byte, imm bool) {
	f := &r.fields
	*f = iu.CmdFields{Tag: iu.Tag(s)}
	f.CDB[0] = op
	desc := iu.DirectBufFields{VA: r.dataMR.Addr() + uint64(s*benchIO), Key: r.dataMR.RKey(), Len: benchIO}
	switch op {
	case 0x28, 0x2A:
		block := uint64(s)
		if r.blocks4K > 0 {
			r.rng ^= r.rng << 13 // xorshift64
			r.rng ^= r.rng >> 7
			r.rng ^= r.rng << 17
			block = r.rng % r.blocks4K
		}
		binary.BigEndian.PutUint32(f.CDB[2:], uint32(block*benchIO/512))
		binary.BigEndian.PutUint16(f.CDB[7:], benchIO/512)
		if op == 0x28 {
			f.DataIn = iu.DataBufFields{Format: iu.DescDirect, Direct: desc}
		} else if imm {
			f.DataOut = iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68, ImmData: r.data[s*benchIO : (s+1)*benchIO]}
		} else {
			f.DataOut = iu.DataBufFields{Format: iu.DescDirect, Direct: desc}
		}
	}
	n, err := iu.Cmd(r.tx[s*r.txSize : (s+1)*r.txSize]).Encode(f)
	if err != nil {
		b.Fatal(err)
	}
	r.sendSGE[0] = ib.SGE{MR: r.txMR, Offset: uint64(s * r.txSize), Length: uint32(n)}
	r.sendWR[0] = ib.SendWR{ID: uint64(s), Op: ib.OpSend, Signaled: true, SGL: r.sendSGE}
	if _, err := r.conn.PostSend(r.sendWR); err != nil {
		b.Fatal(err)
	}
}

// received says whether wc is a receive completion (false: a send's); a failed completion
// fails the benchmark.
func received(b *testing.B, wc *ib.Completion) bool {
	if wc.Status != ib.StatusSuccess {
		b.Fatalf("initiator completion %#x: %v", wc.ID, wc.Status)
	}
	return wc.Opcode == ib.OpRecv
}

// rspIn returns the SRP_RSP that the receive completion wc delivered into its slot of rx
// (slots of size bytes); another IU fails the benchmark.
func rspIn(b *testing.B, wc *ib.Completion, rx []byte, size int) iu.Rsp {
	msg := iu.Rsp(rx[int(wc.ID)*size : int(wc.ID)*size+int(wc.ByteLen)])
	if iu.Opcode(msg[0]) != iu.OpRsp {
		b.Fatalf("unexpected %v", iu.Opcode(msg[0]))
	}
	return msg
}

// run keeps qd commands in flight until n have completed and returns how many were not GOOD.
func (r *rawInitiator) run(b *testing.B, n int, op byte, imm bool) (bad int) {
	submitted, done := 0, 0
	for ; submitted < min(n, r.qd); submitted++ {
		r.submit(b, submitted, op, imm)
	}
	for done < n {
		<-r.conn.Ready()
		for {
			k, err := r.conn.PollCompletions(r.wcs)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < k; i++ {
				wc := &r.wcs[i]
				if !received(b, wc) {
					continue
				}
				msg := rspIn(b, wc, r.rx, r.rxSize)
				if msg.Status() != 0 {
					bad++
				}
				slot := int(msg.Tag())
				if _, err := r.conn.PostRecv(r.recvWRs[wc.ID : wc.ID+1]); err != nil {
					b.Fatal(err)
				}
				done++
				if submitted < n {
					r.submit(b, slot, op, imm)
					submitted++
				}
			}
			if k < len(r.wcs) {
				break
			}
		}
		for {
			if _, ok := r.conn.PollEvent(); !ok {
				break
			}
		}
	}
	return bad
}

// BenchmarkRoundTrip measures 4 KiB reads and writes (initiator → fabric → target → null LU
// and back) at queue depth 1 and 32, in the completion mode this host gets by default and in
// event mode (the default on a one-CPU host, where the channel arms the completion queue
// before every sleep). The initiator allocates nothing, so allocs/op is the target's, the
// SCSI layer's and the fabric's.
func BenchmarkRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name string
		op   byte
		imm  bool
	}{
		{"read", 0x28, false},
		{"write-rdma", 0x2A, false},
		{"write-immediate", 0x2A, true},
	} {
		for _, qd := range []int{1, 32} {
			for _, mode := range []srp.CompletionMode{srp.DefaultCompletion, srp.CompletionEvent} {
				if mode == srp.CompletionEvent && srp.DefaultCompletion == srp.CompletionEvent {
					continue
				}
				b.Run(fmt.Sprintf("%s/qd%d/%v", tc.name, qd, mode), func(b *testing.B) {
					benchRoundTrip(b, tc.op, tc.imm, qd, mode)
				})
			}
		}
	}
}

// BenchmarkRoundTripGroupsFillPs is BenchmarkRoundTrip's 4 KiB read at QD 1 in adaptive
// mode with as many poll groups as Ps (poll_groups >= GOMAXPROCS): the group then parks in
// the netpoller every few idle passes of its poll window, so that the network is polled. That
// park must cost no more than a wake-up: a timer would sleep the netpoller's whole
// millisecond on a P with nothing else to run.
func BenchmarkRoundTripGroupsFillPs(b *testing.B) {
	benchRoundTripGroups(b, 0x28, false, 1, srp.CompletionAdaptive, runtime.GOMAXPROCS(0))
}

func benchRoundTrip(b *testing.B, op byte, imm bool, qd int, mode srp.CompletionMode) {
	benchRoundTripGroups(b, op, imm, qd, mode, 0)
}

func benchRoundTripGroups(b *testing.B, op byte, imm bool, qd int, mode srp.CompletionMode, groups int) {
	h := newHarness(b, harnessOpts{nullLUN: true, logLevel: zapcore.ErrorLevel,
		limits: srp.Limits{BufferPoolSize: 8 << 20, Completion: mode, PollGroups: groups}})
	r := newRawInitiator(b, h, qd)
	defer r.close()
	// The first commands meet the POWER ON unit attention.
	r.run(b, 4, 0x00, false)
	// Warm up: every send-queue slot of both queue pairs used once (the fabric sizes its
	// per-slot SGE lists lazily), pools and caches filled.
	if bad := r.run(b, 2*srp.DefaultSendQueueDepth+qd, op, imm); bad != 0 {
		b.Fatalf("%d commands failed after the unit attention", bad)
	}
	b.ReportAllocs()
	b.SetBytes(benchIO)
	b.ResetTimer()
	if bad := r.run(b, b.N, op, imm); bad != 0 {
		b.Fatalf("%d commands failed", bad)
	}
	b.StopTimer()
}
