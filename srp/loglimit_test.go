package srp

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLogLimiter(t *testing.T) {
	l := newLogLimiter(2, time.Second)
	t0 := time.Unix(1000, 0)
	for i, tc := range []struct {
		key        string
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{"a", 0, true, 0},
		{"a", 100 * time.Millisecond, true, 0},
		{"a", 200 * time.Millisecond, false, 0}, // burst used up
		{"b", 200 * time.Millisecond, true, 0},  // another key has its own budget
		{"a", 900 * time.Millisecond, false, 0},
		{"a", 1100 * time.Millisecond, true, 2}, // new window: the two left out are counted
		{"a", 1200 * time.Millisecond, true, 0},
		{"a", 1300 * time.Millisecond, false, 0},
	} {
		ok, n := l.allow(tc.key, t0.Add(tc.at))
		require.Equal(t, tc.ok, ok, "step %d", i)
		require.Equal(t, tc.suppressed, n, "step %d", i)
	}
}

func TestLogLimiterBoundedKeys(t *testing.T) {
	l := newLogLimiter(1, time.Minute)
	now := time.Unix(1000, 0)
	for i := range 5 * logLimiterKeys {
		ok, _ := l.allow(fmt.Sprint(i), now)
		require.True(t, ok)
	}
	require.LessOrEqual(t, len(l.keys), logLimiterKeys)
}
