package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib/dm"
	"github.com/srptarget/srptarget/ib/umad"
)

// TestDMAgentFor: one I/O controller per ioc_guid, a service per target port and ib listener.
func TestDMAgentFor(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`target:
  id_ext: "0002c90300a0b0c1"
  ports:
    - {id_ext: "0002c90300a0b0c9", relative_port_id: 2}
    - {id_ext: "0002c90300a0b0d0", ioc_guid: "0002c90300a0b0d0", relative_port_id: 3}
listeners:
  - {address: 0.0.0.0, port: 5555}
  - {kind: ib, port: 5555}
  - {kind: ib, port: 5600, ib_ports: [mlx5_1/1]}
limits: {credits: 64, max_it_iu_len: 8276, max_transfer_size: 32MiB}
luns: [{lun: 0, backstore: null, size: 1GiB}]
acls: [{initiators: ["*"], luns: [0]}]
`))
	require.NoError(t, err)
	id, err := ResolveIdentity(cfg.Target, nil)
	require.NoError(t, err)
	a, err := DMAgentFor(cfg, id)
	require.NoError(t, err)
	require.Equal(t, []dm.IOC{
		{GUID: 0x0002c90300a0b0c1, Services: []dm.Service{
			{IDExt: 0x0002c90300a0b0c1, ServiceID: 0x13f15b3}, {IDExt: 0x0002c90300a0b0c1, ServiceID: 0x13f15e0},
			{IDExt: 0x0002c90300a0b0c9, ServiceID: 0x13f15b3}, {IDExt: 0x0002c90300a0b0c9, ServiceID: 0x13f15e0},
		}},
		{GUID: 0x0002c90300a0b0d0, Services: []dm.Service{
			{IDExt: 0x0002c90300a0b0d0, ServiceID: 0x13f15b3}, {IDExt: 0x0002c90300a0b0d0, ServiceID: 0x13f15e0},
		}},
	}, a.IOCs)
	require.Equal(t, dm.Profile{SendQueueDepth: 64, SendSize: 8276, RDMASize: 32 << 20, IDString: "srptarget"}, a.Profile)

	// One ib listener on every port: every InfiniBand port; else only those named.
	ports := []umad.PortInfo{{CA: "mlx5_0", Port: 1}, {CA: "mlx5_1", Port: 1}, {CA: "mlx5_1", Port: 2, LinkLayer: "Ethernet"}}
	require.Len(t, DMPorts(cfg, ports), 2)
	cfg.Listeners = cfg.Listeners[2:]
	require.Equal(t, []umad.PortInfo{{CA: "mlx5_1", Port: 1}}, DMPorts(cfg, ports))

	cfg.Listeners = []config.Listener{{Address: "0.0.0.0", Port: 5555}}
	_, err = DMAgentFor(cfg, id)
	require.ErrorContains(t, err, "the configuration has no ib listener")
}
