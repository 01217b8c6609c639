package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseSourcePrefixMapped: a source written in IPv4-mapped IPv6 form names the IPv4 hosts,
// since Authorize unmaps the login's address (FuzzACLSources of cmd/srptarget found that it matched nothing).
func TestParseSourcePrefixMapped(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:0:0/96", "0.0.0.0/0"},
		{"::ffff:0:0/95", "::fffe:0:0/95"}, // wider than the mapped range: stays IPv6
		{"::/0", "::/0"},
		{"fe80::1%eth0", "fe80::1/128"},
		{"10.1.2.3/8", "10.0.0.0/8"},
	} {
		p, err := ParseSourcePrefix(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, p.String(), tc.in)
	}
}
