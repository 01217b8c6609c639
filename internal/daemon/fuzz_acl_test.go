package daemon

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// refMatch is the initiator pattern syntax of configs/README.md written out plainly, as a
// reference for MatchInitiator: case does not matter, a leading 0x on either side is dropped,
// '*' stands for any run of characters, '?' for exactly one, and every other character for
// itself. It works on bytes, which is enough for the ASCII that config.CheckInitiatorPattern allows.
func refMatch(pattern, id string) bool {
	p := strings.TrimPrefix(strings.ToLower(pattern), "0x")
	s := strings.TrimPrefix(strings.ToLower(id), "0x")
	// m[j] reports whether the pattern so far matches s[:j].
	m := make([]bool, len(s)+1)
	m[0] = true
	for i := 0; i < len(p); i++ {
		next := make([]bool, len(s)+1)
		for j := 0; j <= len(s); j++ {
			switch p[i] {
			case '*':
				next[j] = m[j] || (j > 0 && next[j-1])
			case '?':
				next[j] = j > 0 && m[j-1]
			default:
				next[j] = j > 0 && m[j-1] && s[j-1] == p[i]
			}
		}
		m = next
	}
	return m[len(s)]
}

// refContains is netip.Prefix.Contains written out bit by bit, as a reference: the address is
// of the prefix's family and its first Bits bits are the prefix's.
func refContains(p netip.Prefix, a netip.Addr) bool {
	if p.Addr().BitLen() != a.BitLen() {
		return false
	}
	var pb, ab []byte
	if a.Is4() {
		p4, a4 := p.Addr().As4(), a.As4()
		pb, ab = p4[:], a4[:]
	} else {
		p16, a16 := p.Addr().As16(), a.As16()
		pb, ab = p16[:], a16[:]
	}
	for i := 0; i < p.Bits(); i++ {
		bit := byte(0x80) >> (i % 8)
		if pb[i/8]&bit != ab[i/8]&bit {
			return false
		}
	}
	return true
}

// oneACL is an authorizer with a single ACL, and the LUN map it grants.
func oneACL(t *testing.T, initiators []string, sources []config.Source) (*aclAuthorizer, *scsi.LUNMap) {
	t.Helper()
	m, err := scsi.NewLUNMap(nil)
	require.NoError(t, err)
	return &aclAuthorizer{acls: []*aclEntry{{initiators: initiators, sources: sources, lunMap: m}}, luns: []int{0}}, m
}

// FuzzMatchInitiator feeds initiator patterns and port ids to MatchInitiator and to the ACL
// authorizer. Whatever the input, nothing panics. For a port id as the target formats it:
// the id matches itself (in upper case, and without 0x, too), "*" and "0x*" match it, the
// pattern made from it by turning the digits of wild into '?' and cutting it at cut with a
// '*' matches it, and every pattern the configuration accepts matches exactly when refMatch
// says so, through Authorize as well.
func FuzzMatchInitiator(f *testing.F) {
	f.Add("*", []byte("\x4e\x49\xc9\xff\xff\x0a\x0b\x0c\x00\x02\xc9\x03\x00\xa0\xb0\xc1"), uint32(0), uint8(40))
	f.Add("0x4E49C9FFFF0A0B0C*", []byte("\x4e\x49\xc9\xff\xff\x0a\x0b\x0c\x00\x02\xc9\x03\x00\xa0\xb0\xc1"), uint32(0xF0F0), uint8(18))
	f.Add("0x5e49*", []byte("\x4e\x49\xc9\xff\xff\x0a\x0b\x0c\x00\x02\xc9\x03\x00\xa0\xb0\xc1"), uint32(1), uint8(2))
	f.Add("0x00000000000000000002c90300a0b0c2", []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\xc9\x03\x00\xa0\xb0\xc2"), uint32(0), uint8(34))
	f.Add("00000000000000000002C90300A0B0C2", []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\xc9\x03\x00\xa0\xb0\xc2"), uint32(0), uint8(0))
	f.Add("0x????????????????*c2", []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\xc9\x03\x00\xa0\xb0\xc2"), uint32(0xFFFFFFFF), uint8(33))
	f.Add("*0*0*", []byte{}, uint32(0), uint8(0))
	f.Add("0x*[a-f]\\*/", []byte("0x/"), uint32(0), uint8(0))
	f.Add("0x", []byte{0xFF}, uint32(0), uint8(0))
	f.Fuzz(func(t *testing.T, pattern string, raw []byte, wild uint32, cut uint8) {
		// Any pattern against any id: no panic.
		config.MatchInitiator(pattern, string(raw))

		var pid iu.PortID
		copy(pid[:], raw)
		id := pid.String()
		require.True(t, config.MatchInitiator(id, id))
		require.True(t, config.MatchInitiator(strings.ToUpper(id), id))
		require.True(t, config.MatchInitiator(strings.TrimPrefix(id, "0x"), id))
		require.True(t, config.MatchInitiator("*", id))
		require.True(t, config.MatchInitiator("0x*", id))

		// A pattern made from the id itself, which the configuration accepts.
		digits := []byte(strings.TrimPrefix(id, "0x"))
		for i := range digits { // 32 digits, one bit of wild each
			if wild&(1<<i) != 0 {
				digits[i] = '?'
			}
		}
		own := "0x" + string(digits)
		if c := int(cut); c < len(digits) {
			own = "0x" + string(digits[:c]) + "*"
		}
		require.NoError(t, config.CheckInitiatorPattern(own))
		require.True(t, config.MatchInitiator(own, id), "pattern %q, id %s", own, id)

		// A pattern the configuration accepts behaves as the reference says, on its own and
		// as the only initiator pattern of an ACL.
		if config.CheckInitiatorPattern(pattern) != nil {
			return
		}
		want := refMatch(pattern, id)
		require.Equal(t, want, config.MatchInitiator(pattern, id), "pattern %q, id %s", pattern, id)
		a, m := oneACL(t, []string{pattern}, nil)
		got, err := a.Authorize(pid, iu.PortID{}, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.7"), 1))
		if want {
			require.NoError(t, err)
			require.Same(t, m, got)
		} else {
			require.Error(t, err)
			require.Nil(t, got)
		}
	})
}

// FuzzACLSources feeds ACL sources (what the configuration's sources list holds) and login
// source addresses to ParseSourcePrefix and to the ACL authorizer. Nothing panics; a source
// that parses is a masked prefix; the address a source names, written as the source was, is
// let in when it logs in from that address; and any address is let in exactly when the prefix
// contains it by refContains, after the IPv4-mapped form is unmapped as configs/README.md
// says.
func FuzzACLSources(f *testing.F) {
	f.Add("192.168.1.7", []byte{192, 168, 1, 7}, false)
	f.Add("192.168.1.7", []byte{192, 168, 1, 8}, false)
	f.Add("10.0.0.0/8", []byte{10, 1, 2, 3}, true)
	f.Add("10.1.2.3/8", []byte{11, 1, 2, 3}, false)
	f.Add("fd00::/8", []byte{0xfd, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, false)
	f.Add("fe80::1%eth0", []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, false)
	f.Add("::ffff:10.0.0.1", []byte{10, 0, 0, 1}, true)
	f.Add("::ffff:10.0.0.0/104", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 9, 9}, false)
	f.Add("0.0.0.0/0", []byte{203, 0, 113, 9}, false)
	f.Add("::/0", []byte{203, 0, 113, 9}, false)
	f.Add("10.0.0.0/33", []byte{}, false)
	f.Fuzz(func(t *testing.T, source string, raw []byte, mapped bool) {
		p, err := config.ParseSourcePrefix(source)
		if err != nil {
			return
		}
		require.True(t, p.IsValid(), "%q", source)
		require.Equal(t, p.Masked(), p, "%q", source)
		cs, err := config.ParseSource(source)
		require.NoError(t, err, "%q parses as a prefix but not as a source", source)
		a, m := oneACL(t, nil, []config.Source{cs})
		login := func(src netip.Addr) bool {
			got, err := a.Authorize(iu.PortID{}, iu.PortID{}, netip.AddrPortFrom(src, 40000))
			if err != nil {
				require.Nil(t, got)
				return false
			}
			require.Same(t, m, got)
			return true
		}

		if !strings.Contains(source, "/") {
			self := netip.MustParseAddr(source)
			require.True(t, login(self), "source %q does not let its own address in", source)
			if self.Is4() {
				require.True(t, login(netip.AddrFrom16(self.As16())), "source %q, IPv4-mapped", source)
			}
		}

		var src netip.Addr
		switch len(raw) {
		case 4:
			src = netip.AddrFrom4([4]byte(raw))
			if mapped {
				src = netip.AddrFrom16(src.As16())
			}
		case 16:
			src = netip.AddrFrom16([16]byte(raw))
		default:
			return
		}
		require.Equal(t, refContains(p, src.Unmap()), login(src), "source %q (prefix %s), login from %s", source, p, src)
		// An IP source never admits a login through an ib listener, even from the GID that
		// is the address's 16 bytes.
		got, err := a.AuthorizeIB(iu.PortID{}, iu.PortID{}, ib.IBAddr{GID: netip.AddrFrom16(src.As16()), PKey: 0xffff})
		require.Error(t, err, "source %q admitted GID %v", source, src)
		require.Nil(t, got)
	})
}
