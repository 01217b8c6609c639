package ib

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// lenMR is an MR with a length and nothing else: the checks look at no more.
type lenMR struct {
	MR
	n int
}

func (m lenMR) Len() int { return m.n }

func testLimits() DeviceLimits {
	return DeviceLimits{MaxQueueDepth: 1024, MaxSendSGE: 8, MaxRecvSGE: 4, MaxReadSGE: 2, MaxInlineData: 256, MaxRDAtomic: 16}
}

func testCaps() QPCaps {
	return QPCaps{SendQueueDepth: 16, RecvQueueDepth: 16, MaxSendSGE: 4, MaxRecvSGE: 2, MaxInlineData: 64}
}

// requireErr requires err to be want: no error for nil, else an error that is want.
func requireErr(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		require.NoError(t, err)
		return
	}
	require.ErrorIs(t, err, want)
}

// requireValid requires no error when ok, else ErrInvalidArgument.
func requireValid(t *testing.T, err error, ok bool) {
	t.Helper()
	if ok {
		requireErr(t, err, nil)
	} else {
		requireErr(t, err, ErrInvalidArgument)
	}
}

func TestCheckQPCaps(t *testing.T) {
	lim := testLimits()
	tests := []struct {
		name   string
		mod    func(*QPCaps)
		maxCQE int
		ok     bool
	}{
		{"fits", func(*QPCaps) {}, 0, true},
		{"fits the CQ exactly", func(c *QPCaps) { c.SendQueueDepth, c.RecvQueueDepth = 20, 12 }, 32, true},
		{"CQ too small", func(c *QPCaps) { c.SendQueueDepth, c.RecvQueueDepth = 20, 13 }, 32, false},
		{"zero send depth", func(c *QPCaps) { c.SendQueueDepth = 0 }, 0, false},
		{"zero receive depth", func(c *QPCaps) { c.RecvQueueDepth = 0 }, 0, false},
		{"send depth above max_qp_wr", func(c *QPCaps) { c.SendQueueDepth = 1025 }, 0, false},
		{"zero send SGE", func(c *QPCaps) { c.MaxSendSGE = 0 }, 0, false},
		{"too many send SGEs", func(c *QPCaps) { c.MaxSendSGE = 9 }, 0, false},
		{"too many receive SGEs", func(c *QPCaps) { c.MaxRecvSGE = 5 }, 0, false},
		{"negative inline", func(c *QPCaps) { c.MaxInlineData = -1 }, 0, false},
		{"too much inline", func(c *QPCaps) { c.MaxInlineData = 257 }, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCaps()
			tt.mod(&c)
			err := CheckQPCaps(c, lim, tt.maxCQE)
			requireValid(t, err, tt.ok)
		})
	}
}

func TestCheckSendWR(t *testing.T) {
	m := lenMR{n: 4096}
	lim := SendLimits{MaxSGE: 4, MaxReadSGE: 2, MaxInline: 64, InitiatorDepth: 4}
	sge := func(off uint64, n uint32) SGE { return SGE{MR: m, Offset: off, Length: n} }
	tests := []struct {
		name  string
		wr    SendWR
		depth uint8
		want  error
	}{
		{"send", SendWR{Op: OpSend, SGL: []SGE{sge(0, 100)}}, 4, nil},
		{"zero-length RDMA WRITE", SendWR{Op: OpRDMAWrite}, 4, nil},
		{"write with max SGEs", SendWR{Op: OpRDMAWrite, SGL: []SGE{sge(0, 1), sge(1, 1), sge(2, 1), sge(3, 1)}}, 4, nil},
		{"write with too many SGEs", SendWR{Op: OpRDMAWrite, SGL: []SGE{sge(0, 1), sge(1, 1), sge(2, 1), sge(3, 1), sge(4, 1)}}, 4, ErrInvalidArgument},
		{"read within max_sge_rd", SendWR{Op: OpRDMARead, SGL: []SGE{sge(0, 1), sge(1, 1)}}, 4, nil},
		{"read beyond max_sge_rd", SendWR{Op: OpRDMARead, SGL: []SGE{sge(0, 1), sge(1, 1), sge(2, 1)}}, 4, ErrInvalidArgument},
		{"read with initiator depth 0", SendWR{Op: OpRDMARead, SGL: []SGE{sge(0, 1)}}, 0, ErrInvalidArgument},
		{"inline read", SendWR{Op: OpRDMARead, Inline: true, SGL: []SGE{sge(0, 1)}}, 4, ErrInvalidArgument},
		{"zero opcode", SendWR{SGL: []SGE{sge(0, 1)}}, 4, ErrInvalidArgument},
		{"OpRecv is not a send opcode", SendWR{Op: OpRecv}, 4, ErrInvalidArgument},
		{"SGE without region", SendWR{Op: OpSend, SGL: []SGE{{Length: 4}}}, 4, ErrInvalidArgument},
		{"SGE of length 0", SendWR{Op: OpSend, SGL: []SGE{sge(0, 0)}}, 4, ErrInvalidArgument},
		{"more than 2 GiB", SendWR{Op: OpRDMAWrite, SGL: []SGE{sge(0, 1<<31), sge(0, 1)}}, 4, ErrInvalidArgument},
		{"exactly 2 GiB", SendWR{Op: OpRDMAWrite, SGL: []SGE{sge(0, 1<<30), sge(0, 1<<30)}}, 4, nil},
		{"inline at the limit", SendWR{Op: OpSend, Inline: true, SGL: []SGE{sge(0, 32), sge(4064, 32)}}, 4, nil},
		{"inline beyond the limit", SendWR{Op: OpSend, Inline: true, SGL: []SGE{sge(0, 65)}}, 4, ErrInvalidArgument},
		{"inline outside its region", SendWR{Op: OpRDMAWrite, Inline: true, SGL: []SGE{sge(4090, 8)}}, 4, ErrInvalidArgument},
		{"inline offset past the end", SendWR{Op: OpSend, Inline: true, SGL: []SGE{sge(5000, 1)}}, 4, ErrInvalidArgument},
		// Not inline: bounds are the HCA's to check (a local protection error completion).
		{"non-inline outside its region", SendWR{Op: OpSend, SGL: []SGE{sge(5000, 1)}}, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := lim
			l.InitiatorDepth = tt.depth
			err := CheckSendWR(&tt.wr, l)
			requireErr(t, err, tt.want)
		})
	}
}

func TestCheckAccept(t *testing.T) {
	m := lenMR{n: 4096}
	good := func() AcceptParams {
		return AcceptParams{
			PrivateData: make([]byte, 52), QP: testCaps(), RNRRetryCount: 7, ResponderResources: 4, InitiatorDepth: 4,
			Recv: []RecvWR{{ID: 1, SGL: []SGE{{MR: m, Length: 100}}}},
		}
	}
	tests := []struct {
		name string
		mod  func(*AcceptParams)
		want error
	}{
		{"LIO's parameters", func(*AcceptParams) {}, nil},
		{"196 bytes of private data", func(p *AcceptParams) { p.PrivateData = make([]byte, 196) }, nil},
		{"197 bytes of private data", func(p *AcceptParams) { p.PrivateData = make([]byte, 197) }, ErrPrivateDataTooLong},
		{"bad caps", func(p *AcceptParams) { p.QP.MaxSendSGE = 100 }, ErrInvalidArgument},
		{"rnr retry 8", func(p *AcceptParams) { p.RNRRetryCount = 8 }, ErrInvalidArgument},
		{"responder resources above the device", func(p *AcceptParams) { p.ResponderResources = 17 }, ErrInvalidArgument},
		{"initiator depth above the request's responder resources", func(p *AcceptParams) { p.InitiatorDepth = 5 }, ErrInvalidArgument},
		{"more receives than the queue", func(p *AcceptParams) { p.Recv = make([]RecvWR, 17) }, ErrQueueFull},
		{"receive with too many SGEs", func(p *AcceptParams) {
			p.Recv[0].SGL = []SGE{{MR: m, Length: 1}, {MR: m, Length: 1}, {MR: m, Length: 1}}
		}, ErrInvalidArgument},
		{"receive without region", func(p *AcceptParams) { p.Recv[0].SGL[0].MR = nil }, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good()
			tt.mod(&p)
			err := CheckAccept(&p, 4, testLimits(), 0)
			requireErr(t, err, tt.want)
		})
	}
}

func TestCheckAccess(t *testing.T) {
	tests := []struct {
		name   string
		access Access
		ok     bool
	}{
		{"none", 0, true},
		{"local write", AccessLocalWrite, true},
		{"remote read only", AccessRemoteRead, true},
		{"remote write with local write", AccessLocalWrite | AccessRemoteWrite, true},
		{"all", AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead, true},
		{"remote write without local write", AccessRemoteWrite, false},
		{"unknown bit", 1 << 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAccess(tt.access)
			requireValid(t, err, tt.ok)
		})
	}
}

func TestCheckConnParams(t *testing.T) {
	m := lenMR{n: 4096}
	recv := []RecvWR{{ID: 1, SGL: []SGE{{MR: m, Length: 100}}}}
	require.NoError(t, CheckConnParams(testCaps(), 7, 4, 0, recv, testLimits(), 0))
	require.ErrorIs(t, CheckConnParams(testCaps(), 8, 4, 0, recv, testLimits(), 0), ErrInvalidArgument)
	require.ErrorIs(t, CheckConnParams(testCaps(), 7, 17, 0, recv, testLimits(), 0), ErrInvalidArgument)
	require.ErrorIs(t, CheckConnParams(testCaps(), 7, 4, 17, recv, testLimits(), 0), ErrInvalidArgument)
	require.ErrorIs(t, CheckConnParams(testCaps(), 7, 4, 0, make([]RecvWR, 17), testLimits(), 0), ErrQueueFull)
	require.ErrorIs(t, CheckConnParams(testCaps(), 7, 4, 0, recv, testLimits(), 31), ErrInvalidArgument, "CQ too small")
	require.ErrorIs(t, CheckConnParams(testCaps(), 7, 4, 0, []RecvWR{{SGL: []SGE{{Length: 1}}}}, testLimits(), 0), ErrInvalidArgument)
}
