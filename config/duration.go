package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a length of time written as Go writes one: 30s, 2ms, 1h30m, 50us; 0 alone
// needs no unit.
type Duration time.Duration

// UnmarshalYAML reads a duration from a scalar.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, "a duration is a string such as 30s", ParseDuration, d)
}

// MarshalYAML writes the duration as UnmarshalYAML reads it.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ParseDuration parses a duration as time.ParseDuration does, with a message that says what to
// write; negative durations are refused.
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a duration: write a number and a unit (ns, us, ms, s, m, h), such as 30s or 1m30s", s)
	}
	return Duration(v), nil
}

// String writes d as it would be written in the file: 30s, 2ms, 50us, 1h, 1h30m.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return strings.Replace(s, "µs", "us", 1)
}
