package config

import (
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
