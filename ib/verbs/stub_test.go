//go:build !(linux && cgo)

package verbs

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

func TestStubNotSupported(t *testing.T) {
	_, err := Listen(netip.MustParseAddrPort("127.0.0.1:5555"), Options{})
	require.ErrorIs(t, err, ib.ErrNotSupported)
	_, err = Resolve(context.Background(), netip.MustParseAddrPort("127.0.0.1:5555"), ResolveOptions{})
	require.ErrorIs(t, err, ib.ErrNotSupported)
	_, err = Devices()
	require.ErrorIs(t, err, ib.ErrNotSupported)
}
