package memfabric

import (
	"bytes"
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// portSpacer is the method the SRP target looks for on listeners and requests.
type portSpacer interface{ RDMAPortSpace() uint16 }

// TestPortSpaceIB: a request in the IB port space reaches only the IB listener of the port,
// carries up to 92 bytes of private data (the IB CM REQ's, no CMA header) delivered
// zero-padded to 92, and is answered like any other.
func TestPortSpaceIB(t *testing.T) {
	e := newEnv(t, Options{})
	ibln, err := e.target.ListenPortSpace(PortSpaceIB, targetPort) // same port, other space
	require.NoError(t, err)
	require.Equal(t, e.ln.Addr(), ibln.Addr())
	require.Equal(t, uint16(0x013F), ibln.(portSpacer).RDMAPortSpace())
	require.Equal(t, uint16(0x0106), e.ln.(portSpacer).RDMAPortSpace())

	for _, tc := range []struct {
		name string
		priv []byte
	}{
		{"64-byte SRP_LOGIN_REQ", bytes.Repeat([]byte{0xa5}, 64)},
		{"exactly 92", bytes.Repeat([]byte{0x5a}, MaxIBConnRequestPrivateData)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			cp := srpConnect()
			cp.PortSpace = PortSpaceIB
			ch := make(chan dialResult, 1)
			go func() {
				c, err := e.initiator.Connect(ctx, ibln.Addr(), tc.priv, cp)
				ch <- dialResult{c, err}
			}()
			req, err := ibln.Next(ctx)
			require.NoError(t, err)
			require.Equal(t, padded(tc.priv, 92), req.PrivateData())
			require.Len(t, req.PrivateData(), 92)
			require.Equal(t, uint16(0x013F), req.(portSpacer).RDMAPortSpace())
			tc2, err := req.Accept(srpAccept())
			require.NoError(t, err)
			r := <-ch
			require.NoError(t, r.err)
			requireEvent(t, tc2, ib.EventEstablished)
			requireEvent(t, r.c, ib.EventEstablished)
			require.NoError(t, r.c.Close())
			require.NoError(t, tc2.Close())
		})
	}
	// Nothing reached the TCP listener.
	short, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	_, err = e.ln.Next(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A request in the TCP port space still reaches the TCP listener with 56 bytes.
	ctx, cancel2 := context.WithTimeout(context.Background(), waitLimit)
	defer cancel2()
	ch := e.dialAsync(ctx, []byte("rdma-cm-login"), srpConnect())
	req := e.next(t)
	require.Len(t, req.PrivateData(), ib.MaxConnRequestPrivateData)
	require.Equal(t, uint16(0x0106), req.(portSpacer).RDMAPortSpace())
	require.NoError(t, req.Reject(nil))
	requireRejected(t, (<-ch).err, RejectConsumerDefined)
}

func TestPortSpaceErrors(t *testing.T) {
	e := newEnv(t, Options{}) // TCP listener on targetPort only
	dst := e.ln.Addr()
	for _, tc := range []struct {
		name  string
		ps    PortSpace
		priv  int
		check func(t *testing.T, err error)
	}{
		{"TCP: 57 bytes", PortSpaceTCP, 57, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) }},
		{"zero means TCP: 57 bytes", 0, 57, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) }},
		{"IB: 93 bytes", PortSpaceIB, 93, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) }},
		{"IB: nobody listens in the IB space", PortSpaceIB, 64, func(t *testing.T, err error) { requireRejected(t, err, RejectInvalidServiceID) }},
		{"unknown port space", 0x0111, 8, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrInvalidArgument) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			cp := srpConnect()
			cp.PortSpace = tc.ps
			c, err := e.initiator.Connect(ctx, dst, make([]byte, tc.priv), cp)
			require.Nil(t, c)
			tc.check(t, err)
		})
	}

	_, err := e.target.ListenPortSpace(PortSpaceTCP, targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE)
	_, err = e.target.ListenPortSpace(0x0111, targetPort)
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	ibln, err := e.target.ListenPortSpace(PortSpaceIB, targetPort)
	require.NoError(t, err)
	_, err = e.target.ListenPortSpace(PortSpaceIB, targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE)

	// Closing the IB listener frees its port in the IB space only.
	require.NoError(t, ibln.Close())
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cp := srpConnect()
	cp.PortSpace = PortSpaceIB
	_, err = e.initiator.Connect(ctx, netip.AddrPortFrom(targetAddr, targetPort), make([]byte, 64), cp)
	requireRejected(t, err, RejectInvalidServiceID)
	ibln, err = e.target.ListenPortSpace(PortSpaceIB, targetPort)
	require.NoError(t, err)
	require.NoError(t, ibln.Close())
	_, err = e.target.Listen(targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE, "the TCP listener is still there")

	// Removing the device closes listeners of both spaces.
	ibln, err = e.target.ListenPortSpace(PortSpaceIB, targetPort)
	require.NoError(t, err)
	e.target.Remove()
	for _, l := range []ib.Listener{e.ln, ibln} {
		_, err := l.Next(ctx)
		require.ErrorIs(t, err, ib.ErrDeviceRemoved)
	}
}

func TestPortSpaceString(t *testing.T) {
	require.Equal(t, "RDMA_PS_TCP", PortSpaceTCP.String())
	require.Equal(t, "RDMA_PS_IB", PortSpaceIB.String())
	require.Equal(t, "port space 0x0111", PortSpace(0x0111).String())
}
