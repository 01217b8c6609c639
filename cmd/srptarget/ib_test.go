package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// listenIB is the daemon's ib listener seam over the fabric: the target node listens as an
// AF_IB id; its only HCA port is "memfabric/1".
func (e *env) listenIB(hca string, port uint16) (ib.Listener, error) {
	if hca != "" && hca != "memfabric/1" {
		return nil, fmt.Errorf("no RDMA device %s (yet): %w", hca, errNoRDMAKernel)
	}
	return e.node.ListenIB(port)
}

// ibLogin logs id in over native InfiniBand (the 64-byte IB CM login to the AF_IB listener)
// from node, or over RDMA/CM to the address listener when ip is set.
func (e *env) loginFrom(node *memfabric.Node, id iu.PortID, ip bool) (*srptest.Channel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := srptest.Config{
		Addr:            netip.AddrPortFrom(testTargetAddr, 5555),
		Node:            node,
		InitiatorPortID: id,
		TargetPortID:    testPortID,
		LoginForm:       srptest.LoginFormIBCM,
	}
	if ip {
		cfg.LoginForm = srptest.LoginFormRDMACM
	}
	return srptest.Login(ctx, e.fab, cfg)
}

func (e *env) newNode(addr string) *memfabric.Node {
	e.t.Helper()
	n, err := e.fab.NewNode(netip.MustParseAddr(addr))
	require.NoError(e.t, err)
	return n
}

// ibConfig has an address listener and an ib listener on the same port, an ACL by GID (the
// fabric's GID of 198.18.0.7) and one by IP address (198.18.0.8).
const ibConfig = `target:
  id_ext: "0002c90300a34270"
listeners:
  - address: 192.0.2.1
    port: 5555
  - kind: ib
    port: 5555
limits:
  buffer_pool_size: 16MiB
luns:
  - lun: 0
    backstore: memory
    size: 1MiB
acls:
  - sources: ["gid:fe80::ffff:c612:7"]
    luns: [0]
  - sources: ["198.18.0.8", "pkey:8001"]
    luns: [0]
`

// TestIBListener: the daemon serves an ib listener beside an address listener; an AF_IB
// login is admitted by the GID of its source, never by an IP source; a reload without the ib
// listener stops it.
func TestIBListener(t *testing.T) {
	e := newControlEnv(t, ibConfig)
	e.opts.listenIB = e.listenIB
	e.start()
	require.Equal(t, 1, e.count("listening", "address", "ib port 5555"), e.logText())
	require.Eventually(t, func() bool { return e.count("serving SRP logins", "login_form", "IB CM (64 bytes, AF_IB)") == 1 },
		5*time.Second, 10*time.Millisecond, e.logText())

	n7, n8 := e.newNode("198.18.0.7"), e.newNode("198.18.0.8")
	ch, err := e.loginFrom(n7, portID(1), false)
	require.NoError(t, err, e.logText())
	defer ch.Close()
	clearUA(t, ch, 0)
	write10(t, ch, 0, 0, make([]byte, 4096), 512)
	require.Equal(t, 1, e.count("login accepted", "src", "gid fe80::ffff:c612:7 pkey 0xffff", "login_form", "IB CM (64 bytes, AF_IB)"))

	// The same node over IP is not in any ACL: GID sources match only InfiniBand logins.
	_, err = e.loginFrom(n7, portID(2), true)
	requireRefused(t, err)
	// 198.18.0.8 is admitted over IP, not over InfiniBand: its GID is in no ACL.
	_, err = e.loginFrom(n8, portID(4), false)
	requireRefused(t, err)
	require.Equal(t, 1, e.count("login rejected", "src", "gid fe80::ffff:c612:8 pkey 0xffff"))
	require.Contains(t, e.logText(), `(or sources: ["gid:fe80::ffff:c612:8"] instead of initiators)`)
	ip, err := e.loginFrom(n8, portID(3), true)
	require.NoError(t, err)
	require.NoError(t, ip.Close())

	out, errOut, err := e.ctl("status")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "ib port 5555")

	// A reload without the ib listener stops it: an InfiniBand login finds nobody listening.
	e.writeConfig(strings.Replace(ibConfig, "  - kind: ib\n    port: 5555\n", "", 1))
	require.NoError(t, e.reload())
	require.Equal(t, 1, e.count("stopped listening", "address", "ib port 5555"))
	_, err = e.loginFrom(e.newNode("198.18.0.10"), portID(1), false)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, memfabric.RejectInvalidServiceID, rej.CMReason)
	require.NoError(t, e.stop(syscall.SIGTERM))
}

func requireRefused(t *testing.T, err error) {
	t.Helper()
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, iu.LoginRejChannelLimitReached, rej.Reason)
}

// TestIBListenerWaits: an ib listener whose HCA port is not there waits, the address listener
// serves meanwhile, and the status says which listener waits.
func TestIBListenerWaits(t *testing.T) {
	e := newControlEnv(t, strings.Replace(ibConfig, "kind: ib\n    port: 5555\n", "kind: ib\n    port: 5555\n    ib_ports: [mlx5_0/1]\n", 1))
	e.opts.listenIB = e.listenIB
	e.start()
	require.Equal(t, 1, e.count("no RDMA device has the address of this listener yet: it listens when one does (checked when the RDMA devices or the host's addresses change)",
		"address", "ib mlx5_0/1 port 5555"), e.logText())
	e.mustLogin(portID(3), "198.18.0.8", 5555).Close()
	out, errOut, err := e.ctl("status")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "ib mlx5_0/1 port 5555: waiting for an InfiniBand port")
	require.Contains(t, e.d.statusLine(), "waiting for an RDMA device with the address of ib mlx5_0/1 port 5555")
	require.NoError(t, e.stop(syscall.SIGTERM))
}

// ibDevices is a host with an InfiniBand HCA (port 1 InfiniBand, port 2 Ethernet) and a
// soft-RoCE device.
func ibDevices() ([]rdmaDevice, error) {
	return []rdmaDevice{
		{Name: "rxe0", NodeGUID: 0x000000fffe000001, Ports: []rdmaPort{{Num: 1, State: "ACTIVE", LinkLayer: "Ethernet",
			GIDs: []rdmaGID{{Index: 0, GID: netip.MustParseAddr("fe80::200:ff:fe00:1"), Type: "RoCE v2"}}}}},
		{Name: "mlx5_0", NodeGUID: 0x0002c90300a0b0c0, Ports: []rdmaPort{
			{Num: 1, State: "ACTIVE", LinkLayer: "InfiniBand", ActiveMTU: 4096, LID: 3, PKey: 0xffff,
				GIDs: []rdmaGID{{Index: 0, GID: netip.MustParseAddr("fe80::2:c903:a0:b0c1"), Type: "IB"}}},
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
	deps := loginLineDeps{devices: ibDevices, interfaces: func() ([]hostAddr, error) { return nil, nil }}
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
	deps.devices = func() ([]rdmaDevice, error) { d, _ := ibDevices(); return d[:1], nil }
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
	roce := func() ([]rdmaDevice, error) { d, _ := ibDevices(); return d[:1], nil }
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

func TestHCAPortGID(t *testing.T) {
	devs, _ := ibDevices()
	g, err := hcaPortGID(devs, "mlx5_0/1")
	require.NoError(t, err)
	require.Equal(t, netip.MustParseAddr("fe80::2:c903:a0:b0c1"), g)
	_, err = hcaPortGID(devs, "mlx5_0/2")
	require.ErrorContains(t, err, "mlx5_0/2 is an Ethernet port")
	require.False(t, isNoDevice(err), "a RoCE port does not become InfiniBand by waiting")
	_, err = hcaPortGID(devs, "mlx5_0/3")
	require.ErrorContains(t, err, "mlx5_0 has no port 3")
	_, err = hcaPortGID(devs, "mlx5_1/1")
	require.True(t, isNoDevice(err), "a device that is not there yet: the listener waits")
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
