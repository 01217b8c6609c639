//go:build linux && cgo

package verbs

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/ibtest"
	"github.com/srptarget/srptarget/internal/testutil"
)

// suiteFabric runs package ib's conformance suite over the RDMA device of one address: both
// ends in this process, each connection through its own listener.
type suiteFabric struct{ addr netip.Addr }

func (f suiteFabric) Connect(t *testing.T, caps func(ib.DeviceLimits) ib.QPCaps) *ibtest.Pair {
	t.Helper()
	return f.ConnectShared(t, caps, nil)
}

// TargetQueues is the shared-queue maker of the address's device (every connection of the
// suite reaches it).
func (f suiteFabric) TargetQueues(t *testing.T) ib.SharedQueues {
	pd, ok := listen(t, f.addr).PD()
	require.True(t, ok, "listener on %v knows no device", f.addr)
	return pd.(ib.SharedQueues)
}

// ConnectShared implements ibtest.SharedFabric.
func (f suiteFabric) ConnectShared(t *testing.T, caps func(ib.DeviceLimits) ib.QPCaps, share func(*ib.AcceptParams)) *ibtest.Pair {
	t.Helper()
	ln := listen(t, f.addr)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	rt, err := Resolve(ctx, ln.Addr(), ResolveOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	ch := make(chan dialed, 1)
	go func() {
		c, err := rt.Connect(ctx, testutil.Pattern(56, 1),
			ConnectParams{QP: caps(rt.Limits()), RNRRetryCount: 7, ResponderResources: 4})
		ch <- dialed{c: c, err: err}
	}()
	r := next(t, ln)
	ap := ib.AcceptParams{PrivateData: testutil.Pattern(52, 2), QP: caps(r.Limits()),
		RNRRetryCount: 7, ResponderResources: 4, InitiatorDepth: 4}
	tc, ic := ibtest.Establish(t, r, ap, share, func() (ib.Conn, error) {
		d := <-ch
		return d.c, d.err
	})
	// The soft-RoCE deviations the suite knows (see ibtest.Pair), asserted so that a change
	// shows up (kernel 6.1, rdma-core 44 in the VM).
	rxe := strings.HasPrefix(tc.(*Conn).dev.name, "rxe")
	return &ibtest.Pair{
		T: tc, I: ic, TPD: r.PD(), IPD: rt.PD(), Limits: r.Limits(),
		RecvInErrorNotFlushed:     rxe,
		StaleLKeyQPOperationError: rxe,
	}
}

// Memory is a slab: the HCA must not be given Go heap memory.
func (suiteFabric) Memory(t *testing.T, n int) []byte {
	slab, err := ib.NewSlab(n)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, slab.Close()) })
	return slab.Bytes()[:n]
}

// TestConformance runs the suite per address (IPv4, IPv6, IPv6 link-local in the VM).
func TestConformance(t *testing.T) {
	forEachAddr(t, func(t *testing.T, a netip.Addr) {
		ibtest.Run(t, suiteFabric{addr: a})
		ibtest.RunShared(t, suiteFabric{addr: a})
	})
}
