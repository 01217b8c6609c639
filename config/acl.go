package config

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// FlowList formats numbers (LUNs) as a YAML flow sequence: [0, 1, 2].
func FlowList(ns []int) string {
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
func shadowedBy(acls []ACL, i int) (int, string) {
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

// sourceCovered reports whether one of sources matches every login that source s matches.
func sourceCovered(sources []string, s string) bool {
	sp, err := ParseSource(s)
	if err != nil {
		return false
	}
	for _, q := range sources {
		if qp, err := ParseSource(q); err == nil && qp.covers(sp) {
			return true
		}
	}
	return false
}

// aclName is what an ACL's name may be: it is a metric label value and a word in the log.
var aclName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// validateACLs checks acls: names, who each admits, and that the LUNs each lists are defined
// (luns maps the LUN numbers to their index under luns).
func (v *validator) validateACLs(c *Config, luns map[int]int) {
	names := map[string]int{}
	for i, a := range c.ACLs {
		if a.Name != "" {
			if !aclName.MatchString(a.Name) {
				v.errorf(At("acls", i, "name"), "%q: use letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)", a.Name)
			} else if j, dup := names[a.Name]; dup {
				v.errorf(At("acls", i, "name"), "%q is the name of acls[%d] too: names are unique", a.Name, j)
			}
			names[a.Name] = i
		}
		if len(a.Initiators) == 0 && len(a.Sources) == 0 {
			v.errorf(At("acls", i), "an ACL needs initiators or sources (use initiators: [\"*\"] for everyone)")
		}
		for j, pat := range a.Initiators {
			if err := CheckInitiatorPattern(pat); err != nil {
				v.errorf(At("acls", i, "initiators", j), "%v", err)
			}
		}
		for j, s := range a.Sources {
			src, err := ParseSource(s)
			switch {
			case err != nil:
				v.errorf(At("acls", i, "sources", j), "%v", err)
			case src.IsIB() && !c.HasIBListener():
				v.warnf(At("acls", i, "sources", j), "%s matches only logins through an ib listener, and there is none", s)
			case !src.IsIB() && !c.HasAddressListener():
				v.warnf(At("acls", i, "sources", j), "%s matches only logins through an address listener, and there is none (InfiniBand sources are gid:GID or pkey:HEX)", s)
			}
		}
		if len(a.LUNs) == 0 {
			v.errorf(At("acls", i, "luns"), "no LUNs listed")
		}
		if j, why := shadowedBy(c.ACLs, i); j >= 0 {
			v.warnf(At("acls", i), "never used: acls[%d] comes first and %s, and the first matching ACL wins", j, why)
		}
		seen := map[int]bool{}
		for j, n := range a.LUNs {
			if _, ok := luns[n]; !ok {
				v.errorf(At("acls", i, "luns", j), "LUN %d is not defined under luns", n)
			}
			if seen[n] {
				v.errorf(At("acls", i, "luns", j), "LUN %d listed twice", n)
			}
			seen[n] = true
		}
	}
}
