package srp_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/srptarget/srptarget/srp/srptest"
)

// sourceAuth admits every IP source and, on AF_IB listeners, the one GID it names. It
// records what it was asked.
type sourceAuth struct {
	m *scsi.LUNMap

	mu  sync.Mutex
	gid netip.Addr
	ips []netip.AddrPort
	ibs []ib.IBAddr
}

func (a *sourceAuth) Authorize(_, _ iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ips = append(a.ips, src)
	if !src.IsValid() {
		return nil, srp.ErrNotAuthorized
	}
	return a.m, nil
}

func (a *sourceAuth) AuthorizeIB(_, _ iu.PortID, src ib.IBAddr) (*scsi.LUNMap, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ibs = append(a.ibs, src)
	if src.GID != a.gid {
		return nil, srp.ErrNotAuthorized
	}
	return a.m, nil
}

func (a *sourceAuth) asked() ([]netip.AddrPort, []ib.IBAddr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]netip.AddrPort(nil), a.ips...), append([]ib.IBAddr(nil), a.ibs...)
}

// TestAuthorizeIBSource: a login through an AF_IB listener is decided on its GID and P_Key
// (srp.IBAuthorizer), at login and again at a reload; IP source rules are never asked about it.
func TestAuthorizeIBSource(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ibErr := h.serveIB()
	a := &sourceAuth{m: h.lunMap}
	h.tgt.SetAuthorizer(a)

	node, err := h.fab.NewNode(netip.MustParseAddr("198.18.7.7"))
	require.NoError(t, err)
	cfg := h.cfg()
	cfg.LoginForm = srptest.LoginFormIBCM
	cfg.Node = node
	_, err = h.loginErr(cfg)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, iu.LoginRejChannelLimitReached, rej.Reason)
	e, ok := h.logged("login rejected")
	require.True(t, ok)
	require.Contains(t, e.ContextMap()["fix"], "(or GID fe80::")

	ips, ibs := a.asked()
	require.Empty(t, ips, "an AF_IB login is not an IP address")
	require.Len(t, ibs, 1)
	gid := ibs[0].GID
	require.True(t, gid.Is6() && gid.IsLinkLocalUnicast(), "%v", gid)
	require.Equal(t, ib.IBAddr{GID: node.GID(), PKey: 0xffff}, ibs[0])

	// Allowed by GID: the channel works. The same initiator node logs in over IP too.
	a.mu.Lock()
	a.gid = gid
	a.mu.Unlock()
	ch, err := h.loginErr(cfg)
	require.NoError(t, err)
	clearUA(t, ch, 0)
	ip := h.login(srptest.Config{Addr: h.addr, TargetPortID: testPortID, Node: node,
		MultiChannel: iu.MultiChanMulti, ChannelIndex: 1})
	ips, _ = a.asked()
	require.Equal(t, []netip.AddrPort{ip.Conn().LocalAddr()}, ips)

	// A reload that no longer names the GID disconnects the AF_IB channel only.
	a2 := &sourceAuth{m: h.lunMap, gid: netip.MustParseAddr("fe80::1")}
	h.tgt.SetAuthorizer(a2)
	select {
	case <-ch.Disconnected():
	case <-time.After(10 * time.Second):
		t.Fatal("the AF_IB channel was not disconnected after its GID was dropped")
	}
	ips, ibs = a2.asked()
	require.Equal(t, []ib.IBAddr{{GID: gid, PKey: 0xffff}}, ibs)
	require.Len(t, ips, 1, "the IP channel is asked by address")
	rsp, err := ip.TestUnitReady(ctxT(t), 0)
	require.NoError(t, err)
	require.NotNil(t, rsp)

	h.close()
	require.ErrorIs(t, <-ibErr, srp.ErrTargetClosed)
}

// TestAuthorizeIBWithoutIBAuthorizer: an Authorizer that knows only IP sources is asked about
// an AF_IB login with the zero address, so that a rule such as ::/0 or fe80::/10 cannot admit
// a GID written in IPv6 notation.
func TestAuthorizeIBWithoutIBAuthorizer(t *testing.T) {
	var asked []netip.AddrPort
	var mu sync.Mutex
	var m *scsi.LUNMap
	h := newHarness(t, harnessOpts{auth: srp.AuthorizerFunc(func(_, _ iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
		mu.Lock()
		asked = append(asked, src)
		mu.Unlock()
		if netip.MustParsePrefix("::/0").Contains(src.Addr()) {
			return m, nil
		}
		return nil, srp.ErrNotAuthorized
	})})
	m = h.lunMap
	ibErr := h.serveIB()
	cfg := h.cfg()
	cfg.LoginForm = srptest.LoginFormIBCM
	_, err := h.loginErr(cfg)
	var rej *srptest.LoginRejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, iu.LoginRejChannelLimitReached, rej.Reason)
	mu.Lock()
	require.Equal(t, []netip.AddrPort{{}}, asked)
	mu.Unlock()
	h.close()
	require.ErrorIs(t, <-ibErr, srp.ErrTargetClosed)
}
