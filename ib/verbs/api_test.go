package verbs

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The enums print as rdma-core names them (ibv_devinfo's words), and a value a newer kernel
// may report prints as a number instead of an empty string or a panic.
func TestEnumString(t *testing.T) {
	for _, tc := range []struct {
		v    fmt.Stringer
		want string
	}{
		{PortNop, "NOP"},
		{PortDown, "DOWN"},
		{PortActive, "ACTIVE"},
		{PortActiveDefer, "ACTIVE_DEFER"},
		{PortState(6), "state(6)"},
		{PortState(-1), "state(-1)"},
		{LinkLayerUnspecified, "unspecified"},
		{LinkLayerInfiniBand, "InfiniBand"},
		{LinkLayerEthernet, "Ethernet"},
		{LinkLayer(3), "link-layer(3)"},
		{GIDTypeIB, "IB"},
		{GIDTypeRoCEv1, "RoCE v1"},
		{GIDTypeRoCEv2, "RoCE v2"},
		{GIDType(7), "gid-type(7)"},
	} {
		require.Equal(t, tc.want, tc.v.String())
	}
}
