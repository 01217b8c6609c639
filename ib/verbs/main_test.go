package verbs

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine of the package (the RDMA/CM loop, the completion and async event waiters)
// must be gone once everything is closed.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
