package config

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/srptarget/srptarget/ib"
)

// Summary is what `srptarget validate` prints for a valid configuration: the settings in
// effect, with their defaults, and the warnings. It is here rather than in the command so that
// the golden tests of validate's output (testdata/validate) test the package that makes it.
func (c *Config) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: OK\n", c.file)
	if c.Target.Configured() {
		idExt, iocGUID, err := c.Target.Identity()
		if err == nil {
			fmt.Fprintf(&b, "target: id_ext=%016x ioc_guid=%016x\n", idExt, iocGUID)
		}
	} else {
		b.WriteString("target: id_ext and ioc_guid from the node GUID of the first RDMA device (at start-up)\n")
	}

	fmt.Fprintf(&b, "listeners (%d):\n", len(c.Listeners))
	for _, l := range c.Listeners {
		if l.IsIB() {
			fmt.Fprintf(&b, "  %s\n", l.IBSummary())
			continue
		}
		addr, _ := ParseListenAddress(l.Address)
		fmt.Fprintf(&b, "  %v\n", netip.AddrPortFrom(addr, l.Port))
	}

	limitsSummary(&b, &c.Limits)

	fmt.Fprintf(&b, "LUNs (%d):\n", len(c.LUNs))
	luns := slices.Clone(c.LUNs)
	slices.SortFunc(luns, func(a, b LUN) int { return *a.LUN - *b.LUN })
	for _, l := range luns {
		fmt.Fprintf(&b, "  LUN %d: %s\n", *l.LUN, strings.Join(lunSummary(&l), ", "))
	}

	fmt.Fprintf(&b, "ACLs (%d):\n", len(c.ACLs))
	for i, a := range c.ACLs {
		var who []string
		if len(a.Initiators) > 0 {
			who = append(who, "initiators "+strings.Join(a.Initiators, ", "))
		}
		if len(a.Sources) > 0 {
			who = append(who, "sources "+strings.Join(a.Sources, ", "))
		}
		access := ""
		if a.ReadOnly {
			access = ", read-only"
		}
		if a.PerInitiatorMetrics {
			access += ", metrics per initiator"
		}
		name := ""
		if a.Name != "" {
			name = " " + a.Name
		}
		fmt.Fprintf(&b, "  acls[%d]%s: %s -> LUNs %s%s\n", i, name, strings.Join(who, " or "), strings.Trim(FlowList(a.LUNs), "[]"), access)
	}
	for _, w := range c.Warnings() {
		fmt.Fprintf(&b, "warning: %v\n", w)
	}
	for _, w := range c.reachWarnings() {
		fmt.Fprintf(&b, "warning: %s\n", w.Msg)
	}
	return b.String()
}

// AllWarnings are Warnings and what the file as a whole leaves unreachable: no ACLs at all,
// LUNs in no ACL, LUNs only in ACLs that are never used. Validate prints them all (Summary,
// and validate --json).
func (c *Config) AllWarnings() Errors {
	return append(slices.Clone(c.Warnings()), c.reachWarnings()...)
}

// reachWarnings are the warnings of AllWarnings about LUNs no initiator can reach.
func (c *Config) reachWarnings() Errors {
	var out Errors
	// inACL is where each LUN is granted: true in an ACL that can match, false in ACLs that
	// all come after one that matches everything they name (shadowedBy).
	inACL := map[int]bool{}
	for i, a := range c.ACLs {
		live, _ := shadowedBy(c.ACLs, i)
		for _, n := range a.LUNs {
			inACL[n] = inACL[n] || live < 0
		}
	}
	if len(c.ACLs) == 0 {
		out = append(out, &Error{File: c.file, Msg: "no ACLs: every login will be refused"})
	}
	luns := slices.Clone(c.LUNs)
	slices.SortFunc(luns, func(a, b LUN) int { return *a.LUN - *b.LUN })
	for _, l := range luns {
		if live, listed := inACL[*l.LUN]; len(c.ACLs) > 0 && !listed {
			out = append(out, &Error{File: c.file, Msg: fmt.Sprintf("LUN %d is in no ACL: no initiator sees it", *l.LUN)})
		} else if listed && !live {
			out = append(out, &Error{File: c.file, Msg: fmt.Sprintf("LUN %d is only in ACLs that are never used: no initiator sees it", *l.LUN)})
		}
	}
	return out
}

// File is the name of the file the configuration was read from.
func (c *Config) File() string { return c.file }

// lunSummary describes one LUN in a few words, leaving out what is at its default.
func lunSummary(l *LUN) []string {
	var s []string
	switch l.Backstore {
	case "file":
		f := "file " + l.Path
		if l.Create {
			f += " (created if missing)"
		}
		s = append(s, f)
	case "block":
		s = append(s, "block "+l.Path)
	default:
		s = append(s, string(l.Backstore))
	}
	if l.Size != 0 {
		s = append(s, l.Size.String())
	}
	if l.Backstore != "block" {
		s = append(s, fmt.Sprintf("%d-byte blocks", l.BlockSize))
	}
	if l.PhysicalBlockSize != 0 {
		s = append(s, fmt.Sprintf("%d-byte physical blocks", l.PhysicalBlockSize))
	}
	if l.ReadOnly {
		s = append(s, "read-only")
	}
	if l.AllowSharedFile {
		s = append(s, "shared file allowed")
	}
	for _, kv := range [][2]string{{"vendor", l.Vendor}, {"product", l.Product}, {"revision", l.Revision}, {"serial", l.Serial}} {
		if kv[1] != "" {
			s = append(s, fmt.Sprintf("%s %q", kv[0], kv[1]))
		}
	}
	if l.WriteCache != nil && !*l.WriteCache {
		s = append(s, "write cache off")
	}
	if l.ThinProvisioning != nil {
		if *l.ThinProvisioning {
			s = append(s, "thin provisioning on")
		} else {
			s = append(s, "thin provisioning off")
		}
	}
	return s
}

// WriteErrors writes every error of a configuration that failed to load (Load, Parse), one a
// line, then a count: what `srptarget validate` prints.
func WriteErrors(w io.Writer, file string, err error) {
	errs := AsErrors(err)
	if errs == nil {
		fmt.Fprintln(w, err)
		return
	}
	for _, e := range errs {
		fmt.Fprintln(w, e.Error())
	}
	word := "errors"
	if len(errs) == 1 {
		word = "error"
	}
	fmt.Fprintf(w, "%s: %d %s\n", file, len(errs), word)
}

// IBSummary describes the ib listener l in a line: "ib, every InfiniBand port, port 5555
// (service_id 00000000013f15b3)".
func (l Listener) IBSummary() string {
	where := "every InfiniBand port"
	if len(l.IBPorts) > 0 {
		where = strings.Join(l.IBPorts, ", ")
	}
	return fmt.Sprintf("ib, %s, port %d (service_id %016x)", where, l.Port, ib.IBServiceID(l.Port))
}
