package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the daemon the commands talk to, the
// engine's channels and the fabric must all stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
