package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

func pathString(p []any) string {
	var b strings.Builder
	for _, e := range p {
		switch e := e.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e)
		case int:
			fmt.Fprintf(&b, "[%d]", e)
		}
	}
	return b.String()
}

// nodeAt returns the value node at path p, or nil when the document has no such node.
func nodeAt(root *yaml.Node, p []any) *yaml.Node {
	n, _, complete := walk(root, p)
	if !complete {
		return nil
	}
	return n
}

// lineOf returns the line of the deepest node of path p that the document has.
func lineOf(root *yaml.Node, p []any) int {
	_, line, _ := walk(root, p)
	return line
}

// walk follows p (mapping keys and sequence indexes) from the document root. It returns the
// deepest node reached, the line of its key (or item), and whether all of p was found.
func walk(root *yaml.Node, p []any) (node *yaml.Node, line int, complete bool) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line = n.Line
	for _, e := range p {
		var next *yaml.Node
		switch e := e.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == e {
						line, next = n.Content[i].Line, n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && e < len(n.Content) {
				next = n.Content[e]
				line = next.Line
			}
		}
		if next == nil {
			return n, line, false
		}
		n = next
	}
	return n, line, true
}

// At is a path in the configuration: mapping keys (strings) and sequence indexes (ints), such
// as At("luns", 2, "path") for luns[2].path.
func At(p ...any) []any { return p }

// ErrorAt is an error found after validation (a backstore that would not open, a change a
// reload cannot make) at path p (At) of the file the configuration came from, with its line.
func (c *Config) ErrorAt(p []any, format string, args ...any) *Error {
	e := &Error{File: c.file, Path: pathString(p), Msg: fmt.Sprintf(format, args...)}
	if c.root != nil {
		e.Line = lineOf(c.root, p)
	}
	return e
}
