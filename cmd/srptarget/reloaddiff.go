package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/config"
)

// What a reload changes, key by key, for its preview (reload --dry-run, validate --diff) and
// its report: the settings of each LUN and ACL, and the data a memory LUN loses.

// fieldChange is one setting a reload changes: its key as in the file, its value before and
// after ("" when the key is not set: its default applies).
type fieldChange struct {
	Key  string `json:"key"`
	From string `json:"from"`
	To   string `json:"to"`
}

// lunChange is the settings of a LUN that both configurations have and that differ. DataLost:
// a memory LUN that gets new, empty memory.
type lunChange struct {
	LUN      int           `json:"lun"`
	Fields   []fieldChange `json:"fields"`
	DataLost bool          `json:"data_lost,omitempty"`
}

// aclChange is an ACL added, removed or changed, named by its index in the file.
type aclChange struct {
	ACL    string        `json:"acl"`
	Change string        `json:"change"` // added, removed or changed
	Fields []fieldChange `json:"fields"`
}

// fieldChanges compares two values of one configuration struct key by key (their yaml tags),
// in the order of the struct.
func fieldChanges(prefix string, old, new any) []fieldChange {
	out := []fieldChange{}
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(new)
	t := ov.Type()
	for i := range t.NumField() {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		a, b := settingText(ov.Field(i)), settingText(nv.Field(i))
		if a != b {
			out = append(out, fieldChange{Key: prefix + key, From: a, To: b})
		}
	}
	return out
}

// settingText prints one setting as the file would have it: "" for an unset pointer, lists
// in brackets, a struct (rbd) as its keys.
func settingText(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = settingText(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Struct:
		var parts []string
		for _, f := range fieldChanges("", reflect.Zero(v.Type()).Interface(), v.Interface()) {
			parts = append(parts, f.Key+": "+f.To)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	if s, ok := v.Interface().(fmt.Stringer); ok && v.Kind() != reflect.String {
		return s.String()
	}
	return fmt.Sprint(v.Interface())
}

// describeSettings fills res.LUNChanges, res.ACLChanges and res.DataLoss: what the plan
// changes in each LUN the running configuration and the plan both have, which memory LUNs
// lose their data (resized, or any change that gives them a new store, or removed), and the
// ACLs added, removed or changed, by index.
func (d *daemon) describeSettings(p *plan, res *reloadResult) {
	res.LUNChanges, res.ACLChanges, res.DataLoss = []lunChange{}, []aclChange{}, []string{}
	nums := make([]int, 0, len(d.luns))
	for num := range d.luns {
		nums = append(nums, num)
	}
	slices.Sort(nums)
	for _, num := range nums {
		prev, next := d.luns[num], p.luns[num]
		memory := prev.cfg.Backstore == "memory"
		if next == nil {
			if memory {
				res.DataLoss = append(res.DataLoss, fmt.Sprintf("LUN %d: the memory LUN is removed: its %v of data are lost", num, prev.cfg.Size))
			}
			continue
		}
		fields := fieldChanges("", prev.cfg, next.cfg)
		lost := memory && prev.key.store != next.key.store
		if lost {
			res.DataLoss = append(res.DataLoss, fmt.Sprintf("LUN %d: the memory LUN gets new memory (%s): its %v of data are lost, the new LUN starts empty",
				num, changedKeys(fields), prev.cfg.Size))
		}
		if len(fields) > 0 || lost {
			res.LUNChanges = append(res.LUNChanges, lunChange{LUN: num, Fields: fields, DataLost: lost})
		}
	}
	old, cur := d.cfg.ACLs, p.cfg.ACLs
	for i := range max(len(old), len(cur)) {
		name := "acls[" + strconv.Itoa(i) + "]"
		switch {
		case i < len(cur) && cur[i].Name != "":
			name += " " + cur[i].Name
		case i < len(old) && old[i].Name != "":
			name += " " + old[i].Name
		}
		switch {
		case i >= len(cur):
			res.ACLChanges = append(res.ACLChanges, aclChange{ACL: name, Change: "removed", Fields: fieldChanges("", old[i], config.ACL{})})
		case i >= len(old):
			res.ACLChanges = append(res.ACLChanges, aclChange{ACL: name, Change: "added", Fields: fieldChanges("", config.ACL{}, cur[i])})
		default:
			if fields := fieldChanges("", old[i], cur[i]); len(fields) > 0 {
				res.ACLChanges = append(res.ACLChanges, aclChange{ACL: name, Change: "changed", Fields: fields})
			}
		}
	}
}

// changedKeys names the keys of fields for a sentence: "size" or "size, block_size".
func changedKeys(fields []fieldChange) string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.Key
	}
	if len(keys) == 0 {
		return "its backstore is opened again"
	}
	return strings.Join(keys, ", ") + " changed"
}

// disruptive reports whether applying res cuts an initiator off (a session or some of its
// channels disconnected, LUNs taken away) or loses data: what reload asks about on a terminal.
func (r *reloadResult) disruptive() bool {
	if len(r.DataLoss) > 0 {
		return true
	}
	for _, s := range r.Sessions {
		if s.Disconnected || s.ChannelsDisconnected > 0 || len(s.LosesLUNs) > 0 {
			return true
		}
	}
	return false
}

// fieldsText is one line per changed setting: "size 16MiB -> 32MiB".
func fieldsText(b *strings.Builder, indent string, fields []fieldChange) {
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
func settingsText(b *strings.Builder, r *reloadResult) {
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

// MarshalJSON gives every list of the answer as a list, [] when empty, whatever the outcome
// (a refused reload fills none of them), so that a script can read any of them as it is.
func (r reloadResult) MarshalJSON() ([]byte, error) {
	type plain reloadResult
	n := plain(r)
	n.LUNsAdded, n.LUNsChanged, n.LUNsRemoved, n.LUNsUnchanged = nonNil(n.LUNsAdded), nonNil(n.LUNsChanged), nonNil(n.LUNsRemoved), nonNil(n.LUNsUnchanged)
	n.ListenersAdded, n.ListenersRemoved, n.PortGroupsChanged = nonNil(n.ListenersAdded), nonNil(n.ListenersRemoved), nonNil(n.PortGroupsChanged)
	n.Sessions, n.LUNChanges, n.ACLChanges, n.DataLoss = nonNil(n.Sessions), nonNil(n.LUNChanges), nonNil(n.ACLChanges), nonNil(n.DataLoss)
	return json.Marshal(n)
}
