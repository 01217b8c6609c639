package srp_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every channel goroutine, worker,
// task management goroutine and fabric goroutine must stop when the target shuts down.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
