package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestForgetNexus(t *testing.T) {
	lu := newTestLU(t, 1024, 512, nil)
	a, b := &Nexus{InitiatorPort: "a"}, &Nexus{InitiatorPort: "b"}
	lu.EstablishUA(a, ReasonReportedLUNsDataHasChanged)
	lu.EstablishUA(b, ReasonReportedLUNsDataHasChanged)
	require.True(t, lu.nexuses.known(a))
	stateA, stateB := lu.nexus(a), lu.nexus(b)

	lu.ForgetNexus(a)
	require.False(t, lu.nexuses.known(a), "forgotten nexus still known")
	require.True(t, lu.nexuses.known(b), "the other nexus must be kept")
	require.Same(t, stateB, lu.nexus(b), "the other nexus's state must be kept")
	// A forgotten nexus that comes back is new: power-on reset, not what it had pending.
	require.NotSame(t, stateA, lu.nexus(a))
	require.Equal(t, ReasonPowerOnResetOrBusDeviceReset, lu.PendingUA(a))
	lu.ForgetNexus(&Nexus{}) // unknown: nothing happens
	require.Len(t, lu.nexuses.all(), 2)
}
