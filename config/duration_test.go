package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDuration(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"30s", 30 * time.Second, "30s"},
		{"0", 0, "0s"},
		{"50us", 50 * time.Microsecond, "50us"},
		{"1h", time.Hour, "1h"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"2m", 2 * time.Minute, "2m"},
		{"1m30s", 90 * time.Second, "1m30s"},
	} {
		d, err := ParseDuration(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, time.Duration(d), tt.in)
		require.Equal(t, tt.out, d.String(), tt.in)
		again, err := ParseDuration(d.String())
		require.NoError(t, err)
		require.Equal(t, d, again, "String reads back")
	}
	for _, bad := range []string{"", "30", "-1s", "ten seconds", "1d"} {
		_, err := ParseDuration(bad)
		require.ErrorContains(t, err, "is not a duration", bad)
	}
}

func TestDurationInTheFile(t *testing.T) {
	_, err := Parse("t.yaml", []byte("listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n  rdma_timeout: soon\n  poll_window: [1]\n"))
	require.Equal(t, []string{
		`t.yaml:3: limits.rdma_timeout: "soon" is not a duration: write a number and a unit (ns, us, ms, s, m, h), such as 30s or 1m30s`,
		`t.yaml:4: limits.poll_window: want a duration such as 30s, not a list`,
	}, errorLines(t, err))
}

// TestLimitChanges: a reload compares the limits as the engine gets them.
func TestLimitChanges(t *testing.T) {
	parse := func(limits string) *Limits {
		c, err := Parse("t.yaml", []byte("listeners: [{address: 0.0.0.0, port: 1}]\nlimits:\n"+limits))
		require.NoError(t, err)
		return &c.Limits
	}
	base := parse("  credits: 128\n")
	require.Empty(t, LimitChanges(base, parse("  max_initiator_buffer: 16MiB\n")), "25% of 64MiB is 16MiB")
	require.Empty(t, LimitChanges(base, parse("  rdma_timeout: 30000ms\n")))
	require.Equal(t, []LimitChange{{Key: "credits", Old: "128", New: "64"}, {Key: "idle_timeout", Old: "off", New: "10m"}},
		LimitChanges(base, parse("  credits: 64\n  idle_timeout: 10m\n")))
}
