package srp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// rawConn is an initiator written against the fabric directly, for tests that need control
// srptest does not give: posting receive buffers one at a time, so that the target's SENDs
// wait (receiver not ready) and hold back the work requests behind them.
type rawConn struct {
	t      *testing.T
	conn   *memfabric.Conn
	pd     ib.ProtectionDomain
	rx     []byte
	rxMR   ib.MR
	tx     []byte
	txMR   ib.MR
	nextRx int
	nextTx int
	got    [][]byte // IUs received, in order
}

const rawSlot = 256

func newRawConn(t *testing.T, h *harness, addr string, recvs int) *rawConn {
	node, err := h.fab.NewNode(netip.MustParseAddr(addr))
	require.NoError(t, err)
	r := &rawConn{t: t, pd: node.PD(), rx: make([]byte, 64*rawSlot), tx: make([]byte, 64*rawSlot)}
	r.rxMR, err = r.pd.RegisterMemory(r.rx, ib.AccessLocalWrite)
	require.NoError(t, err)
	r.txMR, err = r.pd.RegisterMemory(r.tx, 0)
	require.NoError(t, err)
	login, err := srptest.LoginRequest(h.cfg())
	require.NoError(t, err)
	r.conn, err = node.Connect(ctxT(t), h.addr, login, memfabric.ConnectParams{
		QP:                 ib.QPCaps{SendQueueDepth: 64, RecvQueueDepth: 64, MaxSendSGE: 1, MaxRecvSGE: 1},
		RNRRetryCount:      7,
		ResponderResources: 4,
	})
	require.NoError(t, err)
	t.Cleanup(func() { r.conn.Close() })
	r.postRecv(recvs)
	return r
}

func (r *rawConn) postRecv(n int) {
	for i := 0; i < n; i++ {
		wr := ib.RecvWR{ID: uint64(r.nextRx), SGL: []ib.SGE{{MR: r.rxMR, Offset: uint64(r.nextRx * rawSlot), Length: rawSlot}}}
		r.nextRx++
		_, err := r.conn.PostRecv([]ib.RecvWR{wr})
		require.NoError(r.t, err)
	}
}

func (r *rawConn) send(msg []byte) {
	off := r.nextTx * rawSlot
	r.nextTx++
	copy(r.tx[off:], msg)
	_, err := r.conn.PostSend([]ib.SendWR{{ID: uint64(off), Op: ib.OpSend, Signaled: true,
		SGL: []ib.SGE{{MR: r.txMR, Offset: uint64(off), Length: uint32(len(msg))}}}})
	require.NoError(r.t, err)
}

// recv waits for the next IU from the target.
func (r *rawConn) recv() []byte {
	deadline := time.After(10 * time.Second)
	wcs := make([]ib.Completion, 1)
	for {
		n, err := r.conn.PollCompletions(wcs)
		require.NoError(r.t, err)
		if n == 1 {
			wc := wcs[0]
			require.Equal(r.t, ib.StatusSuccess, wc.Status, "completion %#x", wc.ID)
			if wc.Opcode == ib.OpRecv {
				return append([]byte(nil), r.rx[int(wc.ID)*rawSlot:int(wc.ID)*rawSlot+int(wc.ByteLen)]...)
			}
			continue
		}
		select {
		case <-r.conn.Ready():
		case <-deadline:
			r.t.Fatal("no IU from the target")
		}
	}
}

func tur(tag iu.Tag) []byte {
	b := make([]byte, iu.CmdMinSize)
	_, _ = iu.Cmd(b).Encode(&iu.CmdFields{Tag: tag})
	return b
}

// TestAbortTaskFetchingDataOut aborts a command whose RDMA READ is posted but cannot execute
// yet: it sits in the target's send queue behind a response SEND that waits for the
// initiator to post a receive. The task management response must wait for the READ to
// complete, and the command must get no response.
func TestAbortTaskFetchingDataOut(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	r := newRawConn(t, h, "198.19.1.1", 1)
	r.send(tur(1))
	rsp := iu.Rsp(r.recv()) // the only receive buffer is used up: POWER ON unit attention
	require.Equal(t, iu.Tag(1), rsp.Tag())

	// A malformed SRP_CMD is answered by the channel goroutine itself, before it looks at the
	// next IU: its response SEND is surely posted before the WRITE's RDMA READ, and waits for
	// a receive buffer (RNR, retried for ever).
	r.send(tur(2)[:20])
	data := testutil.Pattern(4096, 77)
	dmr, err := r.pd.RegisterMemory(data, ib.AccessRemoteRead)
	require.NoError(t, err)
	defer func() { _ = dmr.Deregister() }()
	n, _ := iu.CmdLen(&iu.CmdFields{DataOut: iu.DataBufFields{Format: iu.DescDirect}})
	w := make([]byte, n)
	_, _ = iu.Cmd(w).Encode(&iu.CmdFields{Tag: 3, CDB: [16]byte{0x2A, 0, 0, 0, 0x10, 0, 0, 0, 8},
		DataOut: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: dmr.Addr(), Key: dmr.RKey(), Len: 4096}}})
	r.send(w)
	h.waitStats("three commands", func(s srp.Stats) bool { return s.Commands == 3 })

	tm := make([]byte, iu.TskMgmtSize)
	iu.TskMgmt(tm).Encode(&iu.TskMgmtFields{Tag: 4, Func: iu.TskAbortTask, TaskTag: 3})
	r.send(tm)
	h.waitStats("the abort", func(s srp.Stats) bool { return s.TaskMgmt == 1 })
	time.Sleep(20 * time.Millisecond)
	require.Zero(t, h.tgt.Stats().Aborted, "the command was released while its RDMA READ was still queued")

	r.postRecv(8)
	rsp = iu.Rsp(r.recv())
	require.Equal(t, iu.Tag(2), rsp.Tag())
	tmr := r.recv()
	require.Equal(t, []byte{
		0xC1, 0, 0, 0, 0, 0, 0, 2, // REQUEST LIMIT DELTA 2: this IU and the aborted command
		0, 0, 0, 0, 0, 0, 0, 4,
		0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4,
		0, 0, 0, 0,
	}, tmr)
	require.Equal(t, uint64(1), h.tgt.Stats().Aborted)
	r.send(tur(5))
	rsp = iu.Rsp(r.recv())
	require.Equal(t, iu.Tag(5), rsp.Tag(), "a response for the aborted command was sent")
	// The data never reached the medium.
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	got, err := ch.Read10(ctxT(t), 0, 0x1000, 8, testBlockSize)
	require.NoError(t, err)
	require.Equal(t, make([]byte, 4096), got.DataIn)
	h.waitIdle()
}

// TestCommandsAfterTaskManagement: commands that arrive on a channel after a task management
// function are not aborted by it, even while it waits for older commands to stop.
func TestCommandsAfterTaskManagement(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	h.gate.hold()
	old, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 4096})
	require.NoError(t, err)
	testutil.WaitFor(t, "the read in the backstore", func() bool { return h.gate.entered.Load() == 1 })
	tm := make([]byte, iu.TskMgmtSize)
	iu.TskMgmt(tm).Encode(&iu.TskMgmtFields{Tag: 0x4444, Func: iu.TskLUNReset})
	require.NoError(t, ch.SendRaw(tm))
	h.waitStats("the reset", func(s srp.Stats) bool { return s.TaskMgmt == 1 })
	later, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(8, 8), DataInLen: 4096})
	require.NoError(t, err)
	h.gate.release()
	msg, err := ch.NextUnsolicited(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, uint8(0), iu.Rsp(msg).RespData()[3])
	rsp, err := later.Wait(ctxT(t))
	require.NoError(t, err)
	k, asc, ascq := senseOf(t, rsp) // the reset's unit attention, not an abort
	require.Equal(t, []uint8{0x06, 0x29, 0x03}, []uint8{k, asc, ascq})
	select {
	case <-old.Done():
		t.Fatal("the aborted command got a response")
	default:
	}
	old.Forget()
	require.Equal(t, int64(128), ch.Credits())
}
