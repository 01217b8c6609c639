package memfabric

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// TestFamilies: what a listener receives follows the families of sender and listener, as
// Linux's RDMA CM delivers it, whatever the port space; the addresses of an AF_IB listener's
// requests are GIDs.
func TestFamilies(t *testing.T) {
	login := bytes.Repeat([]byte{0xa5}, 56)
	ibLogin := bytes.Repeat([]byte{0x5a}, 64)
	// The CMA header of a request from 192.0.2.2, ephemeral port 40000 (0x9c40), to 192.0.2.1:
	// struct cma_hdr, IPv4 addresses in the last 4 bytes of each 16-byte union.
	cmaHdr, err := hex.DecodeString("00409c40" +
		"000000000000000000000000c0000202" +
		"000000000000000000000000c0000201")
	require.NoError(t, err)

	for _, tc := range []struct {
		name     string
		lfam     ib.Family
		ps       PortSpace
		sfam     ib.Family
		priv     []byte
		want     []byte // nil: rejected by the CM with reason 28, nothing delivered
		wantAddr bool   // GIDs and ib.IBAddresser
	}{
		{"IP sender, IP listener in the TCP space", ib.FamilyIP, PortSpaceTCP, ib.FamilyIP, login, login, false},
		{"IP sender, IP listener in the IB space", ib.FamilyIP, PortSpaceIB, ib.FamilyIP, login, login, false},
		{"IB sender, AF_IB listener", ib.FamilyIB, PortSpaceIB, ib.FamilyIB, ibLogin, append(bytes.Clone(ibLogin), make([]byte, 28)...), true},
		{"IB sender, 92 bytes", ib.FamilyIB, PortSpaceIB, ib.FamilyIB, bytes.Repeat([]byte{1}, 92), bytes.Repeat([]byte{1}, 92), true},
		{"IP sender, AF_IB listener: the CMA header stays", ib.FamilyIB, PortSpaceIB, ib.FamilyIP, login, append(bytes.Clone(cmaHdr), login...), true},
		{"IB sender, IP listener: rejected", ib.FamilyIP, PortSpaceIB, ib.FamilyIB, ibLogin, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Options{})
			defer f.Close()
			tn, err := f.NewNode(targetAddr)
			require.NoError(t, err)
			in, err := f.NewNode(initiatorAddr)
			require.NoError(t, err)
			var ln ib.Listener
			if tc.lfam == ib.FamilyIB {
				ln, err = tn.ListenIB(targetPort)
			} else {
				ln, err = tn.ListenPortSpace(tc.ps, targetPort)
			}
			require.NoError(t, err)
			require.Equal(t, tc.lfam, ln.(ib.FamilyListener).Family())

			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			cp := srpConnect()
			cp.Family, cp.PortSpace = tc.sfam, tc.ps
			ch := make(chan dialResult, 1)
			go func() {
				c, err := in.Connect(ctx, netip.AddrPortFrom(targetAddr, targetPort), tc.priv, cp)
				ch <- dialResult{c, err}
			}()
			if tc.want == nil {
				r := <-ch
				requireRejected(t, r.err, RejectConsumerDefined)
				var rej *RejectedError
				require.ErrorAs(t, r.err, &rej)
				require.Nil(t, rej.PrivateData)
				short, cancel := context.WithTimeout(context.Background(), 0)
				defer cancel()
				_, err := ln.Next(short)
				require.ErrorIs(t, err, context.DeadlineExceeded, "the listener saw nothing")
				return
			}
			req, err := ln.Next(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.want, req.PrivateData())
			ia, ok := req.(ib.IBAddresser)
			require.Equal(t, tc.wantAddr, ok)
			if tc.wantAddr {
				require.Equal(t, ib.IBAddr{GID: in.GID(), PKey: 0xffff}, ia.RemoteIB())
				require.Equal(t, ib.IBAddr{GID: tn.GID(), PKey: 0xffff, ServiceID: 0x13f15b3}, ia.LocalIB())
				require.Equal(t, netip.AddrPortFrom(in.GID(), 0), req.RemoteAddr())
				require.Equal(t, netip.AddrPortFrom(tn.GID(), targetPort), req.LocalAddr())
				require.Equal(t, req.LocalAddr(), ln.Addr())
			} else {
				require.Equal(t, initiatorAddr, req.RemoteAddr().Addr())
			}
			tc2, err := req.Accept(srpAccept())
			require.NoError(t, err)
			r := <-ch
			require.NoError(t, r.err)
			requireEvent(t, tc2, ib.EventEstablished)
			requireEvent(t, r.c, ib.EventEstablished)
			require.Equal(t, req.RemoteAddr(), tc2.RemoteAddr())
			require.NoError(t, r.c.Close())
			require.NoError(t, tc2.Close())
		})
	}
}

// TestConnectIBToGID: an IB sender names the target by its GID, as ib_srp's dgid= does, and
// the P_Key it gives is the one the listener sees.
func TestConnectIBToGID(t *testing.T) {
	e := newEnv(t, Options{})
	require.Equal(t, netip.MustParseAddr("fe80::ffff:c000:201"), e.target.GID())
	ln, err := e.target.ListenIB(targetPort)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cp := srpConnect()
	cp.Family, cp.PKey = ib.FamilyIB, 0x8001
	ch := make(chan dialResult, 1)
	go func() {
		c, err := e.initiator.Connect(ctx, netip.AddrPortFrom(e.target.GID(), targetPort), []byte{0}, cp)
		ch <- dialResult{c, err}
	}()
	req, err := ln.Next(ctx)
	require.NoError(t, err)
	require.Equal(t, uint16(0x8001), req.(ib.IBAddresser).RemoteIB().PKey)
	require.NoError(t, req.Reject([]byte("no")))
	requireRejected(t, (<-ch).err, RejectConsumerDefined)
}

func TestFamilyErrors(t *testing.T) {
	e := newEnv(t, Options{}) // TCP listener on targetPort only
	dst := e.ln.Addr()
	for _, tc := range []struct {
		name  string
		fam   ib.Family
		ps    PortSpace
		priv  int
		check func(t *testing.T, err error)
	}{
		{"IP: 57 bytes", ib.FamilyIP, PortSpaceTCP, 57, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) }},
		{"zero means IP: 57 bytes", 0, 0, 57, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) }},
		{"IP in the IB space: 57 bytes", ib.FamilyIP, PortSpaceIB, 57, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) }},
		{"IB: 93 bytes", ib.FamilyIB, 0, 93, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrPrivateDataTooLong) }},
		{"IB: nobody listens in the IB space", ib.FamilyIB, 0, 64, func(t *testing.T, err error) { requireRejected(t, err, RejectInvalidServiceID) }},
		{"unknown port space", ib.FamilyIP, 0x0111, 8, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrInvalidArgument) }},
		{"unknown family", 9, 0, 8, func(t *testing.T, err error) { require.ErrorIs(t, err, ib.ErrInvalidArgument) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			cp := srpConnect()
			cp.Family, cp.PortSpace = tc.fam, tc.ps
			c, err := e.initiator.Connect(ctx, dst, make([]byte, tc.priv), cp)
			require.Nil(t, c)
			tc.check(t, err)
		})
	}

	_, err := e.target.ListenPortSpace(PortSpaceTCP, targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE)
	_, err = e.target.ListenPortSpace(0x0111, targetPort)
	require.ErrorIs(t, err, ib.ErrInvalidArgument)
	ibln, err := e.target.ListenIB(targetPort)
	require.NoError(t, err)
	_, err = e.target.ListenIB(targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE)
	_, err = e.target.ListenPortSpace(PortSpaceIB, targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE, "one listener per port of the IB space")

	// Closing the IB listener frees its port in the IB space only.
	require.NoError(t, ibln.Close())
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cp := srpConnect()
	cp.Family = ib.FamilyIB
	_, err = e.initiator.Connect(ctx, netip.AddrPortFrom(targetAddr, targetPort), make([]byte, 64), cp)
	requireRejected(t, err, RejectInvalidServiceID)
	ibln, err = e.target.ListenIB(targetPort)
	require.NoError(t, err)
	require.NoError(t, ibln.Close())
	_, err = e.target.Listen(targetPort)
	require.ErrorIs(t, err, unix.EADDRINUSE, "the TCP listener is still there")

	// Removing the device closes listeners of both families.
	ibln, err = e.target.ListenIB(targetPort)
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
	require.Equal(t, "AF_IB", ib.FamilyIB.String())
	require.Equal(t, "IP", ib.FamilyIP.String())
}
