package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The document check's mappings: each key against the Go struct's yaml tags, and for an
// unknown one the key it was probably meant to be.

// checkMapping checks the keys of a mapping against the yaml tags of struct type t: unknown
// keys (with the closest known one), keys given twice, and every value.
func (c *nodeChecker) checkMapping(n *yaml.Node, t reflect.Type, p []any) {
	if n.Kind != yaml.MappingNode {
		c.errorf(n, p, "want keys and values (key: value lines, or {key: value}), not %s", nodeKind(n))
		return
	}
	fields := map[string]reflect.Type{}
	var names []string
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case !f.IsExported() || name == "-":
			case opts == "inline": // an embedded struct's keys are this mapping's (config.RBD)
				add(f.Type)
			case name != "":
				fields[name] = f.Type
				names = append(names, name)
			}
		}
	}
	add(t)
	seen := map[string]int{}
	var dups []int // the pairs whose key came earlier, dropped for the partial decode
	defer func() {
		for _, i := range slices.Backward(dups) {
			n.Content = slices.Delete(n.Content, i, i+2)
		}
	}()
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			// A merge key (<<: *anchor) brings in the keys of another mapping.
			if v = c.deref(v); v == nil {
				continue
			}
			if v.Kind == yaml.SequenceNode {
				for _, m := range v.Content {
					c.check(m, t, p)
				}
			} else {
				c.check(v, t, p)
			}
			continue
		}
		kp := append(slices.Clip(p), k.Value)
		ft, ok := fields[k.Value]
		if !ok {
			if why, gone := retiredKeys[k.Value]; gone {
				c.errorf(k, kp, "%s", why)
				continue
			}
			hint, meant := suggestKey(k.Value, names)
			c.errorf(k, kp, "unknown key%s", hint)
			if meant != "" {
				c.meant = append(c.meant, pathString(append(slices.Clip(p), meant)))
			}
			continue
		}
		if line, dup := seen[k.Value]; dup {
			c.errorf(k, kp, "given twice (also at line %d)", line)
			dups = append(dups, i)
			continue
		}
		seen[k.Value] = k.Line
		c.check(v, ft, kp)
	}
}

// retiredKeys are keys earlier versions knew, with what replaced them: a file that still
// names one is told what to write instead.
var retiredKeys = map[string]string{
	"max_channel_buffer": "replaced by max_initiator_buffer, the share of the pool one initiator may hold whatever its number of channels: rename the key",
}

// suggestKey is the hint for unknown key k: the closest of the known keys when it is near
// enough to be a typo (returned too), else all of them.
func suggestKey(k string, known []string) (hint, meant string) {
	best, bestDist := "", math.MaxInt
	for _, name := range known {
		if d := editDistance(strings.ToLower(k), name); d < bestDist {
			best, bestDist = name, d
		}
	}
	if best != "" && bestDist <= max(2, len(k)/3) {
		return fmt.Sprintf(" (did you mean %s?)", best), best
	}
	return " (the keys here are " + strings.Join(known, ", ") + ")", ""
}

// editDistance is the Levenshtein distance between a and b: the fewest single-character
// insertions, deletions and substitutions that turn one into the other.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
