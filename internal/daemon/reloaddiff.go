package daemon

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/internal/control"
)

// What a reload changes, key by key, for its preview (reload --dry-run, validate --diff) and
// its report: the settings of each LUN and ACL, and the data a memory LUN loses.

// fieldChanges compares two values of one configuration struct key by key (their yaml tags),
// in the order of the struct.
func fieldChanges(prefix string, old, new any) []control.FieldChange {
	out := []control.FieldChange{}
	ov, nv := reflect.ValueOf(old), reflect.ValueOf(new)
	t := ov.Type()
	for i := range t.NumField() {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		a, b := settingText(ov.Field(i)), settingText(nv.Field(i))
		if a != b {
			out = append(out, control.FieldChange{Key: prefix + key, From: a, To: b})
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
func (d *daemon) describeSettings(p *plan, res *control.ReloadResult) {
	res.LUNChanges, res.ACLChanges, res.DataLoss = []control.LUNChange{}, []control.ACLChange{}, []string{}
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
			res.LUNChanges = append(res.LUNChanges, control.LUNChange{LUN: num, Fields: fields, DataLost: lost})
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
			res.ACLChanges = append(res.ACLChanges, control.ACLChange{ACL: name, Change: "removed", Fields: fieldChanges("", old[i], config.ACL{})})
		case i >= len(old):
			res.ACLChanges = append(res.ACLChanges, control.ACLChange{ACL: name, Change: "added", Fields: fieldChanges("", config.ACL{}, cur[i])})
		default:
			if fields := fieldChanges("", old[i], cur[i]); len(fields) > 0 {
				res.ACLChanges = append(res.ACLChanges, control.ACLChange{ACL: name, Change: "changed", Fields: fields})
			}
		}
	}
}

// changedKeys names the keys of fields for a sentence: "size" or "size, block_size".
func changedKeys(fields []control.FieldChange) string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.Key
	}
	if len(keys) == 0 {
		return "its backstore is opened again"
	}
	return strings.Join(keys, ", ") + " changed"
}
