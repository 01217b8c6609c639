package daemon

import (
	"net/netip"
	"testing"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
	"github.com/stretchr/testify/require"
)

func TestACLAuthorizerFirstMatchWins(t *testing.T) {
	cfg, err := config.Parse("a.yaml", []byte(`listeners: [{address: 0.0.0.0, port: 1}]
luns:
  - {lun: 0, backstore: null, size: 1MiB}
  - {lun: 1, backstore: null, size: 1MiB}
acls:
  - initiators: ["0x00000000000000000000000000000001"]
    luns: [0]
  - sources: ["10.0.0.0/8", "fd00::/8"]
    initiators: ["0x0000000000000000000000000000000?"]
    luns: [1]
    read_only: true
  - initiators: ["*"]
    sources: ["192.0.2.0/24"]
    luns: [0, 1]
`))
	require.NoError(t, err)
	d := newDaemon(daemonOptions{})
	p := &plan{cfg: cfg, luns: map[int]*lunState{}, opened: map[storeKey]*sharedStore{}}
	for i := range cfg.LUNs {
		require.Nil(t, d.planLUN(p, i))
	}
	luns := p.luns
	a, cerr := buildAuthorizer(cfg, luns)
	require.Nil(t, cerr)
	ip := func(s string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(s), 1) }
	tests := []struct {
		id   iu.PortID
		src  netip.AddrPort
		want int
	}{
		{daemontest.PortID(1), ip("10.1.2.3"), 0},           // first ACL by initiator, though the second matches too
		{daemontest.PortID(2), ip("172.16.0.1"), 1},         // second ACL by initiator pattern
		{daemontest.PortID(0x20), ip("10.1.2.3"), 1},        // second ACL by source
		{daemontest.PortID(0x20), ip("::ffff:10.1.2.3"), 1}, // an IPv4-mapped source is its IPv4 address
		{daemontest.PortID(0x20), ip("fd00::1%eth0"), 1},    // the zone does not matter
		{daemontest.PortID(0x20), ip("172.16.0.1"), 2},      // "*"
		{daemontest.PortID(0x20), netip.AddrPort{}, 2},      // no source address
		{iu.PortID{0xff}, ip("198.51.100.1"), 2},            // "*" again
	}
	for _, tc := range tests {
		m, err := a.Authorize(tc.id, daemontest.TargetPortID, tc.src)
		require.NoError(t, err)
		require.Same(t, a.acls[tc.want].lunMap, m, "%v from %v", tc.id, tc.src)
	}
	require.Len(t, a.acls[1].lunMap.Mappings(), 1)
	require.True(t, a.acls[1].lunMap.Mappings()[0].ReadOnly)

	none := &aclAuthorizer{luns: []int{0, 1}}
	_, err = none.Authorize(daemontest.PortID(7), daemontest.TargetPortID, ip("203.0.113.1"))
	var re *srp.LoginRefusedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, iu.LoginRejChannelLimitReached, re.Reason)
	require.Equal(t, `initiator 0x00000000000000000000000000000007 from 203.0.113.1 is refused: the configuration has no ACLs; `+
		`to let it in, add to acls: {initiators: ["0x00000000000000000000000000000007"], luns: [0, 1]} (or sources: ["203.0.113.1"] instead of initiators)`, re.Detail)

	for _, st := range luns {
		require.NoError(t, st.lu.Close())
	}
	d.closers.Wait()
}
