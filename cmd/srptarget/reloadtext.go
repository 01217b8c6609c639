package main

import (
	"fmt"
	"strings"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
)

// How a reload's result prints, for reload and validate --diff (the plan of a dry run).

func intsText(ns []int) string {
	if len(ns) == 0 {
		return "none"
	}
	return strings.Trim(config.FlowList(ns), "[]")
}

func reloadText(r *control.ReloadResult) string {
	var b strings.Builder
	switch {
	case len(r.Errors) > 0:
		return ""
	case r.Waiting:
		b.WriteString("the configuration is valid; the daemon waits for an RDMA device and starts with it when one appears\n")
		b.WriteString(pathsNotCheckedText(r))
		return b.String()
	case r.DryRun:
		b.WriteString("dry run: nothing applied; the reload would change:\n")
	default:
		b.WriteString("reload applied:\n")
	}
	b.WriteString(pathsNotCheckedText(r))
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	for _, w := range r.DataLoss {
		fmt.Fprintf(&b, "warning: data lost: %s\n", w)
	}
	fmt.Fprintf(&b, "  LUNs added: %s\n", intsText(r.LUNsAdded))
	fmt.Fprintf(&b, "  LUNs changed: %s\n", intsText(r.LUNsChanged))
	fmt.Fprintf(&b, "  LUNs retired: %s\n", intsText(r.LUNsRemoved))
	fmt.Fprintf(&b, "  LUNs unchanged: %s\n", intsText(r.LUNsUnchanged))
	settingsText(&b, r)
	listeners := func(as []string) string {
		if len(as) == 0 {
			return "none"
		}
		return strings.Join(as, ", ")
	}
	fmt.Fprintf(&b, "  listeners added: %s\n", listeners(r.ListenersAdded))
	fmt.Fprintf(&b, "  listeners removed: %s\n", listeners(r.ListenersRemoved))
	if len(r.PortGroupsChanged) == 0 {
		b.WriteString("  target port groups: unchanged\n")
	}
	for _, g := range r.PortGroupsChanged {
		fmt.Fprintf(&b, "  target port %s\n", g)
	}
	if len(r.Sessions) == 0 {
		b.WriteString("  sessions: none affected\n")
	}
	for _, s := range r.Sessions {
		var what []string
		if s.Disconnected {
			what = append(what, "disconnected (no ACL admits it)")
		} else if s.ChannelsDisconnected > 0 {
			what = append(what, fmt.Sprintf("%d %s disconnected (their sources are granted other LUNs)", s.ChannelsDisconnected, plural(s.ChannelsDisconnected, "channel")))
		}
		if len(s.LosesLUNs) > 0 {
			what = append(what, "loses LUNs "+intsText(s.LosesLUNs))
		}
		if len(s.ChangedLUNs) > 0 {
			what = append(what, "LUNs "+intsText(s.ChangedLUNs)+" replaced by changed ones")
		}
		if len(s.GainsLUNs) > 0 {
			what = append(what, "gains LUNs "+intsText(s.GainsLUNs))
		}
		fmt.Fprintf(&b, "  initiator %s: %s\n", s.Initiator, strings.Join(what, ", "))
	}
	return b.String()
}

// pathsNotCheckedText says that a dry run of a configuration sent to the daemon looked at its
// text only.
func pathsNotCheckedText(r *control.ReloadResult) string {
	if !r.PathsNotChecked {
		return ""
	}
	return "paths not checked: the daemon opens no backstore and looks at no path of a configuration sent by a user other than root or its own; validate checked them as you\n"
}

// fieldsText is one line per changed setting: "size 16MiB -> 32MiB".
func fieldsText(b *strings.Builder, indent string, fields []control.FieldChange) {
	show := func(s string) string {
		if s == "" {
			return "(default)"
		}
		return s
	}
	for _, f := range fields {
		fmt.Fprintf(b, "%s%s: %s -> %s\n", indent, f.Key, show(f.From), show(f.To))
	}
}

// settingsText is the key-by-key part of reloadText.
func settingsText(b *strings.Builder, r *control.ReloadResult) {
	for _, c := range r.LUNChanges {
		fmt.Fprintf(b, "  LUN %d:\n", c.LUN)
		fieldsText(b, "    ", c.Fields)
	}
	for _, c := range r.ACLChanges {
		if c.Change == "changed" {
			fmt.Fprintf(b, "  %s:\n", c.ACL)
			fieldsText(b, "    ", c.Fields)
			continue
		}
		// An ACL added or removed: its settings, those not at their zero value.
		var kv []string
		for _, f := range c.Fields {
			v := f.To
			if c.Change == "removed" {
				v = f.From
			}
			kv = append(kv, f.Key+" "+v)
		}
		fmt.Fprintf(b, "  %s %s: %s\n", c.ACL, c.Change, strings.Join(kv, ", "))
	}
}
