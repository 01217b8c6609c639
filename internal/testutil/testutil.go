// Package testutil holds what the tests of several packages share: test data and polling.
// Only tests import it.
package testutil

import (
	"testing"
	"time"
)

// Pattern returns n bytes of a pseudo-random sequence (xorshift32) that seed selects: blocks
// written to or read from the wrong place, or data of another writer, show as a mismatch.
func Pattern(n, seed int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1 // never 0, the fixed point of xorshift
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// WaitFor polls cond until it holds, failing the test after 10 seconds. Tests use it to wait
// for a state they can read (a goroutine blocked at a gate, a counter reached), never for time
// to pass.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
