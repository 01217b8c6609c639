//go:build linux && cgo

package verbs

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// The tests in this file need an RDMA device (the VM harness's soft-RoCE). Soft-RoCE has no
// InfiniBand port, so no AF_IB request can arrive; what is tested is what a target does
// around one: the checks before the bind, the bind, listen and close with the kernel, and the
// kernel's answers to what it refuses.

// anyLinkLayer lets ListenIB bind a wildcard AF_IB id where there is no InfiniBand port.
func anyLinkLayer(t *testing.T) {
	t.Helper()
	old := ibPortCheck
	ibPortCheck = func() error { return nil }
	t.Cleanup(func() { ibPortCheck = old })
}

func testDevices(t *testing.T) []DeviceInfo {
	t.Helper()
	devs, err := Devices()
	if err != nil || len(devs) == 0 {
		t.Skip(noDevice)
	}
	return devs
}

// TestListenIBNoIBPort: on a host whose RDMA ports are all Ethernet (RoCE), a wildcard AF_IB
// listener is refused at once, naming the ports, instead of binding and never receiving.
func TestListenIBNoIBPort(t *testing.T) {
	devs := testDevices(t)
	if checkIBPort(devs, nil) == nil {
		t.Skip("this host has an InfiniBand port")
	}
	start := time.Now()
	_, err := ListenIB(ib.IBAddr{ServiceID: ib.IBServiceID(5555)}, Options{})
	require.ErrorIs(t, err, ErrNoIBPort)
	require.Less(t, time.Since(start), 5*time.Second)
	t.Log(err)
	require.Contains(t, err.Error(), devs[0].Name+" port 1 is Ethernet")
	require.Contains(t, err.Error(), "dest=")
	loopMu.Lock()
	require.Nil(t, curLoop, "nothing left open")
	loopMu.Unlock()
}

// TestListenIB binds and listens AF_IB ids on every port (the check bypassed on soft-RoCE),
// checks the bound address, the port spaces and the errors, and closes them.
func TestListenIB(t *testing.T) {
	testDevices(t)
	anyLinkLayer(t)
	const port = 0x1234
	sid := ib.IBServiceID(port)

	l, err := ListenIB(ib.IBAddr{PKey: 0xffff, ServiceID: sid}, Options{Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	require.Equal(t, ib.FamilyIB, l.Family())
	require.Equal(t, netip.AddrPortFrom(netip.IPv6Unspecified(), port), l.Addr())
	require.Equal(t, sid, l.IBAddr().ServiceID, "the kernel reports the service ID it bound")
	require.True(t, l.IBAddr().GID.IsUnspecified())
	_, ok := l.PD()
	require.False(t, ok, "a wildcard AF_IB listener is on no device")
	t.Log(l)

	// The same service ID again: taken (cma_check_port answers EADDRNOTAVAIL when a bind on
	// every port is involved).
	_, err = ListenIB(ib.IBAddr{ServiceID: sid}, Options{})
	t.Log(err)
	require.ErrorIs(t, err, unix.EADDRNOTAVAIL)
	require.NotErrorIs(t, err, ErrNoDevice)
	require.Contains(t, err.Error(), "is bound already")
	// The same port number on an IP address is another port space (0x0106PPPP): free.
	ipl, err := Listen(netip.AddrPortFrom(netip.IPv6Unspecified(), port), Options{})
	require.NoError(t, err)
	require.NoError(t, ipl.Close())

	// No request comes; Next waits for its context and for Close.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = l.Next(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	nextErr := make(chan error, 1)
	go func() {
		_, err := l.Next(context.Background())
		nextErr <- err
	}()
	require.NoError(t, l.Close())
	require.ErrorIs(t, <-nextErr, ib.ErrClosed)
	require.NoError(t, l.Close(), "a second Close does nothing")

	// Closed, the service ID is free again; port 0 picks one in the IB port space.
	l2, err := ListenIB(ib.IBAddr{ServiceID: sid}, Options{})
	require.NoError(t, err)
	require.NoError(t, l2.Close())
	l2, err = ListenIB(ib.IBAddr{ServiceID: ib.IBServiceID(0)}, Options{})
	require.NoError(t, err)
	p, ok := ib.IBServicePort(l2.IBAddr().ServiceID)
	require.True(t, ok, "%#x", l2.IBAddr().ServiceID)
	require.NotZero(t, p)
	require.Equal(t, p, l2.Addr().Port())
	require.NoError(t, l2.Close())

	loopMu.Lock()
	require.Nil(t, curLoop, "the RDMA/CM loop is gone with the last id")
	loopMu.Unlock()
}

// TestListenIBErrors: what the kernel and ListenIB refuse, each with an error that says why.
func TestListenIBErrors(t *testing.T) {
	devs := testDevices(t)
	anyLinkLayer(t)

	// A service ID outside the IB port space: refused before the kernel is asked...
	_, err := ListenIB(ib.IBAddr{ServiceID: 0x0002c90300a0b0c1}, Options{})
	require.ErrorIs(t, err, ErrServiceID)
	require.Contains(t, err.Error(), "0x00000000013fPPPP")
	// ...and by the kernel itself (cma_select_ib_ps), which the same error names.
	sa, err := encodeSockaddrIB(ib.IBAddr{ServiceID: 0x0002c90300a0b0c1})
	require.NoError(t, err)
	_, err = listenOn(sa, ib.FamilyIB, psIB, "AF_IB node GUID", "", Options{})
	t.Log(err)
	require.ErrorIs(t, err, ErrServiceID)
	require.ErrorIs(t, err, unix.EPROTONOSUPPORT)

	// A GID that is on no InfiniBand port: every GID of a RoCE port.
	var roce netip.Addr
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer == LinkLayerEthernet && len(p.GIDs) > 0 {
				roce = p.GIDs[0].GID
			}
		}
	}
	if !roce.IsValid() {
		t.Skip("no RoCE GID to try")
	}
	_, err = ListenIB(ib.IBAddr{GID: roce, ServiceID: ib.IBServiceID(5555)}, Options{})
	t.Log(err)
	require.ErrorIs(t, err, ErrNoDevice)
	require.Contains(t, err.Error(), "no InfiniBand port has this GID")
	var errno unix.Errno
	require.True(t, errors.As(err, &errno))

	loopMu.Lock()
	require.Nil(t, curLoop)
	loopMu.Unlock()
}
