package srp_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/testutil"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// TestDataIntegrity writes and reads back data at queue depth 64 on each of 4 channels of one
// session, with every descriptor layout, on memory and file LUNs, on a synchronous and an
// asynchronous fabric, and on a fabric whose RDMA READs take one SGE (iWARP).
func TestDataIntegrity(t *testing.T) {
	cases := []struct {
		name string
		opts harnessOpts
	}{
		{"memory", harnessOpts{}},
		{"file", harnessOpts{fileLUN: true}},
		{"async fabric", harnessOpts{fabric: memfabric.Options{Async: true}}},
		{"one read SGE", harnessOpts{fabric: memfabric.Options{Limits: func() ib.DeviceLimits {
			l := memfabric.DefaultLimits
			l.MaxReadSGE = 1
			return l
		}()}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts)
			cfg := h.cfg()
			cfg.QueueDepth = 66 // can_queue 64
			chs := h.loginMulti(cfg, 4)
			clearUA(t, chs[0], 0)
			const qd, ops, region = 64, 6, 128 // blocks per worker region
			layouts := []srptest.Layout{nil, srptest.Direct{}, srptest.Indirect{N: 3}, srptest.Indirect{N: 12}}
			var g errgroup.Group
			for ci, ch := range chs {
				require.Equal(t, 64, ch.CanQueue())
				for w := 0; w < qd; w++ {
					base := uint32((ci*qd + w) * region)
					g.Go(func() error {
						ctx := ctxT(t)
						for i := 0; i < ops; i++ {
							seed := (ci*qd+w)*ops + i
							blocks := 1 + seed%32
							lba := base + uint32(seed*7)%uint32(region-blocks)
							layout := layouts[seed%len(layouts)]
							if ind, ok := layout.(srptest.Indirect); ok && ind.N > blocks*testBlockSize {
								layout = srptest.Direct{}
							}
							if err := writeReadBack(ctx, ch, lba, testutil.Pattern(blocks*testBlockSize, seed), layout); err != nil {
								return err
							}
						}
						return nil
					})
				}
			}
			require.NoError(t, g.Wait())
			for _, ch := range chs {
				require.Empty(t, ch.ProtocolErrors())
				// Every credit came back: the initiator holds what the login granted.
				require.Equal(t, int64(128), ch.Credits())
			}
			st := h.tgt.Stats()
			require.GreaterOrEqual(t, st.Commands, uint64(4*qd*ops*2))
			require.Zero(t, st.TransportErrors)
			h.waitIdle()
		})
	}
}

// TestLargeTransfers moves 8 MiB in one command with 255 descriptors in the IU and with an
// external descriptor table the target has to fetch.
func TestLargeTransfers(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	cfg := h.cfg()
	cfg.CmdSGEntries = 255
	ch255 := h.login(cfg)
	clearUA(t, ch255, 0)
	cfg = h.cfg()
	cfg.AllowExtSG = true
	cfg.Node = ch255.Node()
	cfg.MultiChannel = iu.MultiChanMulti
	cfg.ChannelIndex = 1
	chExt := h.login(cfg)

	const size = 8 << 20
	blocks := uint16(size / testBlockSize)
	for i, tc := range []struct {
		ch     *srptest.Channel
		layout srptest.Layout
	}{
		{ch255, srptest.Indirect{N: 255}},
		{chExt, srptest.External{N: 600}},
		{chExt, srptest.External{N: 13}},
		{ch255, srptest.Direct{}},
	} {
		data := testutil.Pattern(size, 100+i)
		rsp, err := tc.ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(uint32(i)*uint32(blocks), blocks), DataOut: data, Layout: tc.layout})
		require.NoError(t, err)
		require.NoError(t, rsp.Err(), "%T write", tc.layout)
		rsp, err = tc.ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(uint32(i)*uint32(blocks), blocks), DataInLen: size, Layout: tc.layout})
		require.NoError(t, err)
		require.NoError(t, rsp.Err(), "%T read", tc.layout)
		require.Zero(t, rsp.Flags&(iu.DIUNDER|iu.DIOVER))
		require.True(t, string(data) == string(rsp.DataIn), "%T: data read back differs", tc.layout)
	}
	st := h.tgt.Stats()
	require.Equal(t, uint64(4*size), st.BytesIn)
	require.Equal(t, uint64(4*size), st.BytesOut)

	// One byte more than the limit: refused by the transport.
	rsp, err := ch255.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, blocks+1), DataInLen: size + testBlockSize})
	require.NoError(t, err)
	require.Equal(t, uint8(scsi.StatusCheckCondition), rsp.Status)
	k, asc, ascq := senseOf(t, rsp)
	require.Equal(t, []uint8{0x05, 0x0E, 0x03}, []uint8{k, asc, ascq})
	require.Equal(t, int64(128), ch255.Credits())
	require.Equal(t, int64(128), chExt.Credits())
}

func TestImmediateDataWrites(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	require.True(t, ch.ImmediateData())
	clearUA(t, ch, 0)
	before := h.tgt.Stats().BytesOut
	total := 0
	for i, n := range []int{512, 4096, 8192} {
		data := testutil.Pattern(n, 200+i)
		total += n
		rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(uint32(i*64), uint16(n/testBlockSize)), DataOut: data, Layout: srptest.Immediate{}})
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		require.Equal(t, data, mustRead(t, ch, 0, uint32(i*64), uint16(n/testBlockSize)))
	}
	require.Equal(t, uint64(total), h.tgt.Stats().BytesOut-before)
	// A write whose data does not match its CDB is refused whole (DOUNDER residual reported).
	rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(0, 4), DataOut: testutil.Pattern(1024, 9), Layout: srptest.Immediate{}})
	require.NoError(t, err)
	require.Equal(t, uint8(scsi.StatusCheckCondition), rsp.Status)
	require.Equal(t, iu.DOOVER, rsp.Flags&(iu.DOOVER|iu.DOUNDER))
	require.Equal(t, uint32(1024), rsp.DataOutResidual)
}

// TestResiduals checks DIUNDER / DIOVER against what the SCSI layer reports.
func TestResiduals(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	// INQUIRY allocation length 36 into a 96-byte buffer: 60 bytes unused.
	rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBInquiry(false, 0, 36), DataInLen: 96})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, iu.DIUNDER, rsp.Flags&(iu.DIUNDER|iu.DIOVER))
	require.Equal(t, uint32(60), rsp.DataInResidual)
	require.Len(t, rsp.DataIn, 36)
	// READ of 16 blocks into an 8-block buffer: the 8 that fit, DIOVER 4096.
	rsp, err = ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 16), DataInLen: 4096})
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, iu.DIOVER, rsp.Flags&(iu.DIUNDER|iu.DIOVER))
	require.Equal(t, uint32(4096), rsp.DataInResidual)
	// A full read: no residual flags at all.
	rsp, err = ch.Read10(ctxT(t), 0, 0, 8, testBlockSize)
	require.NoError(t, err)
	require.Zero(t, rsp.Flags)
	require.Equal(t, []byte{0xC1, 0, 0, 0, 0, 0, 0, 1}, rsp.IU[:8])
}

// cmdIU encodes an SRP_CMD for SendRaw.
func cmdIU(t *testing.T, f iu.CmdFields) []byte {
	t.Helper()
	b, err := srptest.EncodeCmd(&f)
	require.NoError(t, err)
	return b
}

// nextRsp waits for the next unsolicited IU and decodes it as SRP_RSP.
func nextRsp(t *testing.T, ch *srptest.Channel) []byte {
	t.Helper()
	msg, err := ch.NextUnsolicited(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, iu.OpRsp, iu.Opcode(msg[0]), "got %v", iu.Opcode(msg[0]))
	return msg
}

// invalidFieldInCommandIU is the SRP_RSP the target sends for a malformed SRP_CMD, written
// out by hand: CHECK CONDITION, SNSVALID, 18 bytes of fixed sense ILLEGAL REQUEST /
// INVALID FIELD IN COMMAND INFORMATION UNIT (0E/03), REQUEST LIMIT DELTA 1.
func invalidFieldInCommandIU(tag uint64) []byte {
	b := []byte{
		0xC1, 0, 0, 0, 0, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 0, 0, // tag
		0, 0, 0x02, 0x02, // flags SNSVALID, status CHECK CONDITION
		0, 0, 0, 0, 0, 0, 0, 0, // residuals
		0, 0, 0, 18, 0, 0, 0, 0, // sense length 18, response length 0
		0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x0E, 0x03, 0, 0, 0, 0,
	}
	binary.BigEndian.PutUint64(b[8:], tag)
	return b
}

// TestMalformedCommands sends SRP_CMDs the target must refuse with CHECK CONDITION without
// closing the channel.
func TestMalformedCommands(t *testing.T) {
	h := newHarness(t, harnessOpts{limits: srp.Limits{MaxDescriptors: 16}})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	cfg := h.cfg()
	cfg.ImmediateData = srptest.Off
	noImm := h.login(cfg)
	clearUA(t, noImm, 0)

	direct := func(n uint32) iu.DataBufFields {
		return iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: 0x1000, Key: 0x1234, Len: n}}
	}
	read10 := [16]byte{0x28, 0, 0, 0, 0, 0, 0, 0, 8}
	cases := []struct {
		name string
		ch   *srptest.Channel
		iu   []byte
	}{
		{"descriptor lengths disagree with TOTAL LENGTH", ch, cmdIU(t, iu.CmdFields{Tag: 1, CDB: read10, DataIn: iu.DataBufFields{
			Format: iu.DescIndirect, DescCnt: 2, Indirect: iu.IndirectBufFields{
				Table:    iu.DirectBufFields{VA: 0x2000, Key: 1, Len: 32},
				TotalLen: 4096,
				Descs:    []iu.DirectBufFields{{VA: 0x1000, Key: 1, Len: 1024}, {VA: 0x3000, Key: 1, Len: 1024}},
			}}})},
		{"descriptor count for a direct descriptor", ch, func() []byte {
			d := direct(4096)
			d.DescCnt = 5
			return cmdIU(t, iu.CmdFields{Tag: 2, CDB: read10, DataIn: d})
		}()},
		{"short SRP_CMD", ch, cmdIU(t, iu.CmdFields{Tag: 3, CDB: read10})[:20]},
		{"transfer beyond max_transfer_len", ch, cmdIU(t, iu.CmdFields{Tag: 4, CDB: read10, DataIn: direct(16 << 20)})},
		{"reserved task attribute", ch, cmdIU(t, iu.CmdFields{Tag: 5, CDB: read10, TaskAttr: 3, DataIn: direct(4096)})},
		{"bidirectional", ch, cmdIU(t, iu.CmdFields{Tag: 6, CDB: read10, DataIn: direct(4096), DataOut: direct(4096)})},
		{"immediate data not granted", noImm, cmdIU(t, iu.CmdFields{Tag: 7, CDB: read10, DataOut: iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68, ImmData: make([]byte, 512)}})},
		{"too many descriptors", ch, cmdIU(t, iu.CmdFields{Tag: 8, CDB: read10, DataIn: iu.DataBufFields{
			Format: iu.DescIndirect, DescCnt: 1, Indirect: iu.IndirectBufFields{
				Table:    iu.DirectBufFields{VA: 0x2000, Key: 1, Len: 17 * 16},
				TotalLen: 17 * 512,
				Descs:    []iu.DirectBufFields{{VA: 0x1000, Key: 1, Len: 512}},
			}}})},
		{"descriptors end before the IU does", ch, append(cmdIU(t, iu.CmdFields{Tag: 9, CDB: read10, DataIn: direct(4096)}), 0, 0, 0, 0)},
		{"immediate data length beyond the IU", ch, func() []byte {
			b := cmdIU(t, iu.CmdFields{Tag: 10, CDB: read10, DataOut: iu.DataBufFields{Format: iu.DescImm, ImmDataOffset: 68, ImmData: make([]byte, 512)}})
			binary.BigEndian.PutUint32(b[48:], 0xFFFFFFFF)
			return b
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.ch.SendRaw(tc.iu))
			got := nextRsp(t, tc.ch)
			require.Equal(t, invalidFieldInCommandIU(binary.BigEndian.Uint64(tc.iu[8:16])), got)
		})
	}
	// The channels still work and the credits are all back.
	for _, c := range []*srptest.Channel{ch, noImm} {
		mustRead(t, c, 0, 0, 1)
		require.Equal(t, int64(128), c.Credits())
	}
	require.Equal(t, uint64(len(cases)), h.tgt.Stats().TransportErrors)
}

// TestProtocolViolations sends IUs after which the target logs the initiator out and closes
// the channel; other channels go on.
func TestProtocolViolations(t *testing.T) {
	tm := func(n int) []byte {
		b := make([]byte, iu.TskMgmtSize)
		iu.TskMgmt(b).Encode(&iu.TskMgmtFields{Tag: 0x77, Func: iu.TskAbortTask})
		return b[:n]
	}
	cases := []struct {
		name   string
		iu     []byte
		reason iu.TLogoutReason // 0xFF: no SRP_T_LOGOUT expected
	}{
		{"unknown IU type", []byte{0x77, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, iu.TLogoutInvalidIUType},
		{"target IU sent by the initiator", []byte{byte(iu.OpRsp), 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8}, iu.TLogoutInvalidIUType},
		{"IU without a tag", []byte{byte(iu.OpCmd), 0, 0, 0, 0, 0, 0, 0}, iu.TLogoutInvalidIULength},
		{"IU longer than max_it_iu_len", append([]byte{byte(iu.OpCmd)}, make([]byte, 9000)...), 0xFF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{})
			other := h.login(h.cfg())
			clearUA(t, other, 0)
			cfg := h.cfg()
			cfg.InitiatorPortID = iu.PortID{15: 9}
			bad := h.login(cfg)
			require.NoError(t, bad.SendRaw(tc.iu))
			select {
			case <-bad.Disconnected():
			case <-time.After(10 * time.Second):
				t.Fatal("channel not closed")
			}
			if tc.reason != 0xFF {
				f, ok := bad.TargetLogoutReason()
				require.True(t, ok, "no SRP_T_LOGOUT")
				require.Equal(t, tc.reason, f.Reason)
			}
			h.waitStats("channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 1 })
			mustRead(t, other, 0, 0, 8)
		})
	}

	// A short SRP_TSK_MGMT still has a tag: it is answered "request fields invalid".
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	require.NoError(t, ch.SendRaw(tm(20)))
	got := nextRsp(t, ch)
	require.Equal(t, []byte{
		0xC1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x77,
		0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4,
		0, 0, 0, 0x02,
	}, got)
	// Unsolicited initiator responses are ignored.
	cr := make([]byte, iu.CredRspSize)
	iu.CredRsp(cr).Encode(&iu.CredRspFields{Tag: 5})
	require.NoError(t, ch.SendRaw(cr))
	clearUA(t, ch, 0)
	require.Equal(t, int64(128), ch.Credits())
}

// TestRemoteAccessErrors: an initiator that gives a wrong rkey or a range outside its region
// makes the RDMA fail; the queue pair errors, that channel closes with a log line, and the
// target and its other channels go on.
func TestRemoteAccessErrors(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	good := h.login(h.cfg())
	clearUA(t, good, 0)

	newBad := func(i byte) *srptest.Channel {
		cfg := h.cfg()
		cfg.InitiatorPortID = iu.PortID{15: i}
		return h.login(cfg)
	}
	write10 := [16]byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 8}
	read10 := [16]byte{0x28, 0, 0, 0, 0, 0, 0, 0, 8}
	for i, tc := range []struct {
		name string
		iu   func(ch *srptest.Channel) []byte
	}{
		{"wrong rkey", func(*srptest.Channel) []byte {
			return cmdIU(t, iu.CmdFields{Tag: 1, CDB: write10, DataOut: iu.DataBufFields{Format: iu.DescDirect,
				Direct: iu.DirectBufFields{VA: 0x10000, Key: 0xdeadbeef, Len: 4096}}})
		}},
		{"range beyond the region", func(ch *srptest.Channel) []byte {
			return cmdIU(t, iu.CmdFields{Tag: 2, CDB: write10, DataOut: readOnlyBuf(t, ch, 2048, 4096)})
		}},
		{"data-in into read-only memory", func(ch *srptest.Channel) []byte {
			return cmdIU(t, iu.CmdFields{Tag: 3, CDB: read10, DataIn: readOnlyBuf(t, ch, 4096, 4096)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := newBad(byte(i + 1))
			clearUA(t, bad, 0)
			require.NoError(t, bad.SendRaw(tc.iu(bad)))
			select {
			case <-bad.Disconnected():
			case <-time.After(10 * time.Second):
				t.Fatal("channel not closed")
			}
			h.waitStats("channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 1 })
			mustRead(t, good, 0, 0, 8)
		})
	}
	require.Equal(t, uint64(3), h.tgt.Stats().RDMAErrors)
	var remote int
	for _, e := range h.logs.FilterMessage("work request failed: closing the channel").All() {
		if e.ContextMap()["status"] == ib.StatusRemoteAccessError.String() {
			require.Contains(t, e.ContextMap()["hint"], "rkey")
			remote++
		}
	}
	require.Equal(t, 3, remote)
	h.waitIdle()
}

// TestAbortTaskInLogicalUnit aborts a command that is running in the logical unit.
func TestAbortTaskInLogicalUnit(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	held := h.holdReads(t, ch, 0, 8)
	p1, p2 := held[0], held[1]

	time.AfterFunc(50*time.Millisecond, h.gate.release)
	code, err := ch.Abort(ctxT(t), p1)
	require.NoError(t, err)
	require.Equal(t, uint8(iu.TskMgmtSuccess), code)
	_, err = p1.Wait(ctxT(t))
	require.ErrorIs(t, err, srptest.ErrForgotten)
	rsp, err := p2.Wait(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, uint64(1), h.tgt.Stats().Aborted)
	// The aborted command's credit came back with the task management response.
	require.Equal(t, int64(128), ch.Credits())
	require.Zero(t, ch.Stats().UnknownTags, "a response for the aborted command was sent")
	// Aborting a command that is not there completes too (SAM-5).
	code, err = ch.TaskMgmt(ctxT(t), iu.TskAbortTask, 0, 0x4242)
	require.NoError(t, err)
	require.Equal(t, uint8(iu.TskMgmtSuccess), code)
	h.waitIdle()
}

// poolHeldByOneRead starts a harness whose 8 MiB buffer pool (BufferWait wait) is held by one
// read of 8 MiB, held in the backstore, and returns it with the channel and that read.
func poolHeldByOneRead(t *testing.T, wait time.Duration) (*harness, *srptest.Channel, *srptest.Pending) {
	t.Helper()
	h := newHarness(t, harnessOpts{gate: true, limits: srp.Limits{BufferPoolSize: 8 << 20, MaxTransferLen: 8 << 20, BufferWait: wait}})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	h.gate.hold()
	big, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 16384), DataInLen: 8 << 20})
	require.NoError(t, err)
	testutil.WaitFor(t, "the big read in the backstore", func() bool { return h.gate.entered.Load() == 1 })
	return h, ch, big
}

// TestAbortTaskWaitingForBuffer aborts a command that waits for a data buffer: it never
// reached the logical unit and is ended by the transport.
func TestAbortTaskWaitingForBuffer(t *testing.T) {
	h, ch, big := poolHeldByOneRead(t, 0)
	small, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 4096})
	require.NoError(t, err)
	h.waitStats("a buffer wait", func(s srp.Stats) bool { return s.BufferWaits == 1 })

	code, err := ch.Abort(ctxT(t), small)
	require.NoError(t, err)
	require.Equal(t, uint8(iu.TskMgmtSuccess), code)
	require.Equal(t, uint64(1), h.tgt.Stats().Aborted)
	h.gate.release()
	rsp, err := big.Wait(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Len(t, rsp.DataIn, 8<<20)
	require.Equal(t, int64(128), ch.Credits())
	require.Zero(t, ch.Stats().UnknownTags)
	h.waitIdle()
}

// TestBufferWaitBusy: a command that cannot get a buffer within BufferWait is answered BUSY.
func TestBufferWaitBusy(t *testing.T) {
	h, ch, big := poolHeldByOneRead(t, 50*time.Millisecond)
	start := time.Now()
	rsp, err := ch.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 8), DataInLen: 4096})
	require.NoError(t, err)
	require.Equal(t, uint8(scsi.StatusBusy), rsp.Status)
	require.Empty(t, rsp.Sense)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	h.gate.release()
	_, err = big.Wait(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, uint64(1), h.tgt.Stats().BufferBusy)
	// Once the buffer is back, the same command succeeds.
	mustRead(t, ch, 0, 0, 8)
}

// TestLUNResetAcrossChannels: LOGICAL UNIT RESET on channel 0 aborts the LUN's commands on
// every channel of the nexus, leaves other LUNs alone, and gives every credit back.
func TestLUNResetAcrossChannels(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true, luns: 2})
	chs := h.loginMulti(h.cfg(), 2)
	clearUA(t, chs[0], 0)
	clearUA(t, chs[0], 1)
	h.gate.hold()
	var held []*srptest.Pending
	for _, ch := range chs {
		for i := 0; i < 2; i++ {
			p, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(uint32(i*8), 8), DataInLen: 4096})
			require.NoError(t, err)
			held = append(held, p)
		}
	}
	testutil.WaitFor(t, "four reads in the backstore", func() bool { return h.gate.entered.Load() == 4 })
	other, err := chs[1].Submit(ctxT(t), &srptest.Request{LUN: 1, CDB: srptest.CDBRead10(0, 8), DataInLen: 4096})
	require.NoError(t, err)

	time.AfterFunc(50*time.Millisecond, h.gate.release)
	code, err := chs[0].ResetLUN(ctxT(t), 0)
	require.NoError(t, err)
	require.Equal(t, uint8(iu.TskMgmtSuccess), code)
	rsp, err := other.Wait(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, uint64(4), h.tgt.Stats().Aborted)

	// Channel 1: anything sent for the aborted commands would have arrived before this.
	requireTURSense(t, chs[1], 0, []uint8{0x06, 0x29, 0x03}, "BUS DEVICE RESET FUNCTION OCCURRED")
	for _, p := range held {
		select {
		case <-p.Done():
			t.Fatal("an aborted command got a response")
		default:
		}
		p.Forget()
	}
	for _, ch := range chs {
		require.Equal(t, int64(128), ch.Credits())
		require.Zero(t, ch.Stats().UnknownTags)
	}
	h.waitIdle()
}

// TestTaskManagementFunctions: the five functions SRP defines, and every other code answered
// TASK MANAGEMENT FUNCTION NOT SUPPORTED without touching a command: SRP assigns no code to I_T
// NEXUS RESET or QUERY TASK that could be sourced (see tmf.go), so SAS's 10h and 80h are not
// performed.
func TestTaskManagementFunctions(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	for _, tc := range []struct {
		fn   iu.TskMgmtFunc
		lun  uint16
		code iu.TskMgmtRspCode
	}{
		{iu.TskAbortTaskSet, 0, iu.TskMgmtSuccess},
		{iu.TskClearTaskSet, 0, iu.TskMgmtSuccess},
		{iu.TskClearACA, 0, iu.TskMgmtFuncNotSupp},
		{iu.TskLUNReset, 7, iu.TskMgmtFailed}, // LUN not mapped
		{iu.TskAbortTaskSet, 7, iu.TskMgmtFailed},
		{0x00, 0, iu.TskMgmtFuncNotSupp},
		{0x03, 0, iu.TskMgmtFuncNotSupp},
		{0x10, 0, iu.TskMgmtFuncNotSupp}, // SAS: I_T NEXUS RESET
		{0x20, 0, iu.TskMgmtFuncNotSupp},
		{0x80, 0, iu.TskMgmtFuncNotSupp}, // SAS: QUERY TASK
		{0x81, 0, iu.TskMgmtFuncNotSupp}, // SAS: QUERY TASK SET
		{0x82, 0, iu.TskMgmtFuncNotSupp}, // SAS: QUERY ASYNCHRONOUS EVENT
		{0xFF, 0, iu.TskMgmtFuncNotSupp},
	} {
		code, err := ch.TaskMgmt(ctxT(t), tc.fn, tc.lun, 0x99)
		require.NoError(t, err)
		require.Equal(t, uint8(tc.code), code, "%v on LUN %d", tc.fn, tc.lun)
	}
	// None of them established a unit attention (an I_T NEXUS RESET would have: 29/07).
	rsp, err := ch.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())

	// An unsupported function leaves a command in the logical unit alone: it completes with
	// its data.
	data := testutil.Pattern(4096, 9)
	mustWrite(t, ch, 0, 0, data)
	p := h.holdReads(t, ch, 0)[0]
	for _, fn := range []iu.TskMgmtFunc{0x10, 0x80} {
		code, err := ch.TaskMgmt(ctxT(t), fn, 0, p.Tag())
		require.NoError(t, err)
		require.Equal(t, uint8(iu.TskMgmtFuncNotSupp), code, "%v", fn)
	}
	h.gate.release()
	rsp, err = p.Wait(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, data, rsp.DataIn)
	require.Zero(t, h.tgt.Stats().Aborted)

	// ABORT TASK SET does abort a command in the logical unit.
	p = h.holdReads(t, ch, 0)[0]
	time.AfterFunc(30*time.Millisecond, h.gate.release)
	code, err := ch.TaskMgmt(ctxT(t), iu.TskAbortTaskSet, 0, 0)
	require.NoError(t, err)
	require.Equal(t, uint8(0), code)
	require.Equal(t, uint64(1), h.tgt.Stats().Aborted)
	p.Forget()
	rsp, err = ch.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())
	require.Equal(t, int64(128), ch.Credits())
}

// TestVanishWithOutstandingCommands: the initiator disappears (no DREQ) while commands are in
// the logical unit; the target notices when it tries to answer, closes the channel, and every
// buffer and goroutine comes back (goleak in TestMain).
func TestVanishWithOutstandingCommands(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	h.gate.hold()
	for i := 0; i < 16; i++ {
		_, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(uint32(i*16), 16), DataInLen: 8192})
		require.NoError(t, err)
	}
	for i := 0; i < 4; i++ {
		_, err := ch.Submit(ctxT(t), &srptest.Request{CDB: srptest.CDBWrite10(uint32(i*16), 16), DataOut: testutil.Pattern(8192, i), Layout: srptest.Direct{}})
		require.NoError(t, err)
	}
	testutil.WaitFor(t, "20 commands in the backstore", func() bool { return h.gate.entered.Load() == 20 })
	require.Positive(t, h.tgt.Stats().PoolInUse)
	ch.Vanish()
	h.gate.release()
	h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
	h.waitIdle()
	_, ok := h.logged("work request failed: closing the channel")
	require.True(t, ok)
}

// TestInitiatorLogout: SRP_I_LOGOUT closes the channel; the nexus is lost, so the initiator
// finds I_T NEXUS LOSS OCCURRED when it logs in again.
func TestInitiatorLogout(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	require.NoError(t, ch.Logout())
	h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
	_, ok := h.logged("initiator logged out (SRP_I_LOGOUT)")
	require.True(t, ok)
	testutil.WaitFor(t, "the nexus reset", func() bool { _, ok := h.logged("last channel of the I_T nexus closed: nexus reset"); return ok })
	cfg := h.cfg()
	cfg.Node = ch.Node()
	again := h.login(cfg)
	requireTURSense(t, again, 0, []uint8{0x06, 0x29, 0x07})
}

// TestInitiatorDisconnect: a DREQ from the initiator (ib_srp's way of logging out) closes the
// channel.
func TestInitiatorDisconnect(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	require.NoError(t, ch.Close())
	h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 && s.ChannelsClosed == 1 })
	e, ok := h.logged("channel closed")
	require.True(t, ok)
	require.Equal(t, "initiator disconnected", e.ContextMap()["reason"])
}

// TestShutdownDrains: Shutdown sends SRP_T_LOGOUT, answers new commands BUSY, lets the
// outstanding ones finish with their data, then disconnects.
func TestShutdownDrains(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	data := testutil.Pattern(4096, 5)
	mustWrite(t, ch, 0, 0, data)
	held := h.holdReads(t, ch, 0, 0, 0, 0) // four reads of the data just written
	done := make(chan error, 1)
	go func() { done <- h.tgt.Shutdown(ctxT(t)) }()
	select {
	case <-ch.TargetLogout():
	case <-time.After(10 * time.Second):
		t.Fatal("no SRP_T_LOGOUT")
	}
	rsp, err := ch.Read10(ctxT(t), 0, 0, 8, testBlockSize)
	require.NoError(t, err)
	require.Equal(t, uint8(scsi.StatusBusy), rsp.Status)
	h.gate.release()
	for _, p := range held {
		rsp, err := p.Wait(ctxT(t))
		require.NoError(t, err)
		require.NoError(t, rsp.Err())
		require.Equal(t, data, rsp.DataIn)
	}
	require.NoError(t, <-done)
	select {
	case <-ch.Disconnected():
	case <-time.After(10 * time.Second):
		t.Fatal("not disconnected")
	}
	require.ErrorIs(t, <-h.serveErr, srp.ErrTargetClosed)
}

// TestShutdownDeadline: when the context ends first, channels close at once; the commands in
// the logical unit are aborted and their buffers still come back.
func TestShutdownDeadline(t *testing.T) {
	h := newHarness(t, harnessOpts{gate: true})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	h.holdReads(t, ch, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	time.AfterFunc(200*time.Millisecond, h.gate.release)
	require.ErrorIs(t, h.tgt.Shutdown(ctx), context.DeadlineExceeded)
	require.Zero(t, h.tgt.Stats().ChannelsOpen)
	require.True(t, h.tgt.PoolsIdle())
}

// TestReauthorize: a configuration reload that changes the LUNs an initiator sees establishes
// REPORTED LUNS DATA HAS CHANGED; one that refuses it disconnects it.
func TestReauthorize(t *testing.T) {
	h := newHarness(t, harnessOpts{luns: 2})
	only0, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: h.lus[0]}})
	require.NoError(t, err)
	h.tgt.SetAuthorizer(srp.AllowAll(only0))
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)

	// Same mappings in a new map: nothing to report.
	same, err := scsi.NewLUNMap([]scsi.Mapping{{LUN: 0, LU: h.lus[0]}})
	require.NoError(t, err)
	h.tgt.SetAuthorizer(srp.AllowAll(same))
	rsp, err := ch.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	require.NoError(t, rsp.Err())

	h.tgt.SetAuthorizer(srp.AllowAll(h.lunMap))
	requireTURSense(t, ch, 0, []uint8{0x06, 0x3F, 0x0E})
	clearUA(t, ch, 1)

	h.tgt.SetAuthorizer(srp.AuthorizerFunc(func(iu.PortID, iu.PortID, netip.AddrPort) (*scsi.LUNMap, error) {
		return nil, srp.ErrNotAuthorized
	}))
	select {
	case <-ch.Disconnected():
	case <-time.After(10 * time.Second):
		t.Fatal("not disconnected after access was revoked")
	}
	_, err = h.loginErr(h.cfg())
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, iu.LoginRejChannelLimitReached, rej.Reason)
}

// TestDeviceRemoved: the RDMA device disappears; channels close without waiting for flush
// completions that will never come, and buffers come back.
func TestDeviceRemoved(t *testing.T) {
	h := newHarness(t, harnessOpts{noServe: true})
	serveErr := make(chan error, 1)
	go func() { serveErr <- h.tgt.Serve(context.Background(), h.ln) }()
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	h.node.Remove()
	require.ErrorIs(t, <-serveErr, ib.ErrDeviceRemoved)
	h.waitStats("the channel closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
	h.waitIdle()
	// A removed device sends nothing: the initiator finds out when its next command times out.
	_, err := ch.TestUnitReady(ctxT(t), 0)
	require.ErrorIs(t, err, srptest.ErrTransport)
}

// TestConcurrentLoginsAndIO logs several sessions in and out while others do I/O.
func TestConcurrentLoginsAndIO(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var g errgroup.Group
	for s := 0; s < 4; s++ {
		g.Go(func() error {
			for round := 0; round < 3; round++ {
				cfg := h.cfg()
				cfg.InitiatorPortID = iu.PortID{14: byte(s), 15: byte(round)}
				ctx := ctxT(t)
				chs, err := srptest.LoginMulti(ctx, h.fab, cfg, 2)
				if err != nil {
					return err
				}
				for i := 0; i < 10; i++ {
					ch := chs[i%2]
					rsp, err := ch.Read10(ctx, 0, uint32(i*8), 8, testBlockSize)
					if err != nil {
						return err
					}
					if rsp.Status != 0 && rsp.Status != 2 {
						return fmt.Errorf("status %#x", rsp.Status)
					}
				}
				for _, ch := range chs {
					_ = ch.Close()
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	h.waitStats("all channels closed", func(s srp.Stats) bool { return s.ChannelsOpen == 0 })
	require.Equal(t, uint64(24), h.tgt.Stats().LoginsAccepted)
}

// TestFirstCommandBeforeEstablished: on real fabrics the initiator's first SEND can arrive
// before the target sees the connection established (the REP/RTU race); the target serves it.
func TestFirstCommandBeforeEstablished(t *testing.T) {
	h := newHarness(t, harnessOpts{fabric: memfabric.Options{DelayEstablished: true}})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	data := testutil.Pattern(4096, 3)
	mustWrite(t, ch, 0, 0, data)
	require.Equal(t, data, mustRead(t, ch, 0, 0, 8))
}

// TestSmallSendQueue: with a 16-deep send queue, commands wait for send-queue slots (their
// RDMA chains take up to 13 work requests each) and still all complete in order.
func TestSmallSendQueue(t *testing.T) {
	h := newHarness(t, harnessOpts{limits: srp.Limits{SendQueueDepth: 16}})
	ch := h.login(h.cfg())
	clearUA(t, ch, 0)
	var g errgroup.Group
	for w := 0; w < 32; w++ {
		g.Go(func() error {
			ctx := ctxT(t)
			for i := 0; i < 4; i++ {
				lba := uint32((w*4 + i) * 16)
				if err := writeReadBack(ctx, ch, lba, testutil.Pattern(16*testBlockSize, w*4+i), srptest.Indirect{N: 12}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	// A command needing more work requests than the queue holds is refused.
	cfg := h.cfg()
	cfg.Node, cfg.MultiChannel, cfg.ChannelIndex, cfg.CmdSGEntries = ch.Node(), iu.MultiChanMulti, 1, 16
	ch16 := h.login(cfg)
	rsp, err := ch16.Do(ctxT(t), &srptest.Request{CDB: srptest.CDBRead10(0, 16), DataInLen: 16 * testBlockSize, Layout: srptest.Indirect{N: 16}})
	require.NoError(t, err)
	k, asc, ascq := senseOf(t, rsp)
	require.Equal(t, []uint8{0x05, 0x0E, 0x03}, []uint8{k, asc, ascq})
	require.Equal(t, int64(128), ch.Credits())
}

// TestPoolContention: two sessions share a pool that holds two of their 4 MiB transfers at a
// time; commands wait for buffers freed by the other channel and all complete. The buffer wait
// is generous so that a loaded machine does not turn a wait into BUSY: this test is about
// waiting, TestBufferWaitBusy about the timeout.
func TestPoolContention(t *testing.T) {
	h := newHarness(t, harnessOpts{limits: srp.Limits{BufferPoolSize: 8 << 20, MaxTransferLen: 4 << 20, BufferWait: 30 * time.Second}})
	a := h.login(h.cfg())
	clearUA(t, a, 0)
	cfg := h.cfg()
	cfg.InitiatorPortID = iu.PortID{15: 2}
	b := h.login(cfg)
	clearUA(t, b, 0)
	const size = 4 << 20
	var g errgroup.Group
	for ci, ch := range []*srptest.Channel{a, b} {
		for w := 0; w < 4; w++ {
			g.Go(func() error {
				ctx := ctxT(t)
				lba := uint32((ci*4 + w) * size / testBlockSize)
				return writeReadBack(ctx, ch, lba, testutil.Pattern(size, ci*4+w), nil)
			})
		}
	}
	require.NoError(t, g.Wait())
	st := h.tgt.Stats()
	require.Positive(t, st.BufferWaits)
	require.Zero(t, st.BufferBusy)
	require.Equal(t, int64(8<<20), st.PoolHighMark)
	h.waitIdle()
}

// readOnlyBuf registers size bytes of the initiator's memory for remote reads only and
// returns a direct descriptor of length bytes over them.
func readOnlyBuf(t *testing.T, ch *srptest.Channel, size, length int) iu.DataBufFields {
	t.Helper()
	mr, err := ch.Node().PD().RegisterMemory(make([]byte, size), ib.AccessRemoteRead)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mr.Deregister() })
	return iu.DataBufFields{Format: iu.DescDirect, Direct: iu.DirectBufFields{VA: mr.Addr(), Key: mr.RKey(), Len: uint32(length)}}
}
