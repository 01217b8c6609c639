package srp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
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
	return newRawConnCfg(t, h, addr, recvs, h.cfg())
}

// newRawConnCfg logs a raw initiator in with cfg's login request (its initiator port).
func newRawConnCfg(t *testing.T, h *harness, addr string, recvs int, cfg srptest.Config) *rawConn {
	node, err := h.fab.NewNode(netip.MustParseAddr(addr))
	require.NoError(t, err)
	return newRawConnNode(t, h, node, recvs, cfg)
}

// newRawConnNode logs a raw initiator in from node (several channels from one address).
func newRawConnNode(t *testing.T, h *harness, node *memfabric.Node, recvs int, cfg srptest.Config) *rawConn {
	var err error
	r := &rawConn{t: t, pd: node.PD(), rx: make([]byte, 64*rawSlot), tx: make([]byte, 64*rawSlot)}
	r.rxMR, err = r.pd.RegisterMemory(r.rx, ib.AccessLocalWrite)
	require.NoError(t, err)
	r.txMR, err = r.pd.RegisterMemory(r.tx, 0)
	require.NoError(t, err)
	login, err := srptest.LoginRequest(cfg)
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
		slot := r.nextRx % (len(r.rx) / rawSlot)
		wr := ib.RecvWR{ID: uint64(slot), SGL: []ib.SGE{{MR: r.rxMR, Offset: uint64(slot * rawSlot), Length: rawSlot}}}
		r.nextRx++
		_, err := r.conn.PostRecv([]ib.RecvWR{wr})
		require.NoError(r.t, err)
	}
}

func (r *rawConn) send(iu []byte) {
	off := r.nextTx % (len(r.tx) / rawSlot) * rawSlot
	r.nextTx++
	copy(r.tx[off:], iu)
	_, err := r.conn.PostSend([]ib.SendWR{{ID: uint64(off), Op: ib.OpSend, Signaled: true,
		SGL: []ib.SGE{{MR: r.txMR, Offset: uint64(off), Length: uint32(len(iu))}}}})
	require.NoError(r.t, err)
}

// poll returns the IUs received from the target so far, without waiting.
func (r *rawConn) poll() [][]byte {
	var ius [][]byte
	wcs := make([]ib.Completion, 16)
	for {
		n, err := r.conn.PollCompletions(wcs)
		require.NoError(r.t, err)
		for _, wc := range wcs[:n] {
			require.Equal(r.t, ib.StatusSuccess, wc.Status, "completion %#x", wc.ID)
			if wc.Opcode == ib.OpRecv {
				ius = append(ius, append([]byte(nil), r.rx[int(wc.ID)*rawSlot:int(wc.ID)*rawSlot+int(wc.ByteLen)]...))
			}
		}
		if n < len(wcs) {
			return ius
		}
	}
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
