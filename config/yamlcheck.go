package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkDocument walks the YAML document against the Go type of Config before it is decoded,
// and reports every key and value the decoder would refuse, in file order, each with its key
// path and line. yaml.v3's own errors name Go types ("cannot unmarshal !!str `abc` into
// int", "field blocksize not found in type config.LUN") and stop at the first size error;
// the configuration's users write YAML, not Go, and want every error of the file at once.
// It also returns the paths of the known keys that unknown ones were probably meant to be
// (blocksize for block_size): validation should not also say that those are missing.
func checkDocument(file string, root *yaml.Node) (Errors, []string) {
	c := nodeChecker{file: file}
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	c.check(n, reflect.TypeFor[Config](), nil)
	return c.errs, c.meant
}

type nodeChecker struct {
	file  string
	errs  Errors
	meant []string
	// aliased are the anchored nodes already checked through an alias: each is checked once
	// that way, so that an anchor that contains itself (&a [*a]) or aliases of aliases (the
	// "billion laughs") cannot make the walk endless or exponential.
	aliased map[*yaml.Node]bool
}

// deref returns the node an alias stands for, or nil when it was checked through an alias
// already.
func (c *nodeChecker) deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		if n.Alias == nil || c.aliased[n.Alias] {
			return nil
		}
		if c.aliased == nil {
			c.aliased = map[*yaml.Node]bool{}
		}
		c.aliased[n.Alias] = true
		n = n.Alias
	}
	return n
}

func (c *nodeChecker) errorf(n *yaml.Node, p []any, format string, args ...any) {
	c.errs = append(c.errs, &Error{File: c.file, Line: n.Line, Path: pathString(p), Msg: fmt.Sprintf(format, args...)})
}

var (
	sizeType     = reflect.TypeFor[Size]()
	durationType = reflect.TypeFor[Duration]()
	// yaml11Bools are the YAML 1.1 booleans (https://yaml.org/type/bool.html) that YAML 1.2,
	// which yaml.v3 implements, reads as strings; yaml.v3 still turns them into booleans when
	// the Go field is a bool. They are refused so that a file means the same to every YAML tool.
	yaml11Bools = []string{"y", "yes", "n", "no", "on", "off"}
)

// check reports what is wrong with node n as a value of Go type t at path p. A value that is
// wrong itself (not one inside it) is replaced by null, so that the partial decode that
// Parse validates next leaves it at zero rather than failing on it.
func (c *nodeChecker) check(n *yaml.Node, t reflect.Type, p []any) {
	if n = c.deref(n); n == nil {
		return
	}
	before := len(c.errs)
	defer func() {
		if len(c.errs) > before && c.errs[len(c.errs)-1].Path == pathString(p) {
			*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column}
		}
	}()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // the key without a value: the default, as if it were absent
	}
	switch {
	case t == sizeType:
		if !c.wantScalar(n, p, "a size such as 10GiB") {
			return
		}
		if _, err := ParseSize(n.Value); err != nil {
			c.errorf(n, p, "%v", err)
		}
	case t == durationType || t == reflect.TypeFor[time.Duration]():
		if !c.wantScalar(n, p, "a duration such as 30s") {
			return
		}
		if _, err := ParseDuration(n.Value); err != nil {
			c.errorf(n, p, "%v", err)
		}
	case t.Kind() == reflect.Struct:
		c.checkMapping(n, t, p)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.errorf(n, p, "want a list (- item lines, or [a, b]), not %s", nodeKind(n))
			return
		}
		for i, item := range n.Content {
			c.check(item, t.Elem(), append(slices.Clip(p), i))
		}
	case t.Kind() == reflect.String:
		c.wantScalar(n, p, "a string")
	case t.Kind() == reflect.Bool:
		if !c.wantScalar(n, p, "true or false") {
			return
		}
		switch {
		case n.ShortTag() == "!!bool" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0:
		case slices.Contains(yaml11Bools, strings.ToLower(n.Value)):
			c.errorf(n, p, "%s: write true or false (YAML 1.1's yes, no, on and off are not booleans here)", n.Value)
		case n.Value == "true" || n.Value == "false":
			c.errorf(n, p, "%q is quoted, which makes it a string: write %s without quotes", n.Value, n.Value)
		default:
			c.errorf(n, p, "%q is not a boolean: write true or false", n.Value)
		}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		c.checkInteger(n, t, p)
	}
}

// wantScalar reports an error unless n is a single value; want says what the value is.
func (c *nodeChecker) wantScalar(n *yaml.Node, p []any, want string) bool {
	if n.Kind == yaml.ScalarNode {
		return true
	}
	c.errorf(n, p, "want %s, not %s", want, nodeKind(n))
	return false
}

func (c *nodeChecker) checkInteger(n *yaml.Node, t reflect.Type, p []any) {
	if !c.wantScalar(n, p, "a whole number") {
		return
	}
	var lo int64
	var hi uint64
	if t.Kind() >= reflect.Uint {
		lo, hi = 0, 1<<t.Bits()-1
	} else {
		lo, hi = -1<<(t.Bits()-1), 1<<(t.Bits()-1)-1
	}
	quoted := n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0
	if n.ShortTag() != "!!int" {
		_, err := strconv.ParseInt(n.Value, 0, 64)
		switch {
		case err == nil && quoted:
			c.errorf(n, p, "%q is quoted, which makes it a string: write the number without quotes", n.Value)
		case errors.Is(err, strconv.ErrRange):
			c.errorf(n, p, "%s is too large", n.Value)
		case n.ShortTag() == "!!float":
			c.errorf(n, p, "%s is not a whole number", n.Value)
		default:
			c.errorf(n, p, "%q is not a whole number", n.Value)
		}
		return
	}
	var v int64
	if err := n.Decode(&v); err == nil {
		if v < lo || (v > 0 && uint64(v) > hi) {
			c.errorf(n, p, "%s is outside %d..%d", n.Value, lo, hi)
		}
		return
	}
	var u uint64
	if err := n.Decode(&u); err != nil || u > hi {
		c.errorf(n, p, "%s is outside %d..%d", n.Value, lo, hi)
	}
}

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

// nodeKind names what a node is, for "want X, not Y" messages.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "keys and values"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an empty document"
}
