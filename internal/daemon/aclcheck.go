package daemon

// acl-check: which ACL admits an initiator and which LUNs it sees, asked of the running
// daemon or of a configuration file.

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/internal/control"
	"github.com/srptarget/srptarget/srp/iu"
)

// parseInitiator reads an initiator port identifier as the log prints it: 0x and 32 hex
// digits (colons allowed), and returns it in that form.
func parseInitiator(s string) (iu.PortID, error) {
	var p iu.PortID
	h := strings.ReplaceAll(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"), ":", "")
	if len(h) != 32 {
		return p, fmt.Errorf("initiator %q: want 0x and 32 hex digits, as the log prints it (0x00000000000000000002c90300a0b0c2)", s)
	}
	for i := range p {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return p, fmt.Errorf("initiator %q: want 0x and 32 hex digits: %w", s, err)
		}
		p[i] = byte(v)
	}
	return p, nil
}

// aclSource is where acl-check's login comes from: an IP address (an address listener's
// login), or an InfiniBand address (an ib listener's).
type aclSource struct {
	ip netip.Addr
	ib *ib.IBAddr
}

func (s aclSource) String() string {
	if s.ib != nil {
		return fmt.Sprintf("gid:%v,pkey:%04x", s.ib.GID, s.ib.PKey)
	}
	if s.ip.IsValid() {
		return s.ip.String()
	}
	return ""
}

// parseSource reads --source: an IP address, with or without a port, or for a login through
// an ib listener gid:GID with an optional ,pkey:HEX (default ffff).
func parseSource(s string) (aclSource, error) {
	if g, ok := strings.CutPrefix(s, "gid:"); ok {
		g, pk, hasPKey := strings.Cut(g, ",pkey:")
		gid, err := netip.ParseAddr(g)
		if err != nil || !gid.Is6() || gid.Is4In6() || gid.Zone() != "" {
			return aclSource{}, fmt.Errorf("source %q: want gid:GID or gid:GID,pkey:HEX (gid:fe80::2:c903:a0:b0c2,pkey:ffff)", s)
		}
		a := ib.IBAddr{GID: gid, PKey: 0xffff}
		if hasPKey {
			v, err := strconv.ParseUint(strings.TrimPrefix(pk, "0x"), 16, 16)
			if err != nil {
				return aclSource{}, fmt.Errorf("source %q: the P_Key is 1 to 4 hex digits", s)
			}
			a.PKey = uint16(v)
		}
		return aclSource{ib: &a}, nil
	}
	ip, err := parseIPSource(s)
	return aclSource{ip: ip}, err
}

// parseIPSource reads an IP address, with or without a port.
func parseIPSource(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("source %q: not an IP address: %w", s, err)
	}
	return a.Unmap().WithZone(""), nil
}

// match returns the first ACL that admits the initiator from src, as Authorize and
// AuthorizeIB decide.
func (a *aclAuthorizer) match(id string, src aclSource) *aclEntry {
	for _, e := range a.acls {
		if e.matches(id, src.ip, src.ib) {
			return e
		}
	}
	return nil
}

// newACLCheck parses acl-check's initiator and source and starts the answer, the same whether
// the daemon or a configuration file (from) answers it.
func newACLCheck(from, initiator, source string) (*control.ACLCheckResult, aclSource, error) {
	id, err := parseInitiator(initiator)
	if err != nil {
		return nil, aclSource{}, err
	}
	src, err := parseSource(source)
	if err != nil {
		return nil, aclSource{}, err
	}
	res := &control.ACLCheckResult{From: from, Initiator: id.String(), LUNs: []control.LUNRef{}, Source: src.String()}
	return res, src, nil
}

// aclCheck answers which ACL of the running configuration admits the initiator and which
// LUNs it sees.
func (d *daemon) aclCheck(initiator, source string) (*control.ACLCheckResult, error) {
	res, src, err := newACLCheck("daemon", initiator, source)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	auth := d.auth
	d.mu.Unlock()
	if e := auth.match(res.Initiator, src); e != nil {
		res.ACL = e.describe()
		res.LUNs = lunRefs(e.lunMap)
	} else {
		res.Refusal = auth.refusal(res.Initiator, src.ip, src.ib)
	}
	return res, nil
}

// ACLCheckFile answers acl-check from a configuration file, without a daemon: the same
// matching, on the ACLs as written (LUN read_only flags included).
func ACLCheckFile(file, initiator, source string) (*control.ACLCheckResult, error) {
	res, src, err := newACLCheck(file, initiator, source)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(file)
	if err != nil {
		return nil, err
	}
	a := &aclAuthorizer{}
	roLUN := map[int]bool{}
	for _, l := range cfg.LUNs {
		a.luns = append(a.luns, *l.LUN)
		roLUN[*l.LUN] = l.ReadOnly
	}
	slices.Sort(a.luns)
	for i := range cfg.ACLs {
		e, cerr := newACLEntry(cfg, i)
		if cerr != nil {
			return nil, cerr
		}
		a.acls = append(a.acls, e)
	}
	if e := a.match(res.Initiator, src); e != nil {
		res.ACL = e.describe()
		for _, n := range e.cfg.LUNs {
			res.LUNs = append(res.LUNs, control.LUNRef{LUN: n, ReadOnly: e.cfg.ReadOnly || roLUN[n]})
		}
		slices.SortFunc(res.LUNs, func(a, b control.LUNRef) int { return a.LUN - b.LUN })
	} else {
		res.Refusal = a.refusal(res.Initiator, src.ip, src.ib)
	}
	return res, nil
}
