//go:build !(linux && cgo)

package verbs

// This file is the whole package in builds without cgo or outside Linux: rdma-core is a C
// library, so without cgo there is no RDMA. Every entry point fails with ib.ErrNotSupported,
// so that the rest of the daemon (and `go vet ./...`, `go test ./...`) builds and runs
// everywhere; srptarget reports the error when asked to listen.

import (
	"context"
	"net/netip"

	"github.com/srptarget/srptarget/ib"
)

// Listener is an ib.Listener; in this build none can be created.
type Listener struct{}

var _ ib.Listener = (*Listener)(nil)

// Listen fails with ib.ErrNotSupported in builds without cgo.
func Listen(addr netip.AddrPort, opts Options) (*Listener, error) {
	return nil, errorf("listen %v: %w", addr, ib.ErrNotSupported)
}

// ListenIB fails with ib.ErrNotSupported in builds without cgo.
func ListenIB(a ib.IBAddr, opts Options) (*Listener, error) {
	return nil, errorf("listen AF_IB %v: %w", a, ib.ErrNotSupported)
}

func (*Listener) Family() ib.Family                            { return 0 }
func (*Listener) IBAddr() ib.IBAddr                            { return ib.IBAddr{} }
func (*Listener) Next(context.Context) (ib.ConnRequest, error) { return nil, ib.ErrNotSupported }
func (*Listener) Addr() netip.AddrPort                         { return netip.AddrPort{} }
func (*Listener) Close() error                                 { return nil }

// Route is the initiator side before the connection; in this build none can be created.
type Route struct{}

// Resolve fails with ib.ErrNotSupported in builds without cgo.
func Resolve(ctx context.Context, dst netip.AddrPort, opts ResolveOptions) (*Route, error) {
	return nil, errorf("resolve %v: %w", dst, ib.ErrNotSupported)
}

func (*Route) PD() ib.ProtectionDomain    { return nil }
func (*Route) Limits() ib.DeviceLimits    { return ib.DeviceLimits{} }
func (*Route) LocalAddr() netip.AddrPort  { return netip.AddrPort{} }
func (*Route) RemoteAddr() netip.AddrPort { return netip.AddrPort{} }
func (*Route) Close() error               { return nil }
func (*Route) Connect(context.Context, []byte, ConnectParams) (*Conn, error) {
	return nil, ib.ErrNotSupported
}

// Conn is an ib.Conn; in this build none can be created.
type Conn struct{}

var _ ib.Conn = (*Conn)(nil)

func (*Conn) PostRecv([]ib.RecvWR) (int, error)            { return 0, ib.ErrNotSupported }
func (*Conn) PostSend([]ib.SendWR) (int, error)            { return 0, ib.ErrNotSupported }
func (*Conn) PollCompletions([]ib.Completion) (int, error) { return 0, ib.ErrNotSupported }
func (*Conn) PollEvent() (ib.Event, bool)                  { return 0, false }
func (*Conn) ArmNotify(bool) error                         { return ib.ErrNotSupported }
func (*Conn) Ready() <-chan struct{}                       { return nil }
func (*Conn) Disconnect() error                            { return ib.ErrNotSupported }
func (*Conn) Close() error                                 { return nil }
func (*Conn) LocalAddr() netip.AddrPort                    { return netip.AddrPort{} }
func (*Conn) RemoteAddr() netip.AddrPort                   { return netip.AddrPort{} }
func (*Conn) PrivateData() []byte                          { return nil }

// Devices fails with ib.ErrNotSupported in builds without cgo.
func Devices() ([]DeviceInfo, error) {
	return nil, errorf("list devices: %w", ib.ErrNotSupported)
}
