package daemon

import (
	"testing"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/stretchr/testify/require"
)

func TestResolveIdentity(t *testing.T) {
	devs := func() ([]Device, error) {
		return []Device{{Name: "b", NodeGUID: 2}, {Name: "a", NodeGUID: 1}}, nil
	}
	tests := []struct {
		name string
		cfg  config.Target
		want Identity
	}{
		{"both", config.Target{IDExt: "0x0000000000000001", IOCGUID: "0000:0000:0000:0002"}, Identity{1, 2, "configuration"}},
		{"id_ext only", config.Target{IDExt: "00000000000000ab"}, Identity{0xab, 0xab, "configuration"}},
		{"ioc_guid only", config.Target{IOCGUID: "00000000000000cd"}, Identity{0xcd, 0xcd, "configuration"}},
		{"first device by name", config.Target{}, Identity{1, 1, "node GUID of a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := ResolveIdentity(tc.cfg, devs)
			require.NoError(t, err)
			require.Equal(t, tc.want, id)
		})
	}
	id := Identity{idExt: 0x0002c90300a0b0c1, iocGUID: 0x1122334455667788}
	require.Equal(t, iu.PortID{0x00, 0x02, 0xc9, 0x03, 0x00, 0xa0, 0xb0, 0xc1, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}, id.portID())
	_, err := ResolveIdentity(config.Target{}, func() ([]Device, error) { return []Device{{Name: "x"}}, nil })
	require.EqualError(t, err, "target identity: no RDMA device with a node GUID to take it from: set target.id_ext and target.ioc_guid in the configuration")
}
