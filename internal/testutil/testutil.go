// Package testutil holds what the tests of several packages share: test data and polling.
// Only tests import it.
package testutil

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// CPUTime is the process's user and system CPU time (getrusage RUSAGE_SELF), which benchmarks
// divide by b.N for a cpu-ns/op metric.
func CPUTime(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// SenseCodes decodes the sense key, ASC and ASCQ of sense data in fixed (70h, 71h) or
// descriptor (72h, 73h) format (SPC-4 4.5); ok is false when sense is neither or too short.
func SenseCodes(sense []byte) (key, asc, ascq uint8, ok bool) {
	switch {
	case len(sense) >= 14 && (sense[0]&0x7F == 0x70 || sense[0]&0x7F == 0x71):
		return sense[2] & 0x0F, sense[12], sense[13], true
	case len(sense) >= 4 && (sense[0]&0x7F == 0x72 || sense[0]&0x7F == 0x73):
		return sense[1] & 0x0F, sense[2], sense[3], true
	}
	return 0, 0, 0, false
}

// statusCheckCondition is the SAM-5 CHECK CONDITION status.
const statusCheckCondition = 0x02

// RequireSense checks that a command ended in CHECK CONDITION with sense data that carries the
// sense key, ASC and ASCQ given, whatever its format. It takes the raw status and sense bytes,
// so that it serves the tests of the device server and those of a whole target alike.
func RequireSense(t testing.TB, status uint8, sense []byte, key, asc, ascq uint8) {
	t.Helper()
	if status != statusCheckCondition {
		t.Fatalf("status %02Xh, want CHECK CONDITION; sense % x", status, sense)
	}
	k, a, q, ok := SenseCodes(sense)
	if !ok {
		t.Fatalf("no sense data in % x", sense)
	}
	if k != key || a != asc || q != ascq {
		t.Fatalf("sense key %Xh ASC/ASCQ %02Xh/%02Xh, want %Xh %02Xh/%02Xh (sense % x)", k, a, q, key, asc, ascq, sense)
	}
}
