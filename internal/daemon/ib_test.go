package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
	"github.com/stretchr/testify/require"
)

// listenIB is the daemon's ib listener seam over the fabric: the target node listens as an
// AF_IB id; its only HCA port is "memfabric/1".
func (e *env) listenIB(hca string, port uint16) (ib.Listener, error) {
	if hca != "" && hca != "memfabric/1" {
		return nil, fmt.Errorf("no RDMA device %s (yet): %w", hca, errNoRDMAKernel)
	}
	return e.Node.ListenIB(port)
}

// ibLogin logs id in over native InfiniBand (the 64-byte IB CM login to the AF_IB listener)
// from node, or over RDMA/CM to the address listener when ip is set.
func (e *env) loginFrom(node *memfabric.Node, id iu.PortID, ip bool) (*srptest.Channel, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := srptest.Config{
		Addr:            netip.AddrPortFrom(daemontest.TargetAddr, 5555),
		Node:            node,
		InitiatorPortID: id,
		TargetPortID:    daemontest.TargetPortID,
		LoginForm:       srptest.LoginFormIBCM,
	}
	if ip {
		cfg.LoginForm = srptest.LoginFormRDMACM
	}
	return srptest.Login(ctx, e.Fab, cfg)
}

func (e *env) newNode(addr string) *memfabric.Node {
	e.T.Helper()
	n, err := e.Fab.NewNode(netip.MustParseAddr(addr))
	require.NoError(e.T, err)
	return n
}

// TestIBListener: the daemon serves an ib listener beside an address listener; an AF_IB
// login is admitted by the GID of its source, never by an IP source; a reload without the ib
// listener stops it.
func TestIBListener(t *testing.T) {
	e := newControlEnv(t, ibConfig)
	e.opts.listenIB = e.listenIB
	e.start()
	require.Equal(t, 1, e.Count("listening", "address", "ib port 5555"), e.LogText())
	require.Eventually(t, func() bool { return e.Count("serving SRP logins", "login_form", "IB CM (64 bytes, AF_IB)") == 1 },
		5*time.Second, 10*time.Millisecond, e.LogText())

	n7, n8 := e.newNode("198.18.0.7"), e.newNode("198.18.0.8")
	ch, err := e.loginFrom(n7, daemontest.PortID(1), false)
	require.NoError(t, err, e.LogText())
	defer ch.Close()
	daemontest.ClearUA(t, ch, 0)
	daemontest.Write10(t, ch, 0, 0, make([]byte, 4096), 512)
	// The login goroutine logs the acceptance after the channel starts: the initiator can be
	// done with a command before the line is written.
	require.Eventually(t, func() bool {
		return e.Count("login accepted", "src", "gid fe80::ffff:c612:7 pkey 0xffff", "login_form", "IB CM (64 bytes, AF_IB)") == 1
	}, 5*time.Second, 10*time.Millisecond, e.LogText())
	var ss []control.SessionInfo
	e.ctlJSON(&ss, "sessions")
	require.Len(t, ss, 1)
	require.Equal(t, []string{"gid:fe80::ffff:c612:7"}, ss[0].Sources, "the source as an ACL names it")
	require.Len(t, ss[0].Channels, 1)
	require.Equal(t, "gid fe80::ffff:c612:7 pkey 0xffff", ss[0].Channels[0].Source)

	// The same node over IP is not in any ACL: GID sources match only InfiniBand logins.
	_, err = e.loginFrom(n7, daemontest.PortID(2), true)
	requireRefused(t, err)
	// 198.18.0.8 is admitted over IP, not over InfiniBand: its GID is in no ACL.
	_, err = e.loginFrom(n8, daemontest.PortID(4), false)
	requireRefused(t, err)
	require.Equal(t, 1, e.Count("login rejected", "src", "gid fe80::ffff:c612:8 pkey 0xffff"))
	require.Contains(t, e.LogText(), `(or sources: ["gid:fe80::ffff:c612:8"] instead of initiators)`)
	ip, err := e.loginFrom(n8, daemontest.PortID(3), true)
	require.NoError(t, err)
	require.NoError(t, ip.Close())

	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Contains(t, st.Listeners, control.ListenerInfo{Address: "ib port 5555", State: "listening"})

	// A reload without the ib listener stops it: an InfiniBand login finds nobody listening.
	e.WriteConfig(strings.Replace(ibConfig, "  - kind: ib\n    port: 5555\n", "", 1))
	require.NoError(t, e.Reload())
	require.Equal(t, 1, e.Count("stopped listening", "address", "ib port 5555"))
	_, err = e.loginFrom(e.newNode("198.18.0.10"), daemontest.PortID(1), false)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, memfabric.RejectInvalidServiceID, rej.CMReason)
	require.NoError(t, e.Stop(syscall.SIGTERM))
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
	require.Equal(t, 1, e.Count("no RDMA device has the address of this listener yet: it listens when one does (checked when the RDMA devices or the host's addresses change)",
		"address", "ib mlx5_0/1 port 5555"), e.LogText())
	e.MustLogin(daemontest.PortID(3), "198.18.0.8", 5555).Close()
	var st control.StatusInfo
	e.ctlJSON(&st, "status")
	require.Contains(t, st.Listeners, control.ListenerInfo{Address: "ib mlx5_0/1 port 5555", State: listenerWaitingIB})
	require.Contains(t, e.d.statusLine(), "waiting for an RDMA device with the address of ib mlx5_0/1 port 5555")
	require.NoError(t, e.Stop(syscall.SIGTERM))
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

// ibConfig has an address listener and an ib listener on the same port, an ACL by GID (the
// fabric's GID of 198.18.0.7) and one by IP address (198.18.0.8).
const ibConfig = `target:
  id_ext: "0002c90300a34270"
listeners:
  - address: 192.0.2.1
    port: 5555
  - kind: ib
    port: 5555
` + poolAndMemoryLUN0 + `acls:
  - sources: ["gid:fe80::ffff:c612:7"]
    luns: [0]
  - sources: ["198.18.0.8", "pkey:8001"]
    luns: [0]
`

// ibDevices is a host with an InfiniBand HCA (port 1 InfiniBand, port 2 Ethernet) and a
// soft-RoCE device.
func ibDevices() ([]Device, error) {
	return []Device{
		{Name: "rxe0", NodeGUID: 0x000000fffe000001, Ports: []Port{{Num: 1, State: "ACTIVE", LinkLayer: "Ethernet",
			GIDs: []GID{{Index: 0, GID: netip.MustParseAddr("fe80::200:ff:fe00:1"), Type: "RoCE v2"}}}}},
		{Name: "mlx5_0", NodeGUID: 0x0002c90300a0b0c0, Ports: []Port{
			{Num: 1, State: "ACTIVE", LinkLayer: "InfiniBand", ActiveMTU: 4096, LID: 3, PKey: 0xffff,
				GIDs: []GID{{Index: 0, GID: netip.MustParseAddr("fe80::2:c903:a0:b0c1"), Type: "IB"}}},
			{Num: 2, State: "ACTIVE", LinkLayer: "Ethernet"},
		}},
	}, nil
}
