package loglimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWindow(t *testing.T) {
	w := Window{Burst: 2, Every: time.Second}
	for i, tc := range []struct {
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{0, true, 0},
		{100 * time.Millisecond, true, 0},
		{200 * time.Millisecond, false, 0}, // burst used up
		{900 * time.Millisecond, false, 0},
		{1100 * time.Millisecond, true, 2}, // new window: the two left out are counted
		{1200 * time.Millisecond, true, 0},
		{1300 * time.Millisecond, false, 0},
	} {
		ok, n := w.Allow(tc.at)
		require.Equal(t, tc.ok, ok, "step %d", i)
		require.Equal(t, tc.suppressed, n, "step %d", i)
	}
	one := Window{Every: time.Second} // Burst unset: one line per window
	ok, _ := one.Allow(5 * time.Second)
	require.True(t, ok, "the first line of a clock far from its epoch")
	ok, _ = one.Allow(5*time.Second + time.Millisecond)
	require.False(t, ok)
}

func TestKeyed(t *testing.T) {
	k := NewKeyed(2, time.Second)
	t0 := time.Unix(1000, 0)
	for i, tc := range []struct {
		key        string
		at         time.Duration
		ok         bool
		suppressed int
	}{
		{"a", 0, true, 0},
		{"a", 100 * time.Millisecond, true, 0},
		{"a", 200 * time.Millisecond, false, 0},
		{"b", 200 * time.Millisecond, true, 0}, // another key has its own budget
		{"a", 1100 * time.Millisecond, true, 1},
	} {
		ok, n := k.Allow(tc.key, t0.Add(tc.at))
		require.Equal(t, tc.ok, ok, "step %d", i)
		require.Equal(t, tc.suppressed, n, "step %d", i)
	}
}

func TestKeyedBoundsItsKeys(t *testing.T) {
	k := NewKeyed(1, time.Minute)
	now := time.Unix(1000, 0)
	for i := range 5 * MaxKeys {
		ok, _ := k.Allow(fmt.Sprint(i), now)
		require.True(t, ok)
	}
	require.LessOrEqual(t, len(k.keys), MaxKeys)
}

func TestLocked(t *testing.T) {
	l := NewLocked(1, time.Hour)
	ok, _ := l.Allow()
	require.True(t, ok)
	for range 3 {
		ok, _ = l.Allow()
		require.False(t, ok)
	}
}
