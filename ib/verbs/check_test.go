package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// lenMR is an ib.MR with a length and nothing else: the checks in check.go look at no more.
type lenMR struct {
	ib.MR
	n int
}

func (m lenMR) Len() int { return m.n }

func testLimits() ib.DeviceLimits {
	return ib.DeviceLimits{MaxQueueDepth: 1024, MaxSendSGE: 8, MaxRecvSGE: 4, MaxReadSGE: 2, MaxInlineData: 256, MaxRDAtomic: 16}
}

func testCaps() ib.QPCaps {
	return ib.QPCaps{SendQueueDepth: 16, RecvQueueDepth: 16, MaxSendSGE: 4, MaxRecvSGE: 2, MaxInlineData: 64}
}

func TestCheckCaps(t *testing.T) {
	lim := testLimits()
	tests := []struct {
		name   string
		mod    func(*ib.QPCaps)
		maxCQE int
		ok     bool
	}{
		{"fits", func(*ib.QPCaps) {}, 0, true},
		{"fits the CQ exactly", func(c *ib.QPCaps) { c.SendQueueDepth, c.RecvQueueDepth = 20, 12 }, 32, true},
		{"CQ too small", func(c *ib.QPCaps) { c.SendQueueDepth, c.RecvQueueDepth = 20, 13 }, 32, false},
		{"zero send depth", func(c *ib.QPCaps) { c.SendQueueDepth = 0 }, 0, false},
		{"zero receive depth", func(c *ib.QPCaps) { c.RecvQueueDepth = 0 }, 0, false},
		{"send depth above max_qp_wr", func(c *ib.QPCaps) { c.SendQueueDepth = 1025 }, 0, false},
		{"zero send SGE", func(c *ib.QPCaps) { c.MaxSendSGE = 0 }, 0, false},
		{"too many send SGEs", func(c *ib.QPCaps) { c.MaxSendSGE = 9 }, 0, false},
		{"too many receive SGEs", func(c *ib.QPCaps) { c.MaxRecvSGE = 5 }, 0, false},
		{"negative inline", func(c *ib.QPCaps) { c.MaxInlineData = -1 }, 0, false},
		{"too much inline", func(c *ib.QPCaps) { c.MaxInlineData = 257 }, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCaps()
			tt.mod(&c)
			err := checkCaps(c, lim, tt.maxCQE)
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ib.ErrInvalidArgument)
			}
		})
	}
}

func TestCheckSend(t *testing.T) {
	m := lenMR{n: 4096}
	lim := sendLimits{maxSGE: 4, maxReadSGE: 2, maxInline: 64, rdDepth: 4}
	sge := func(off uint64, n uint32) ib.SGE { return ib.SGE{MR: m, Offset: off, Length: n} }
	tests := []struct {
		name  string
		wr    ib.SendWR
		depth uint8
		want  error
	}{
		{"send", ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{sge(0, 100)}}, 4, nil},
		{"zero-length RDMA WRITE", ib.SendWR{Op: ib.OpRDMAWrite}, 4, nil},
		{"write with max SGEs", ib.SendWR{Op: ib.OpRDMAWrite, SGL: []ib.SGE{sge(0, 1), sge(1, 1), sge(2, 1), sge(3, 1)}}, 4, nil},
		{"write with too many SGEs", ib.SendWR{Op: ib.OpRDMAWrite, SGL: []ib.SGE{sge(0, 1), sge(1, 1), sge(2, 1), sge(3, 1), sge(4, 1)}}, 4, ib.ErrInvalidArgument},
		{"read within max_sge_rd", ib.SendWR{Op: ib.OpRDMARead, SGL: []ib.SGE{sge(0, 1), sge(1, 1)}}, 4, nil},
		{"read beyond max_sge_rd", ib.SendWR{Op: ib.OpRDMARead, SGL: []ib.SGE{sge(0, 1), sge(1, 1), sge(2, 1)}}, 4, ib.ErrInvalidArgument},
		{"read with initiator depth 0", ib.SendWR{Op: ib.OpRDMARead, SGL: []ib.SGE{sge(0, 1)}}, 0, ib.ErrInvalidArgument},
		{"inline read", ib.SendWR{Op: ib.OpRDMARead, Inline: true, SGL: []ib.SGE{sge(0, 1)}}, 4, ib.ErrInvalidArgument},
		{"zero opcode", ib.SendWR{SGL: []ib.SGE{sge(0, 1)}}, 4, ib.ErrInvalidArgument},
		{"OpRecv is not a send opcode", ib.SendWR{Op: ib.OpRecv}, 4, ib.ErrInvalidArgument},
		{"SGE without region", ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{{Length: 4}}}, 4, ib.ErrInvalidArgument},
		{"SGE of length 0", ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{sge(0, 0)}}, 4, ib.ErrInvalidArgument},
		{"more than 2 GiB", ib.SendWR{Op: ib.OpRDMAWrite, SGL: []ib.SGE{sge(0, 1<<31), sge(0, 1)}}, 4, ib.ErrInvalidArgument},
		{"exactly 2 GiB", ib.SendWR{Op: ib.OpRDMAWrite, SGL: []ib.SGE{sge(0, 1<<30), sge(0, 1<<30)}}, 4, nil},
		{"inline at the limit", ib.SendWR{Op: ib.OpSend, Inline: true, SGL: []ib.SGE{sge(0, 32), sge(4064, 32)}}, 4, nil},
		{"inline beyond the limit", ib.SendWR{Op: ib.OpSend, Inline: true, SGL: []ib.SGE{sge(0, 65)}}, 4, ib.ErrInvalidArgument},
		{"inline outside its region", ib.SendWR{Op: ib.OpRDMAWrite, Inline: true, SGL: []ib.SGE{sge(4090, 8)}}, 4, ib.ErrInvalidArgument},
		{"inline offset past the end", ib.SendWR{Op: ib.OpSend, Inline: true, SGL: []ib.SGE{sge(5000, 1)}}, 4, ib.ErrInvalidArgument},
		// Not inline: bounds are the HCA's to check (a local protection error completion).
		{"non-inline outside its region", ib.SendWR{Op: ib.OpSend, SGL: []ib.SGE{sge(5000, 1)}}, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := lim
			l.rdDepth = tt.depth
			err := checkSend(&tt.wr, l)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
		})
	}
}

func TestCheckAccept(t *testing.T) {
	m := lenMR{n: 4096}
	good := func() ib.AcceptParams {
		return ib.AcceptParams{
			PrivateData: make([]byte, 52), QP: testCaps(), RNRRetryCount: 7, ResponderResources: 4, InitiatorDepth: 4,
			Recv: []ib.RecvWR{{ID: 1, SGL: []ib.SGE{{MR: m, Length: 100}}}},
		}
	}
	tests := []struct {
		name string
		mod  func(*ib.AcceptParams)
		want error
	}{
		{"LIO's parameters", func(*ib.AcceptParams) {}, nil},
		{"196 bytes of private data", func(p *ib.AcceptParams) { p.PrivateData = make([]byte, 196) }, nil},
		{"197 bytes of private data", func(p *ib.AcceptParams) { p.PrivateData = make([]byte, 197) }, ib.ErrPrivateDataTooLong},
		{"bad caps", func(p *ib.AcceptParams) { p.QP.MaxSendSGE = 100 }, ib.ErrInvalidArgument},
		{"rnr retry 8", func(p *ib.AcceptParams) { p.RNRRetryCount = 8 }, ib.ErrInvalidArgument},
		{"responder resources above the device", func(p *ib.AcceptParams) { p.ResponderResources = 17 }, ib.ErrInvalidArgument},
		{"initiator depth above the request's responder resources", func(p *ib.AcceptParams) { p.InitiatorDepth = 5 }, ib.ErrInvalidArgument},
		{"more receives than the queue", func(p *ib.AcceptParams) { p.Recv = make([]ib.RecvWR, 17) }, ib.ErrQueueFull},
		{"receive with too many SGEs", func(p *ib.AcceptParams) {
			p.Recv[0].SGL = []ib.SGE{{MR: m, Length: 1}, {MR: m, Length: 1}, {MR: m, Length: 1}}
		}, ib.ErrInvalidArgument},
		{"receive without region", func(p *ib.AcceptParams) { p.Recv[0].SGL[0].MR = nil }, ib.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good()
			tt.mod(&p)
			err := checkAccept(&p, 4, testLimits(), 0)
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
		})
	}
}

func TestCheckConnect(t *testing.T) {
	p := ConnectParams{QP: testCaps(), RNRRetryCount: 7, ResponderResources: 4}
	require.NoError(t, checkConnect(make([]byte, 56), &p, testLimits(), 0))
	require.ErrorIs(t, checkConnect(make([]byte, 57), &p, testLimits(), 0), ib.ErrPrivateDataTooLong)
	p.InitiatorDepth = 17
	require.ErrorIs(t, checkConnect(nil, &p, testLimits(), 0), ib.ErrInvalidArgument)
	p.InitiatorDepth = 0
	p.Recv = make([]ib.RecvWR, 17)
	require.ErrorIs(t, checkConnect(nil, &p, testLimits(), 0), ib.ErrQueueFull)
}
