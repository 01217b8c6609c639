package config

import (
	"errors"
	"reflect"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// The document check's single values: integers in their range, and how a node is named in
// an error.

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
