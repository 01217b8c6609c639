package config

import (
	"fmt"
	"reflect"
	"slices"
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
