package config

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore/rbd"
	"github.com/srptarget/srptarget/srp"
)

// TestApplyDefaults: every setting left out gets its default, a block LUN keeps the device's
// block size (0), values out of range stay as written, and a second call changes nothing.
func TestApplyDefaults(t *testing.T) {
	c := &Config{
		Limits: Limits{MaxTransferSize: 32 << 20, Credits: 1},
		LUNs: []LUN{
			{Backstore: "memory"},
			{Backstore: "block"},
			{Backstore: "rbd", RBD: &RBD{Options: rbd.Options{Image: "i"}}},
			{Backstore: "null", BlockSize: 4096},
		},
	}
	c.ApplyDefaults()
	require.Equal(t, StateDir, c.StateDir)
	require.Equal(t, uint16(DefaultRelativePortID), c.Target.RelativePortID)
	yes := true
	require.Equal(t, Limits{
		MaxIUSize: DefaultMaxIUSize, Credits: 1, MaxChannels: DefaultMaxChannels,
		MaxTransferSize: 32 << 20, SendQueueDepth: DefaultSendQueueDepth,
		BufferPoolSize: DefaultBufferPoolSize, // larger than max_transfer_size here
		ImmediateData:  &yes, Completion: srp.DefaultCompletion.String(),
		PollWindow: Duration(srp.DefaultPollWindow), RDMATimeout: Duration(srp.DefaultRDMATimeout),
		MaxInitiatorBuffer: "25%", MaxSessions: DefaultMaxSessions, MaxChannelsTotal: DefaultMaxChannelsTotal,
		MaxSessionsPerSource: DefaultMaxSessions / 4, MaxChannelsPerSource: DefaultMaxChannelsTotal / 4,
		MaxLoginsInProgress: DefaultMaxLoginsInProgress, Scheduling: DefaultScheduling, BackstoreIO: "auto",
		PollGroups: srp.DefaultPollGroups(), SRQDepth: srp.DefaultSRQDepth,
	}, c.Limits)
	require.Equal(t, []int{512, 0, 512, 4096}, []int{c.LUNs[0].BlockSize, c.LUNs[1].BlockSize, c.LUNs[2].BlockSize, c.LUNs[3].BlockSize})
	require.Equal(t, RBD{Options: rbd.Options{Pool: "rbd", Image: "i", MountTimeout: 10 * time.Second, OSDOpTimeout: 20 * time.Second},
		PRStore: "rados", PRLease: Duration(5 * time.Second)}, *c.LUNs[2].RBD)

	before := fmt.Sprintf("%+v %+v", *c, *c.LUNs[2].RBD)
	c.ApplyDefaults()
	require.Equal(t, before, fmt.Sprintf("%+v %+v", *c, *c.LUNs[2].RBD))

	// The pool follows a max_transfer_size larger than its default.
	big := &Config{Limits: Limits{MaxTransferSize: 128 << 20}}
	big.ApplyDefaults()
	require.Equal(t, Size(128<<20), big.Limits.BufferPoolSize)
}

// TestValidateChangesNothing: Validate of a Config built in Go checks it as ApplyDefaults would
// complete it, gives the same answer before and after ApplyDefaults, and leaves it unchanged.
func TestValidateChangesNothing(t *testing.T) {
	lun := 0
	c := &Config{
		Listeners: []Listener{{Address: "0.0.0.0", Port: 5555}},
		Limits:    Limits{Credits: 1},
		LUNs:      []LUN{{LUN: &lun, Backstore: "rbd", RBD: &RBD{Options: rbd.Options{Image: "i"}}}},
		ACLs:      []ACL{{Initiators: []string{"*"}, LUNs: []int{0}}},
	}
	before := fmt.Sprintf("%+v %+v", *c, *c.LUNs[0].RBD)
	err := c.Validate()
	require.Equal(t, before, fmt.Sprintf("%+v %+v", *c, *c.LUNs[0].RBD), "Validate changed the Config")
	require.Equal(t, []string{": limits.credits: 1 is outside 2..4096"}, errorLines(t, err))

	c.ApplyDefaults()
	require.Equal(t, err, c.Validate())
	c.Limits.Credits = 0 // the default again: valid
	require.NoError(t, c.Validate())
}

// TestSchedulingFor: batch on one CPU; with more, the policy the daemon was started with.
func TestSchedulingFor(t *testing.T) {
	require.Equal(t, SchedulingBatch, SchedulingFor(1))
	require.Equal(t, SchedulingInherit, SchedulingFor(2))
	require.Equal(t, SchedulingInherit, SchedulingFor(64))
}
