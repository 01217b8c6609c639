package srp

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// fakeMR is a registered region for tests that only build work requests.
type fakeMR struct{ buf []byte }

func (m *fakeMR) Bytes() []byte     { return m.buf }
func (m *fakeMR) Addr() uint64      { return 0x7000_0000 }
func (m *fakeMR) Len() int          { return len(m.buf) }
func (m *fakeMR) LKey() uint32      { return 0x4c }
func (m *fakeMR) RKey() uint32      { return 0x52 }
func (m *fakeMR) Access() ib.Access { return ib.AccessLocalWrite }
func (m *fakeMR) Deregister() error { return nil }
func (m *fakeMR) String() string    { return "fakeMR" }

// dataBufs encodes an SRP_CMD with f's descriptors and parses them back.
func dataBufs(t *testing.T, f iu.CmdFields) (out, in iu.DataBuf) {
	t.Helper()
	b, err := srptest.EncodeCmd(&f)
	require.NoError(t, err)
	out, in, err = iu.Cmd(b).DataBuffers(0)
	require.NoError(t, err)
	return out, in
}

func tableOf(descs ...iu.DirectBufFields) []byte {
	b := make([]byte, len(descs)*iu.DirectBufSize)
	for i := range descs {
		iu.DirectBuf(b[i*iu.DirectBufSize:]).Encode(&descs[i])
	}
	return b
}

// TestAppendRDMA checks the work requests built from descriptors, field by field.
func TestAppendRDMA(t *testing.T) {
	mr := &fakeMR{buf: make([]byte, 1<<20)}
	const id = idCmd | 7
	wr := func(op ib.Opcode, off uint64, n uint32, va uint64, key uint32) ib.SendWR {
		return ib.SendWR{ID: id, Op: op, SGL: []ib.SGE{{MR: mr, Offset: off, Length: n}}, RemoteAddr: va, RKey: key}
	}
	indirect := func(total uint32, tableN int, descs ...iu.DirectBufFields) iu.DataBufFields {
		return iu.DataBufFields{Format: iu.DescIndirect, DescCnt: uint8(len(descs)), Indirect: iu.IndirectBufFields{
			Table:    iu.DirectBufFields{VA: 0xAB00, Key: 0x77, Len: uint32(tableN * iu.DirectBufSize)},
			TotalLen: total,
			Descs:    descs,
		}}
	}
	cases := []struct {
		name  string
		op    ib.Opcode
		cmd   iu.CmdFields
		table []byte
		base  uint64
		n     uint32
		want  []ib.SendWR
	}{
		{
			name: "direct data-out",
			op:   ib.OpRDMARead,
			cmd:  iu.CmdFields{DataOut: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: 0x1000, Key: 0x11, Len: 4096}}},
			base: 8192, n: 4096,
			want: []ib.SendWR{wr(ib.OpRDMARead, 8192, 4096, 0x1000, 0x11)},
		},
		{
			name: "indirect data-in, empty descriptor skipped",
			op:   ib.OpRDMAWrite,
			cmd: iu.CmdFields{DataIn: indirect(4096, 3,
				iu.DirectBufFields{VA: 0x1000, Key: 1, Len: 1000},
				iu.DirectBufFields{VA: 0x9000, Key: 2, Len: 0},
				iu.DirectBufFields{VA: 0x5000, Key: 3, Len: 3096})},
			base: 0, n: 4096,
			want: []ib.SendWR{wr(ib.OpRDMAWrite, 0, 1000, 0x1000, 1), wr(ib.OpRDMAWrite, 1000, 3096, 0x5000, 3)},
		},
		{
			name: "data-in shorter than the descriptors",
			op:   ib.OpRDMAWrite,
			cmd: iu.CmdFields{DataIn: indirect(4096, 3,
				iu.DirectBufFields{VA: 0x1000, Key: 1, Len: 1000},
				iu.DirectBufFields{VA: 0x2000, Key: 2, Len: 1000},
				iu.DirectBufFields{VA: 0x3000, Key: 3, Len: 2096})},
			base: 4096, n: 1500,
			want: []ib.SendWR{wr(ib.OpRDMAWrite, 4096, 1000, 0x1000, 1), wr(ib.OpRDMAWrite, 5096, 500, 0x2000, 2)},
		},
		{
			name: "external table",
			op:   ib.OpRDMARead,
			cmd:  iu.CmdFields{DataOut: indirect(3000, 3, iu.DirectBufFields{VA: 0x1000, Key: 1, Len: 1000})},
			table: tableOf(iu.DirectBufFields{VA: 0x1000, Key: 1, Len: 1000},
				iu.DirectBufFields{VA: 0x2000, Key: 2, Len: 1000},
				iu.DirectBufFields{VA: 0x3000, Key: 3, Len: 1000}),
			base: 0, n: 3000,
			want: []ib.SendWR{wr(ib.OpRDMARead, 0, 1000, 0x1000, 1), wr(ib.OpRDMARead, 1000, 1000, 0x2000, 2), wr(ib.OpRDMARead, 2000, 1000, 0x3000, 3)},
		},
		{
			name: "direct data-in, less data than the buffer",
			op:   ib.OpRDMAWrite,
			cmd:  iu.CmdFields{DataIn: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: 0x7000, Key: 0x22, Len: 4096}}},
			base: 4096, n: 512,
			want: []ib.SendWR{wr(ib.OpRDMAWrite, 4096, 512, 0x7000, 0x22)},
		},
		{
			name: "nothing to move",
			op:   ib.OpRDMAWrite,
			cmd:  iu.CmdFields{DataIn: iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: 0x1000, Key: 0x11, Len: 4096}}},
			n:    0,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, in := dataBufs(t, tc.cmd)
			d := in
			if out.Present() {
				d = out
			}
			wrs, sges := appendRDMA(make([]ib.SendWR, 0, 8), make([]ib.SGE, 0, 8), tc.op, &d, tc.table, mr, tc.base, tc.n, id)
			require.Equal(t, len(tc.want), len(wrs))
			require.Len(t, sges, len(wrs))
			for i := range tc.want {
				require.Equal(t, tc.want[i], wrs[i], "work request %d", i)
			}
		})
	}
}

// TestAppendRDMANoAllocation: building the chain of a 255-descriptor command allocates nothing.
func TestAppendRDMANoAllocation(t *testing.T) {
	mr := &fakeMR{buf: make([]byte, 8<<20)}
	descs := make([]iu.DirectBufFields, 255)
	for i := range descs {
		descs[i] = iu.DirectBufFields{VA: uint64(i) << 20, Key: uint32(i), Len: 4096}
	}
	out, _ := dataBufs(t, iu.CmdFields{DataOut: iu.DataBufFields{Format: iu.DescIndirect, DescCnt: 255, Indirect: iu.IndirectBufFields{
		Table: iu.DirectBufFields{VA: 1, Key: 1, Len: 255 * 16}, TotalLen: 255 * 4096, Descs: descs}}})
	wrs := make([]ib.SendWR, 0, 256)
	sges := make([]ib.SGE, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		w, _ := appendRDMA(wrs[:0], sges[:0], ib.OpRDMARead, &out, nil, mr, 0, 255*4096, idCmd)
		if len(w) != 255 {
			panic("wrong count")
		}
	})
	require.Zero(t, allocs)
}

// TestEncodeCmdRsp checks SRP_RSP bytes written out by hand.
func TestEncodeCmdRsp(t *testing.T) {
	// Each case is a command: its status (GOOD when zero), LBA OUT OF RANGE sense when sense is
	// set, and data buffers of the given lengths.
	cases := []struct {
		name                                          string
		status                                        scsi.Status
		sense                                         bool
		dataIn, dataInLength, dataOut, transferLength int
		in, out, xportFail                            bool
		maxTI                                         int
		want                                          []byte
	}{
		{
			name:   "good, full data-in",
			dataIn: 4096, dataInLength: 4096, transferLength: 4096, in: true, maxTI: 256,
			want: []byte{0xC1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			name:   "data-in underflow",
			dataIn: 96, dataInLength: 36, transferLength: 36, in: true, maxTI: 256,
			want: []byte{0xC1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			name:   "data-in overflow",
			dataIn: 4096, dataInLength: 4096, transferLength: 8192, in: true, maxTI: 256,
			want: []byte{0xC1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			name:    "data-out underflow (more sent than the CDB asks)",
			dataOut: 4096, transferLength: 2048, out: true, maxTI: 256,
			want: []byte{0xC1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0x08, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			name:   "check condition with sense, data-out overflow",
			status: scsi.StatusCheckCondition, sense: true,
			dataOut: 1024, transferLength: 2048, out: true, maxTI: 256,
			want: []byte{0xC1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0x06, 0x02, 0, 0, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 18, 0, 0, 0, 0,
				0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0x00, 0, 0, 0, 0},
		},
		{
			name:   "sense truncated to the initiator's TI IU length",
			status: scsi.StatusCheckCondition, sense: true, maxTI: 40,
			want: []byte{0xC1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0x70, 0, 0x05, 0},
		},
		{
			name:   "answered by the transport: BUSY, no residuals",
			status: scsi.StatusBusy, dataIn: 4096, in: true, xportFail: true, maxTI: 256,
			want: []byte{0xC1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := scsi.Command{
				Status:         tc.status,
				DataIn:         make([]byte, tc.dataIn),
				DataInLength:   tc.dataInLength,
				DataOut:        make([]byte, tc.dataOut),
				TransferLength: tc.transferLength,
			}
			if tc.sense {
				c.SenseLength = scsi.BuildSense(c.Sense[:], false, scsi.ReasonLBAOutOfRange, scsi.SenseInfo{})
			}
			b := make([]byte, 256)
			n, err := encodeCmdRsp(b, tc.maxTI, &c, 0x1234, 3, tc.in, tc.out, tc.xportFail)
			require.NoError(t, err)
			require.Equal(t, tc.want, b[:n])
		})
	}
}

func TestTMFCodes(t *testing.T) {
	require.Equal(t, iu.TskMgmtSuccess, tmfCode(scsi.TMFComplete))
	require.Equal(t, iu.TskMgmtSuccess, tmfCode(scsi.TMFSucceeded))
	require.Equal(t, iu.TskMgmtFuncNotSupp, tmfCode(scsi.TMFRejected))
	require.Equal(t, iu.TskMgmtFailed, tmfCode(scsi.TMFIncorrectLUN))
	require.Equal(t, iu.TskMgmtFailed, tmfCode(scsi.TMFServiceDeliveryFailure))
}

// TestCtxClaim checks the generation guard of task management claims.
func TestCtxClaim(t *testing.T) {
	var c cmdCtx
	c.activate(ctxCmd, 1, 5, 1, nil)
	v := c.sg.Load()
	require.True(t, c.sg.CompareAndSwap(v, sgNext(v, ctxAbortedTMF)))
	require.False(t, c.transition(ctxCmd, ctxResponded), "a claimed command cannot be answered")
	c.sg.Store(sgNext(c.sg.Load(), ctxFree))
	c.activate(ctxCmd, 2, 6, 1, nil)
	require.False(t, c.sg.CompareAndSwap(v, sgNext(v, ctxAbortedTMF)), "a stale claim must not hit the next command")
	require.True(t, c.transition(ctxCmd, ctxResponded))
	require.Equal(t, ctxResponded, c.state())
}

func TestScsiAttr(t *testing.T) {
	for a, want := range map[iu.TaskAttr]scsi.TaskAttribute{
		iu.TaskAttrSimple: scsi.TaskSimple, iu.TaskAttrHeadOfQueue: scsi.TaskHeadOfQueue,
		iu.TaskAttrOrdered: scsi.TaskOrdered, iu.TaskAttrACA: scsi.TaskACA,
	} {
		got, ok := scsiAttr(a)
		require.True(t, ok)
		require.Equal(t, want, got)
	}
	for _, a := range []iu.TaskAttr{3, 5, 6, 7} {
		_, ok := scsiAttr(a)
		require.False(t, ok)
	}
}

// TestCreditLedger walks the request limit through a login, commands, an abort and a
// response that returns the aborted command's credit.
func TestCreditLedger(t *testing.T) {
	const posted = 4
	l := creditLedger{granted: posted} // SRP_LOGIN_RSP: REQUEST LIMIT DELTA 4
	recv := posted
	for i := 0; i < 3; i++ { // three SRP_CMDs
		require.False(t, l.consume())
		recv--
	}
	require.Equal(t, int64(1), l.granted)
	// Command 1 is answered: its buffer is posted again, then the response grants 1.
	recv++
	d, ok := l.respond(recv)
	require.True(t, ok)
	require.Equal(t, uint32(1), d)
	// Command 2 is aborted: buffer posted again, credit owed.
	recv++
	l.owe()
	require.Equal(t, int64(2), l.granted, "an abort grants nothing by itself")
	// Command 3's response carries 1 + the owed credit.
	recv++
	d, ok = l.respond(recv)
	require.True(t, ok)
	require.Equal(t, uint32(2), d)
	require.Equal(t, int64(posted), l.granted)
	require.Equal(t, posted, recv)
	// Granting without a buffer to back it is reported.
	_, ok = l.respond(recv)
	require.False(t, ok)
	// More requests than credits.
	l = creditLedger{granted: 1}
	require.False(t, l.consume())
	require.True(t, l.consume())
}

// TestCreditLedgerCredit: an SRP_CRED_REQ returns what is owed, never more than the receive
// buffers (less the spare) can back, and nothing when nothing is owed.
func TestCreditLedgerCredit(t *testing.T) {
	const posted = 4 // receive buffers posted, less the spare one
	l := creditLedger{granted: posted}
	require.Zero(t, l.credit(posted), "nothing owed")
	for i := 0; i < 3; i++ { // three commands, all aborted: buffers posted again, credits owed
		require.False(t, l.consume())
		l.owe()
	}
	require.Equal(t, int64(1), l.granted)
	require.Equal(t, uint32(3), l.credit(posted))
	require.Equal(t, int64(posted), l.granted)
	require.Zero(t, l.pending)
	require.Zero(t, l.credit(posted))
	// Owed credits beyond what the buffers back stay owed (cannot happen while every aborted
	// command's buffer is posted again; the ledger holds the line anyway).
	l = creditLedger{granted: 3, pending: 2}
	require.Equal(t, uint32(1), l.credit(posted))
	require.Equal(t, uint32(1), l.pending)
	require.Equal(t, int64(4), l.granted)
	d, ok := l.respond(posted + 2)
	require.True(t, ok)
	require.Equal(t, uint32(2), d, "the rest rides on the next response")
}

// TestChannelSpareReceive: a channel posts one receive buffer more than the credits it grants,
// for the SRP_CRED_RSP that answers an SRP_CRED_REQ without a credit; a device with a small
// queue depth grants one credit less than its depth.
func TestChannelSpareReceive(t *testing.T) {
	fab := memfabric.New(memfabric.Options{})
	defer func() { require.NoError(t, fab.Close()) }()
	node, err := fab.NewNode(netip.MustParseAddr("192.0.2.9"))
	require.NoError(t, err)
	lm, err := scsi.NewLUNMap(nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		depth, srq, credits int
	}{
		{16384, -1, 128},
		{64, -1, 63},
		{16384, 0, 128}, // the default SRQ holds more than the default credits
		{16384, 32, 31}, // credits bounded by the SRQ, less the spare receive
	} {
		tgt, err := New(Config{TargetPortID: unitPort, Authorizer: AllowAll(lm), Limits: Limits{BufferPoolSize: 8 << 20, SRQDepth: tc.srq}})
		require.NoError(t, err)
		lim := goodLimits
		lim.MaxQueueDepth = tc.depth
		f := linuxLogin()
		req := &fakeReq{priv: loginBytes(t, f), respRes: 4, pd: node.PD(), limits: lim}
		key := nexusKey{f.InitiatorPortID, f.TargetPortID}
		sess, host, le := tgt.reg.acquireSession(key, netip.MustParseAddr("198.51.100.1"))
		require.Nil(t, le)
		ch, ap, err := tgt.prepareChannel(sess, host, req, &f, nil)
		require.NoError(t, err)
		require.Equal(t, tc.credits, ch.credits)
		require.Equal(t, int64(tc.credits), ch.ledger.granted)
		if tc.srq < 0 {
			require.Nil(t, ap.SRQ)
			require.Equal(t, tc.credits+1, ap.QP.RecvQueueDepth)
			require.Len(t, ap.Recv, tc.credits+1)
			require.Equal(t, tc.credits+1, ch.recvPosted)
			last := ap.Recv[len(ap.Recv)-1]
			require.Equal(t, uint64(idRecv|uint64(tc.credits)), last.ID)
			require.LessOrEqual(t, last.SGL[0].Offset+uint64(last.SGL[0].Length), ch.ctlOff, "receive buffers end before the send buffers")
		} else {
			require.NotNil(t, ap.SRQ)
			require.Zero(t, ap.QP.RecvQueueDepth)
			require.Empty(t, ap.Recv)
			require.Zero(t, ch.recvPosted)
			require.Equal(t, ch.rq.depth-spareRecvs, ch.recvLimit())
			require.GreaterOrEqual(t, ch.recvLimit(), ch.credits)
			require.Len(t, ch.mem, (ch.nctx+ctlSendSlots)*ch.sendStride, "no receive buffers of its own")
		}
		ch.abortLogin()
		tgt.reg.releaseSession(sess, host)
		require.NoError(t, tgt.Shutdown(context.Background()))
	}
}
