package config

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/ib"
)

func TestParseSource(t *testing.T) {
	gid := netip.MustParseAddr("fe80::2:c903:a0:b0c2")
	other := netip.MustParseAddr("fe80::2:c903:a0:b0c3")
	for _, tc := range []struct {
		in     string
		str    string
		ips    []string    // addresses it matches
		notIPs []string    // addresses it does not match
		ibs    []ib.IBAddr // InfiniBand sources it matches
		notIBs []ib.IBAddr
	}{
		{in: "10.0.0.0/8", str: "10.0.0.0/8", ips: []string{"10.1.2.3"}, notIPs: []string{"11.0.0.1"},
			notIBs: []ib.IBAddr{{GID: netip.MustParseAddr("::ffff:10.0.0.1"), PKey: 0xffff}}},
		// An IPv6 prefix that holds every link-local GID matches no InfiniBand login.
		{in: "fe80::/10", str: "fe80::/10", ips: []string{"fe80::1"}, notIBs: []ib.IBAddr{{GID: gid, PKey: 0xffff}}},
		{in: "gid:fe80::2:c903:a0:b0c2", str: "gid:fe80::2:c903:a0:b0c2",
			notIPs: []string{"fe80::2:c903:a0:b0c2"},
			ibs:    []ib.IBAddr{{GID: gid, PKey: 0xffff}, {GID: gid, PKey: 0x8001}}, notIBs: []ib.IBAddr{{GID: other, PKey: 0xffff}}},
		{in: "gid:fe800000000000000002c90300a0b0c2", str: "gid:fe80::2:c903:a0:b0c2", ibs: []ib.IBAddr{{GID: gid}}},
		{in: "gid:fe80:0000:0000:0000:0002:c903:00a0:b0c2", str: "gid:fe80::2:c903:a0:b0c2", ibs: []ib.IBAddr{{GID: gid}}},
		{in: "gid:fe80::/64", str: "gid:fe80::/64", ibs: []ib.IBAddr{{GID: gid}, {GID: other}},
			notIBs: []ib.IBAddr{{GID: netip.MustParseAddr("fec0::2:c903:a0:b0c2")}}},
		{in: "pkey:8001", str: "pkey:8001", ibs: []ib.IBAddr{{GID: gid, PKey: 0x8001}, {GID: other, PKey: 0x0001}},
			notIBs: []ib.IBAddr{{GID: gid, PKey: 0xffff}, {GID: gid, PKey: 0x8002}}},
		{in: "pkey:0x7fff", str: "pkey:ffff", ibs: []ib.IBAddr{{GID: gid, PKey: 0xffff}, {GID: gid, PKey: 0x7fff}}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			s, err := ParseSource(tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.str, s.String())
			for _, a := range tc.ips {
				require.True(t, s.MatchIP(netip.MustParseAddr(a)), a)
			}
			for _, a := range tc.notIPs {
				require.False(t, s.MatchIP(netip.MustParseAddr(a)), a)
			}
			for _, a := range tc.ibs {
				require.True(t, s.MatchIB(a), "%v", a)
			}
			for _, a := range tc.notIBs {
				require.False(t, s.MatchIB(a), "%v", a)
			}
			require.True(t, s.covers(s))
		})
	}
}

func TestSourceCovered(t *testing.T) {
	for _, tc := range []struct {
		by   []string
		s    string
		want bool
	}{
		{[]string{"gid:fe80::/64"}, "gid:fe80::2:c903:a0:b0c2", true},
		{[]string{"gid:fe80::2:c903:a0:b0c2"}, "gid:fe80::/64", false},
		{[]string{"fe80::/10"}, "gid:fe80::2:c903:a0:b0c2", false},
		{[]string{"gid:fe80::/10"}, "fe80::1", false},
		{[]string{"pkey:ffff"}, "pkey:7fff", true},
		{[]string{"pkey:ffff"}, "pkey:8001", false},
		{[]string{"pkey:ffff"}, "gid:fe80::1", false},
	} {
		require.Equal(t, tc.want, sourceCovered(tc.by, tc.s), "%v covers %s", tc.by, tc.s)
	}
}

func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "gid:fe80::/64", "gid:fe800000000000000002c90300a0b0c2", "pkey:8001", "pkey:", "gid:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := ParseSource(s)
		if err != nil {
			return
		}
		// What parses prints as a source that parses to the same thing.
		back, err := ParseSource(src.String())
		require.NoError(t, err, "%q printed as %q", s, src.String())
		require.Equal(t, src, back)
	})
}
