package ibtest

import (
	"net/netip"

	"github.com/srptarget/srptarget/ib"
)

// NopConn is an ib.Conn that takes every post and never completes anything: enough for a test
// that drives a consumer's handling of IUs directly, with no fabric. Tests embed it and
// replace the methods they watch (PostSend to record what goes out, PollCompletions to feed
// completions in). Ready returns ReadyC, nil unless the test sets it.
type NopConn struct {
	ReadyC chan struct{}
}

var _ ib.Conn = (*NopConn)(nil)

func (*NopConn) PostRecv(wrs []ib.RecvWR) (int, error)        { return len(wrs), nil }
func (*NopConn) PostSend(wrs []ib.SendWR) (int, error)        { return len(wrs), nil }
func (*NopConn) PollCompletions([]ib.Completion) (int, error) { return 0, nil }
func (*NopConn) PollEvent() (ib.Event, bool)                  { return 0, false }
func (c *NopConn) Ready() <-chan struct{}                     { return c.ReadyC }
func (*NopConn) Disconnect() error                            { return nil }
func (*NopConn) Close() error                                 { return nil }
func (*NopConn) LocalAddr() netip.AddrPort                    { return netip.AddrPort{} }
func (*NopConn) RemoteAddr() netip.AddrPort                   { return netip.AddrPort{} }
