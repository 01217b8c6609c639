package daemon

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the daemon's Serve loops, backstore
// closers and signal watcher, the engine's channels and the fabric must all stop. It is also
// the helper process of TestAcceptSurvivesFileDescriptorExhaustion and of the tests that talk
// to the control socket as another user (controlClient).
func TestMain(m *testing.M) {
	if path := os.Getenv(emfileHelperEnv); path != "" {
		os.Exit(emfileHelper(path))
	}
	if as := os.Getenv(controlAsEnv); as != "" {
		os.Exit(controlClient(as, os.Getenv(controlPathEnv)))
	}
	goleak.VerifyTestMain(m)
}
