package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/daemon"
)

// ibDevices is a host with an InfiniBand HCA (port 1 InfiniBand, port 2 Ethernet) and a
// soft-RoCE device.
func ibDevices() ([]daemon.Device, error) {
	return []daemon.Device{
		{Name: "rxe0", NodeGUID: 0x000000fffe000001, Ports: []daemon.Port{{Num: 1, State: "ACTIVE", LinkLayer: "Ethernet",
			GIDs: []daemon.GID{{Index: 0, GID: netip.MustParseAddr("fe80::200:ff:fe00:1"), Type: "RoCE v2"}}}}},
		{Name: "mlx5_0", NodeGUID: 0x0002c90300a0b0c0, Ports: []daemon.Port{
			{Num: 1, State: "ACTIVE", LinkLayer: "InfiniBand", ActiveMTU: 4096, LID: 3, PKey: 0xffff,
				GIDs: []daemon.GID{{Index: 0, GID: netip.MustParseAddr("fe80::2:c903:a0:b0c1"), Type: "IB"}}},
			{Num: 2, State: "ACTIVE", LinkLayer: "Ethernet"},
		}},
	}, nil
}

const ibLoginLineConfig = `target:
  id_ext: "0002c90300a0b0c1"
  ports:
    - {id_ext: "0002c90300a0b0c9", relative_port_id: 2}
listeners:
  - {address: 192.168.1.10, port: 5555}
  - {kind: ib, port: 5555}
  - {kind: ib, port: 5600, ib_ports: [mlx5_0/1, mlx5_0/2]}
`

// TestLoginLineIB: per InfiniBand port, the line srp_daemon writes, in its field order
// (srp_daemon.c: id_ext, ioc_guid, dgid, pkey, service_id), beside the dest= line.
func TestLoginLineIB(t *testing.T) {
	file := writeFile(t, "l.yaml", ibLoginLineConfig)
	deps := loginLineDeps{devices: ibDevices, interfaces: func() ([]daemon.HostAddr, error) { return nil, nil }}
	out, _, err := run(t, deps, "login-line", "--config", file)
	require.NoError(t, err)
	const sys = `" > /sys/class/infiniband_srp/srp-<dev>-<port>/add_target`
	require.Contains(t, out, `echo "id_ext=0002c90300a0b0c1,ioc_guid=0002c90300a0b0c1,dest=192.168.1.10:5555`+sys+"\n")
	ibPart := out[strings.Index(out, "# Native InfiniBand"):]
	require.Equal(t, `# Native InfiniBand (ib listeners): the line srp_daemon would write, in its order. srp_daemon
# itself cannot find this target (it asks only ports whose IsDeviceManagementSupported bit is
# set, which only kernel code can set): write the line by hand, from an initiator port on the
# same subnet.
# ib listener, port 5555: mlx5_0/1, ACTIVE, LID 3
echo "id_ext=0002c90300a0b0c1,ioc_guid=0002c90300a0b0c1,dgid=fe800000000000000002c90300a0b0c1,pkey=ffff,service_id=00000000013f15b3`+sys+`
# ib listener, port 5600: mlx5_0/1, ACTIVE, LID 3
echo "id_ext=0002c90300a0b0c1,ioc_guid=0002c90300a0b0c1,dgid=fe800000000000000002c90300a0b0c1,pkey=ffff,service_id=00000000013f15e0`+sys+`
# Target port id_ext=0002c90300a0b0c9 ioc_guid=0002c90300a0b0c1 (relative port 2) over InfiniBand:
echo "id_ext=0002c90300a0b0c9,ioc_guid=0002c90300a0b0c1,dgid=fe800000000000000002c90300a0b0c1,pkey=ffff,service_id=00000000013f15b3`+sys+`
echo "id_ext=0002c90300a0b0c9,ioc_guid=0002c90300a0b0c1,dgid=fe800000000000000002c90300a0b0c1,pkey=ffff,service_id=00000000013f15e0`+sys+`
`, ibPart)

	// Without an InfiniBand port: a placeholder for the GID and why.
	deps.devices = func() ([]daemon.Device, error) { d, _ := ibDevices(); return d[:1], nil }
	out, _, err = run(t, deps, "login-line", "--config", file)
	require.NoError(t, err)
	require.Contains(t, out, "# ib listener, port 5555: this host has no InfiniBand port: replace <gid> with the GID 0 of the target's InfiniBand port")
	require.Contains(t, out, "# ib listener, port 5600: none of mlx5_0/1, mlx5_0/2 is an InfiniBand port of this host")
	require.Contains(t, out, `dgid=<gid>,pkey=ffff,service_id=00000000013f15b3`)
}

// TestValidateWarnsNoIBPort: validate says when an ib listener has no InfiniBand port to bind.
func TestValidateWarnsNoIBPort(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, "v.yaml", `state_dir: `+dir+`
listeners:
  - {kind: ib, port: 5555}
  - {kind: ib, port: 5556, ib_ports: [mlx5_0/2, mlx5_1/1]}
luns: [{lun: 0, backstore: null, size: 1GiB}]
acls: [{initiators: ["*"], luns: [0]}]
`)
	roce := func() ([]daemon.Device, error) { d, _ := ibDevices(); return d[:1], nil }
	out, _, err := run(t, loginLineDeps{devices: roce}, "validate", "--config", file)
	require.NoError(t, err)
	require.Contains(t, out, "warning: listeners[0] (ib, port 5555): no InfiniBand port to bind: this host has rxe0/1 Ethernet; it would wait for one")
	require.Contains(t, out, "warning: listeners[1] (ib, port 5556): mlx5_0/2 is not an HCA port of this host")

	out, _, err = run(t, loginLineDeps{devices: ibDevices}, "validate", "--config", file)
	require.NoError(t, err)
	require.NotContains(t, out, "listeners[0]")
	require.Contains(t, out, "warning: listeners[1] (ib, port 5556): mlx5_0/2 is Ethernet, not InfiniBand: the listener would fail there")
	require.Contains(t, out, "warning: listeners[1] (ib, port 5556): mlx5_1/1 is not an HCA port of this host")

	out, _, err = run(t, noDeps, "validate", "--config", file)
	require.NoError(t, err)
	require.Contains(t, out, "warning: ib listeners: the RDMA devices could not be listed")
}

// TestACLCheckIB: acl-check answers for a login through an ib listener (--source gid:...).
func TestACLCheckIB(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, "a.yaml", `state_dir: `+dir+`
listeners: [{kind: ib, port: 5555}]
luns: [{lun: 0, backstore: null, size: 1GiB}, {lun: 1, backstore: null, size: 1GiB}]
acls:
  - {sources: ["gid:fe80::/64"], luns: [0]}
  - {sources: ["pkey:8002", "fe80::1"], luns: [1]}
`)
	const ini = "0x00000000000000000002c90300a0b0c2"
	out, errOut, err := run(t, noDeps, "acl-check", "--config", file, "--initiator", ini, "--source", "gid:fe80::2:c903:a0:b0c2")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "acls[0]")
	out, errOut, err = run(t, noDeps, "acl-check", "--config", file, "--initiator", ini, "--source", "gid:fec0::1,pkey:0002")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "acls[1]")
	// fe80::1 as an IP address is in acls[1]; as a GID it is in acls[0]'s prefix only.
	out, _, _ = run(t, noDeps, "acl-check", "--config", file, "--initiator", ini, "--source", "fe80::1")
	require.Contains(t, out, "acls[1]")
	_, errOut, err = run(t, noDeps, "acl-check", "--config", file, "--initiator", ini, "--source", "gid:10.0.0.1")
	require.Error(t, err)
	require.Contains(t, errOut, "want gid:GID or gid:GID,pkey:HEX")
}
