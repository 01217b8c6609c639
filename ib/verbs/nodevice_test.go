//go:build linux && cgo

package verbs

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

// hasDevice reports whether libibverbs sees an RDMA device.
func hasDevice() bool {
	devs, err := Devices()
	return err == nil && len(devs) > 0
}

// Without RDMA (the build machine's kernel has none) every entry point fails cleanly with
// ErrNoDevice and leaves nothing behind.
func TestNoDevice(t *testing.T) {
	if hasDevice() {
		t.Skip("an RDMA device is present: the behaviour without one cannot be observed here")
	}
	devs, err := Devices()
	if err != nil {
		require.ErrorIs(t, err, ErrNoDevice)
	} else {
		require.Empty(t, devs)
	}
	_, err = Listen(netip.MustParseAddrPort("127.0.0.1:5555"), Options{})
	require.ErrorIs(t, err, ErrNoDevice)
	_, err = Listen(netip.MustParseAddrPort("[::]:0"), Options{})
	require.ErrorIs(t, err, ErrNoDevice)
	_, err = ListenIB(ib.IBAddr{ServiceID: ib.IBServiceID(5555)}, Options{})
	require.ErrorIs(t, err, ErrNoDevice)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Resolve(ctx, netip.MustParseAddrPort("192.0.2.1:5555"), ResolveOptions{})
	require.ErrorIs(t, err, ErrNoDevice)
	// The loop is created again for each attempt and must not be left running.
	loopMu.Lock()
	defer loopMu.Unlock()
	require.Nil(t, curLoop)
}
