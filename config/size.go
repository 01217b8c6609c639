package config

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// UnmarshalYAML accepts an integer or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, "a size is a number or a string such as 10GiB", ParseSize, s)
}

// decodeScalar sets *dst to parse's value of n, a scalar (want says what one looks like). Its
// errors are yaml.TypeErrors, with n's line: a TypeError lets the decoder go on with the rest
// of the file (any other error stops it), so that Parse can validate the rest;
// checkDocument reports it.
func decodeScalar[T any](n *yaml.Node, want string, parse func(string) (T, error), dst *T) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, want)}}
	}
	v, err := parse(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*dst = v
	return nil
}

var sizeUnits = map[string]int64{
	"": 1, "B": 1,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50,
	"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
}

var sizePattern = regexp.MustCompile(`^\s*([0-9]+)\s*([A-Za-z]*)\s*$`)

// parseShare parses max_initiator_buffer: a size, or a percentage of pool (1% to 100%). The
// result is at least 4 KiB, the smallest buffer.
func parseShare(s string, pool int64) (int64, error) {
	var n int64
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		p, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil || p < 1 || p > 100 {
			return 0, fmt.Errorf("%q: a percentage must be a whole number from 1%% to 100%% of buffer_pool_size", s)
		}
		n = pool * int64(p) / 100
	} else {
		sz, err := ParseSize(s)
		if err != nil {
			return 0, fmt.Errorf("%q: want a size such as 16MiB, or a percentage of buffer_pool_size such as 25%%", s)
		}
		if int64(sz) > pool {
			return 0, fmt.Errorf("%v is more than buffer_pool_size (%v)", sz, Size(pool))
		}
		n = int64(sz)
	}
	return max(n, 4096), nil
}

// ParseSize parses a size with an optional binary unit (KiB, MiB, GiB, TiB, PiB, or K, M, G, T
// meaning the same). Decimal units (KB, MB) are refused: disks sold in GB are not what a block
// device is sized in here, and silently choosing either meaning would be a trap.
func ParseSize(s string) (Size, error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("size %q: want a whole number with an optional unit (KiB, MiB, GiB, TiB, PiB, or K, M, G, T)", s)
	}
	mult, ok := sizeUnits[m[2]]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use KiB, MiB, GiB, TiB, PiB, or K, M, G, T: units are binary)", s, m[2])
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return Size(n * mult), nil
}

func (s Size) String() string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s != 0 && int64(s)%u.mult == 0 {
			return fmt.Sprintf("%d%s", int64(s)/u.mult, u.name)
		}
	}
	return strconv.FormatInt(int64(s), 10)
}
