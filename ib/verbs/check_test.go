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
