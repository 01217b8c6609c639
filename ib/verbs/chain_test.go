//go:build linux && cgo

package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// These tests build work request chains in a connection's C memory without a device: the
// regions are mr values with made-up addresses and keys, never handed to verbs.

func fakeRegion(d *devCtx, addr uint64, lkey uint32) *mr {
	return &mr{Region: ib.NewRegion(make([]byte, 4096), addr, lkey, lkey+1, 0), dev: d}
}

// fakeBufs is a connection's C work request arrays for caps, freed when the test ends, and
// the made-up device its regions belong to.
func fakeBufs(t *testing.T, caps ib.QPCaps) (*devCtx, *wrBufs) {
	t.Helper()
	b, err := newWRBufs(caps)
	require.NoError(t, err)
	t.Cleanup(b.free)
	return &devCtx{name: "fake0"}, b
}

func TestConstantsMatchVerbs(t *testing.T) {
	require.Equal(t, uint32(wcSend), cWC.send)
	require.Equal(t, uint32(wcRDMAWrite), cWC.rdmaWrite)
	require.Equal(t, uint32(wcRDMARead), cWC.rdmaRead)
	require.Equal(t, uint32(wcRecv), cWC.recv)
	// ib.Access uses the values of enum ibv_access_flags, and ib.Status those of ibv_wc_status
	// (checked in package ib); RegisterMemory converts explicitly anyway.
	require.Equal(t, uint32(ib.AccessLocalWrite), cAccess.localWrite)
	require.Equal(t, uint32(ib.AccessRemoteWrite), cAccess.remoteWrite)
	require.Equal(t, uint32(ib.AccessRemoteRead), cAccess.remoteRead)
}

func TestFillSendChain(t *testing.T) {
	d, b := fakeBufs(t, ib.QPCaps{SendQueueDepth: 4, RecvQueueDepth: 2, MaxSendSGE: 3, MaxRecvSGE: 2})
	data := fakeRegion(d, 0x10000, 0x1111)
	rsp := fakeRegion(d, 0x20000, 0x2222)

	// SRP data-in: two unsignaled RDMA WRITEs, then the signaled SRP_RSP SEND, inline.
	wrs := []ib.SendWR{
		{ID: 7, Op: ib.OpRDMAWrite, RemoteAddr: 0xabc000, RKey: 0x55, SGL: []ib.SGE{
			{MR: data, Offset: 0, Length: 512}, {MR: data, Offset: 1024, Length: 512}, {MR: rsp, Offset: 8, Length: 4}}},
		{ID: 8, Op: ib.OpRDMAWrite, RemoteAddr: 0xabd000, RKey: 0x56},
		{ID: 9, Op: ib.OpSend, Signaled: true, Inline: true, SGL: []ib.SGE{{MR: rsp, Offset: 64, Length: 36}}},
		{ID: 10, Op: ib.OpRDMARead, Signaled: true, RemoteAddr: 0xfff0, RKey: 0x99, SGL: []ib.SGE{{MR: data, Offset: 4000, Length: 96}}},
	}
	for i := range wrs {
		require.NoError(t, b.fillSend(i, &wrs[i], encodeWRID(queueSend, uint64(40+i)), d))
	}
	b.linkSend(len(wrs))
	want := []sendWRView{
		{WRID: 160, Opcode: cWR.rdmaWrite, RemoteAddr: 0xabc000, RKey: 0x55, Next: 1,
			SGL: []sgeView{{0x10000, 512, 0x1111}, {0x10400, 512, 0x1111}, {0x20008, 4, 0x2222}}},
		{WRID: 164, Opcode: cWR.rdmaWrite, RemoteAddr: 0xabd000, RKey: 0x56, Next: 2},
		{WRID: 168, Opcode: cWR.send, Flags: cWR.signaled | cWR.inline, Next: 3,
			SGL: []sgeView{{0x20040, 36, 0x2222}}},
		{WRID: 172, Opcode: cWR.rdmaRead, Flags: cWR.signaled, RemoteAddr: 0xfff0, RKey: 0x99, Next: -1,
			SGL: []sgeView{{0x10fa0, 96, 0x1111}}},
	}
	for i := range want {
		require.Equal(t, want[i], b.sendView(i), "work request %d", i)
	}

	// A shorter chain reuses the slots: the fields are rewritten, the last link is cut.
	short := ib.SendWR{ID: 11, Op: ib.OpSend, SGL: []ib.SGE{{MR: data, Offset: 2, Length: 3}}}
	require.NoError(t, b.fillSend(0, &short, encodeWRID(queueSend, 44), d))
	b.linkSend(1)
	require.Equal(t, sendWRView{WRID: 176, Opcode: cWR.send, Next: -1, SGL: []sgeView{{0x10002, 3, 0x1111}}}, b.sendView(0))
}

func TestFillRegionChecks(t *testing.T) {
	d, b := fakeBufs(t, ib.QPCaps{SendQueueDepth: 2, RecvQueueDepth: 2, MaxSendSGE: 2, MaxRecvSGE: 2})
	other := &devCtx{name: "fake1"}

	foreign := fakeRegion(other, 0x1000, 1)
	wr := ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{{MR: foreign, Length: 1}}}
	require.ErrorIs(t, b.fillSend(0, &wr, 0, d), ib.ErrInvalidArgument, "a region of another device")
	wr.SGL[0].MR = lenMR{n: 4096}
	require.ErrorIs(t, b.fillSend(0, &wr, 0, d), ib.ErrInvalidArgument, "a region of another implementation")
	rwr := ib.RecvWR{SGL: []ib.SGE{{MR: foreign, Length: 1}}}
	require.ErrorIs(t, b.fillRecv(0, &rwr, 0, d), ib.ErrInvalidArgument)

	dead := fakeRegion(d, 0x1000, 1)
	dead.dead.Store(true)
	wr = ib.SendWR{Op: ib.OpSend, Inline: true, SGL: []ib.SGE{{MR: dead, Length: 1}}}
	require.ErrorIs(t, b.fillSend(0, &wr, 0, d), ib.ErrInvalidArgument, "inline from a deregistered region")
	wr.Inline = false
	require.NoError(t, b.fillSend(0, &wr, 0, d), "not inline: the HCA reports the stale lkey")
}

func TestFillRecvChain(t *testing.T) {
	d, b := fakeBufs(t, ib.QPCaps{SendQueueDepth: 1, RecvQueueDepth: 3, MaxSendSGE: 1, MaxRecvSGE: 2})
	m := fakeRegion(d, 0x40000, 0x77)
	wrs := []ib.RecvWR{
		{ID: 1, SGL: []ib.SGE{{MR: m, Offset: 0, Length: 4096}}},
		{ID: 2, SGL: []ib.SGE{{MR: m, Offset: 100, Length: 36}, {MR: m, Offset: 200, Length: 8}}},
		{ID: 3},
	}
	for i := range wrs {
		require.NoError(t, b.fillRecv(i, &wrs[i], encodeWRID(queueRecv, uint64(i)), d))
	}
	b.linkRecv(3)
	require.Equal(t, recvWRView{WRID: 1, Next: 1, SGL: []sgeView{{0x40000, 4096, 0x77}}}, b.recvView(0))
	require.Equal(t, recvWRView{WRID: 5, Next: 2, SGL: []sgeView{{0x40064, 36, 0x77}, {0x400c8, 8, 0x77}}}, b.recvView(1))
	require.Equal(t, recvWRView{WRID: 9, Next: -1}, b.recvView(2))
}

// The data path must not allocate: filling a chain is plain stores into C memory.
func TestFillSendDoesNotAllocate(t *testing.T) {
	d, b := fakeBufs(t, ib.QPCaps{SendQueueDepth: 4, RecvQueueDepth: 1, MaxSendSGE: 2, MaxRecvSGE: 1})
	m := fakeRegion(d, 0x1000, 3)
	wrs := []ib.SendWR{
		{ID: 1, Op: ib.OpRDMAWrite, RemoteAddr: 1, RKey: 2, SGL: []ib.SGE{{MR: m, Length: 8}, {MR: m, Offset: 8, Length: 8}}},
		{ID: 2, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: m, Length: 36}}},
	}
	lim := ib.SendLimits{MaxSGE: 2, MaxReadSGE: 1}
	allocs := testing.AllocsPerRun(100, func() {
		for i := range wrs {
			if ib.CheckSendWR(&wrs[i], lim) != nil || b.fillSend(i, &wrs[i], uint64(i), d) != nil {
				panic("unexpected error")
			}
		}
		b.linkSend(len(wrs))
	})
	require.Zero(t, allocs)
}
