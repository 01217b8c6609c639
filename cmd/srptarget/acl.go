package main

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp"
	"github.com/srptarget/srptarget/srp/iu"
)

// aclAuthorizer is the srp.Authorizer of one configuration: the ACLs in file order, each with
// the LUN map its initiators see. The first ACL that matches wins. It is immutable; a reload
// builds a new one and installs it with Target.SetAuthorizer.
type aclAuthorizer struct {
	acls []*aclEntry
	// luns are every LUN of the configuration, for the ACL a refusal suggests.
	luns []int
}

type aclEntry struct {
	index      int
	cfg        ACLConfig
	initiators []string
	sources    []netip.Prefix
	lunMap     *scsi.LUNMap
}

var _ srp.Authorizer = (*aclAuthorizer)(nil)

// newACLEntry makes the entry of acls[i] of cfg, its LUN map not yet set.
func newACLEntry(cfg *Config, i int) (*aclEntry, *ConfigError) {
	c := cfg.ACLs[i]
	e := &aclEntry{index: i, cfg: c, initiators: c.Initiators}
	for _, s := range c.Sources {
		pfx, err := ParseSourcePrefix(s)
		if err != nil {
			return nil, cfg.errorAt(at("acls", i, "sources"), "%v", err)
		}
		e.sources = append(e.sources, pfx)
	}
	return e, nil
}

// matches reports whether the initiator port id (0x + 32 hex digits) or its source address
// (unmapped, without zone) is in the ACL.
func (e *aclEntry) matches(id string, src netip.Addr) bool {
	for _, p := range e.initiators {
		if MatchInitiator(p, id) {
			return true
		}
	}
	if src.IsValid() {
		for _, p := range e.sources {
			if p.Contains(src) {
				return true
			}
		}
	}
	return false
}

// Authorize returns the LUN map of the first matching ACL. An initiator that matches none is
// refused, and the refusal (which the engine logs with the login's details) spells out the ACL
// that would let it in.
func (a *aclAuthorizer) Authorize(initiator, _ iu.PortID, src netip.AddrPort) (*scsi.LUNMap, error) {
	id := initiator.String()
	addr := src.Addr().Unmap().WithZone("")
	for _, e := range a.acls {
		if e.matches(id, addr) {
			return e.lunMap, nil
		}
	}
	return nil, &srp.LoginRefusedError{Reason: iu.LoginRejChannelLimitReached, Detail: a.refusal(id, addr)}
}

func (a *aclAuthorizer) refusal(id string, src netip.Addr) string {
	var b strings.Builder
	fmt.Fprintf(&b, "initiator %s", id)
	if src.IsValid() {
		fmt.Fprintf(&b, " from %s", src)
	}
	if len(a.acls) == 0 {
		b.WriteString(" is refused: the configuration has no ACLs")
	} else {
		fmt.Fprintf(&b, " matches none of the %d ACLs", len(a.acls))
	}
	fmt.Fprintf(&b, "; to let it in, add to acls: {initiators: [\"%s\"], luns: %s}", id, intList(a.luns))
	if src.IsValid() {
		fmt.Fprintf(&b, " (or sources: [\"%s\"] instead of initiators)", src)
	}
	return b.String()
}

// intList formats LUN numbers as a YAML flow sequence: [0, 1, 2].
func intList(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// shadowedBy returns the earlier ACL that matches every initiator and source ACL i names,
// and why, or -1: Authorize takes the first matching ACL, so such an ACL is never used. An
// ACL is only reported when one earlier ACL covers all of it; coverage spread over several
// earlier ACLs is not looked for, so a warning is never wrong but may be missing.
func shadowedBy(acls []ACLConfig, i int) (int, string) {
	a := acls[i]
	if len(a.Initiators) == 0 && len(a.Sources) == 0 {
		return -1, ""
	}
	for j := range i {
		e := acls[j]
		if slices.Contains(e.Initiators, "*") {
			return j, `matches every initiator (initiators: ["*"])`
		}
		if len(a.Initiators) > 0 && !allCovered(a.Initiators, func(p string) bool { return initiatorCovered(e.Initiators, p) }) {
			continue
		}
		if len(a.Sources) > 0 && !allCovered(a.Sources, func(s string) bool { return sourceCovered(e.Sources, s) }) {
			continue
		}
		return j, "matches every initiator and source this one names"
	}
	return -1, ""
}

func allCovered(items []string, covered func(string) bool) bool {
	for _, it := range items {
		if !covered(it) {
			return false
		}
	}
	return true
}

// initiatorCovered reports whether one of patterns matches every initiator that p matches:
// the same pattern, or p is a literal port id one of them matches.
func initiatorCovered(patterns []string, p string) bool {
	norm := func(s string) string { return strings.TrimPrefix(strings.ToLower(s), "0x") }
	for _, q := range patterns {
		if norm(q) == norm(p) || !strings.ContainsAny(p, "*?") && MatchInitiator(q, p) {
			return true
		}
	}
	return false
}

// sourceCovered reports whether one of prefixes contains every address of source s.
func sourceCovered(prefixes []string, s string) bool {
	sp, err := ParseSourcePrefix(s)
	if err != nil {
		return false
	}
	for _, q := range prefixes {
		qp, err := ParseSourcePrefix(q)
		if err == nil && qp.Bits() <= sp.Bits() && qp.Contains(sp.Addr()) {
			return true
		}
	}
	return false
}
