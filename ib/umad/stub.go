//go:build !(linux && cgo)

package umad

import (
	"syscall"
	"time"
)

// Ports fails with ErrNotSupported in builds without cgo.
func Ports() ([]PortInfo, error) { return nil, ErrNotSupported }

// Port is a GSI agent; in this build none can be opened.
type Port struct{}

// Open fails with ErrNotSupported in builds without cgo.
func Open(PortInfo, uint8, uint8, ...uint8) (*Port, error) { return nil, ErrNotSupported }

func (*Port) Info() PortInfo { return PortInfo{} }
func (*Port) Recv([]byte, time.Duration) (Addr, syscall.Errno, error) {
	return Addr{}, 0, ErrNotSupported
}
func (*Port) Send([]byte, Addr, time.Duration, int) error { return ErrNotSupported }
func (*Port) Close() error                                { return nil }
