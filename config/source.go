package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/ib"
)

// Source is one parsed ACL source. An IP address or prefix matches the logins that arrive on
// address listeners; "gid:" with a GID or GID prefix, and "pkey:" with a partition key, match
// the logins that arrive on ib listeners, which come from a GID and a P_Key and have no IP
// address. The two kinds never match each other's logins, although Linux writes GIDs in
// IPv6 notation: an IPv6 prefix such as fe80::/10 does not admit an InfiniBand port.
type Source struct {
	kind sourceKind
	pfx  netip.Prefix // IP or GID
	pkey uint16       // the partition, membership bit cleared
}

type sourceKind uint8

const (
	sourceIP sourceKind = iota + 1
	sourceGID
	sourcePKey
)

// Prefixes of the InfiniBand source forms.
const (
	gidSourcePrefix  = "gid:"
	pkeySourcePrefix = "pkey:"
)

// pkeyPartition is the part of a P_Key that names the partition: the top bit only says
// whether the port is a full or a limited member (InfiniBand Architecture Specification,
// 10.9.1).
const pkeyPartition = 0x7fff

// ParseSource parses an ACL source: an IP address or prefix (ParseSourcePrefix); "gid:" and a
// GID, in IPv6 notation or as the 32 hex digits of ib_srp's dgid=, or a GID prefix
// ("gid:fe80::/64", a subnet); or "pkey:" and a partition key in hex ("pkey:8001", which
// matches members of partition 0x0001 whether full or limited).
func ParseSource(s string) (Source, error) {
	switch {
	case strings.HasPrefix(s, gidSourcePrefix):
		p, err := parseGIDPrefix(strings.TrimPrefix(s, gidSourcePrefix))
		if err != nil {
			return Source{}, fmt.Errorf("%q: %v", s, err)
		}
		return Source{kind: sourceGID, pfx: p}, nil
	case strings.HasPrefix(s, pkeySourcePrefix):
		v := strings.TrimPrefix(strings.TrimPrefix(s, pkeySourcePrefix), "0x")
		n, err := strconv.ParseUint(v, 16, 16)
		if err != nil || v == "" || len(v) > 4 {
			return Source{}, fmt.Errorf("%q: a P_Key is 1 to 4 hex digits, such as pkey:ffff or pkey:0x8001", s)
		}
		if n&pkeyPartition == 0 {
			return Source{}, fmt.Errorf("%q: partition 0 is not a valid P_Key", s)
		}
		return Source{kind: sourcePKey, pkey: uint16(n) & pkeyPartition}, nil
	}
	p, err := ParseSourcePrefix(s)
	if err != nil {
		return Source{}, fmt.Errorf("%v (an InfiniBand source is gid:GID, gid:PREFIX/N or pkey:HEX)", err)
	}
	return Source{kind: sourceIP, pfx: p}, nil
}

// parseGIDPrefix reads a GID or a GID prefix.
func parseGIDPrefix(s string) (netip.Prefix, error) {
	const want = "a GID (fe80::2:c903:a0:b0c2, or 32 hex digits) or a GID prefix (fe80::/64)"
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is6() || p.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("not %s", want)
		}
		return p.Masked(), nil
	}
	var a netip.Addr
	if len(s) == 32 {
		b, err := hex.DecodeString(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not %s", want)
		}
		a = netip.AddrFrom16([16]byte(b))
	} else {
		var err error
		a, err = netip.ParseAddr(s)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("not %s", want)
		}
	}
	return netip.PrefixFrom(a, 128), nil
}

// IsIB reports whether s matches InfiniBand logins (gid: or pkey:).
func (s Source) IsIB() bool { return s.kind == sourceGID || s.kind == sourcePKey }

// MatchIP reports whether the source address of a login through an address listener (unmapped,
// without zone) is in s.
func (s Source) MatchIP(a netip.Addr) bool { return s.kind == sourceIP && s.pfx.Contains(a) }

// MatchIB reports whether the InfiniBand address of a login through an ib listener is in s.
func (s Source) MatchIB(a ib.IBAddr) bool {
	switch s.kind {
	case sourceGID:
		return s.pfx.Contains(a.GID)
	case sourcePKey:
		return a.PKey&pkeyPartition == s.pkey
	}
	return false
}

// covers reports whether every login s2 matches is matched by s.
func (s Source) covers(s2 Source) bool {
	if s.kind != s2.kind {
		return false
	}
	if s.kind == sourcePKey {
		return s.pkey == s2.pkey
	}
	return s.pfx.Bits() <= s2.pfx.Bits() && s.pfx.Contains(s2.pfx.Addr())
}

func (s Source) String() string {
	switch s.kind {
	case sourceGID:
		if s.pfx.IsSingleIP() {
			return gidSourcePrefix + s.pfx.Addr().String()
		}
		return gidSourcePrefix + s.pfx.String()
	case sourcePKey:
		return fmt.Sprintf("%s%04x", pkeySourcePrefix, s.pkey|0x8000)
	}
	if s.pfx.IsSingleIP() {
		return s.pfx.Addr().String()
	}
	return s.pfx.String()
}
