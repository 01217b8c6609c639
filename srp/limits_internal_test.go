package srp

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimitsKnobs holds each row of limitKnobs to its default and to the bound the engine
// needs, with the words of its refusal.
func TestLimitsKnobs(t *testing.T) {
	d := Limits{}.withDefaults()
	require.Equal(t, Limits{
		MaxITIULen: DefaultMaxITIULen, MaxTIIULen: DefaultMaxTIIULen, Credits: DefaultCredits,
		MaxChannels: DefaultMaxChannels, MaxTransferLen: DefaultMaxTransferLen, MaxDescriptors: DefaultMaxDescriptors,
		BufferPoolSize: DefaultBufferPoolSize, BufferWait: DefaultBufferWait, SendQueueDepth: DefaultSendQueueDepth,
		WorkersPerChannel: DefaultCredits, DrainTimeout: DefaultDrainTimeout, Completion: DefaultCompletion,
		PollWindow: DefaultPollWindow, RDMATimeout: DefaultRDMATimeout, MaxInitiatorBuffer: DefaultBufferPoolSize / DefaultShare,
		MaxSessions: DefaultMaxSessions, MaxChannelsTotal: DefaultMaxChannelsTotal,
		MaxSessionsPerSource: max(1, DefaultMaxSessions/DefaultShare), MaxChannelsPerSource: max(1, DefaultMaxChannelsTotal/DefaultShare),
		MaxLoginsInProgress: DefaultMaxLoginsInProgress, PollGroups: DefaultPollGroups(), SRQDepth: DefaultSRQDepth,
	}, d)
	require.NoError(t, d.validate())

	// A default that depends on another field follows it.
	dep := Limits{Credits: 7, BufferPoolSize: 64 << 20, MaxSessions: 40, MaxChannelsTotal: 2}.withDefaults()
	require.Equal(t, 7, dep.WorkersPerChannel)
	require.Equal(t, int64(16<<20), dep.MaxInitiatorBuffer)
	require.Equal(t, 10, dep.MaxSessionsPerSource)
	require.Equal(t, 1, dep.MaxChannelsPerSource, "at least one")

	for _, tc := range []struct {
		set  func(*Limits)
		want string
	}{
		{func(l *Limits) { l.MaxITIULen = 64 }, "max IT IU length 64 outside [84, 1048576]"},
		{func(l *Limits) { l.MaxTIIULen = 1<<16 + 1 }, "max TI IU length 65537 outside"},
		{func(l *Limits) { l.Credits = 1 }, "credits 1 outside [2, 32768]"},
		{func(l *Limits) { l.MaxChannels = -1 }, "max channels -1 is less than 1"},
		{func(l *Limits) { l.MaxTransferLen = 1<<30 + 1; l.BufferPoolSize = 2 << 30 }, "max transfer length 1073741825 outside [4096, 1073741824]"},
		{func(l *Limits) { l.MaxDescriptors = 1<<16 + 1 }, "max descriptors 65537 outside [1, 65536]"},
		{func(l *Limits) { l.BufferPoolSize = 1 << 20 }, "buffer pool size 1048576 is smaller than the max transfer length 8388608"},
		{func(l *Limits) { l.BufferWait = -time.Second }, "buffer wait -1s is negative"},
		{func(l *Limits) { l.SendQueueDepth = 8 }, "send queue depth 8 is less than 16"},
		{func(l *Limits) { l.WorkersPerChannel = -2 }, "workers per channel -2 is less than 1"},
		{func(l *Limits) { l.DrainTimeout = -1 }, "drain timeout -1ns is negative"},
		{func(l *Limits) { l.Completion = CompletionPoll + 1 }, "completion mode"},
		{func(l *Limits) { l.BackstoreIO = BackstoreIOURing + 1 }, "backstore I/O"},
		{func(l *Limits) { l.PollWindow = 2 * time.Second }, "poll window 2s outside [0, 1s]"},
		{func(l *Limits) { l.RDMATimeout = time.Microsecond }, "RDMA timeout 1µs is less than 1ms"},
		{func(l *Limits) { l.MaxInitiatorBuffer = 100 }, "max initiator buffer 100 is less than 4096"},
		{func(l *Limits) { l.MaxSessions = -1 }, "max sessions -1 is less than 1"},
		{func(l *Limits) { l.MaxChannelsTotal = -1 }, "max channels total -1 is less than 1"},
		{func(l *Limits) { l.MaxSessionsPerSource = -1 }, "max sessions per source -1 is less than 1"},
		{func(l *Limits) { l.MaxChannelsPerSource = -1 }, "max channels per source -1 is less than 1"},
		{func(l *Limits) { l.IdleTimeout = -time.Second }, "idle timeout -1s is negative"},
		{func(l *Limits) { l.MaxLoginsInProgress = -1 }, "max logins in progress -1 is less than 1"},
		{func(l *Limits) { l.PollGroups = 1025 }, "poll groups 1025 outside [1, 1024]"},
		{func(l *Limits) { l.SRQDepth = -2 }, "shared receive queue depth -2 outside [-1, 1048576]"},
	} {
		l := Limits{}
		tc.set(&l)
		err := l.withDefaults().validate()
		require.ErrorContains(t, err, tc.want)
	}
}
