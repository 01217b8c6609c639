//go:build !rbd

package backstore

import "testing"

// TestRBD stands for the RBD tests (rbd_test.go), which this build leaves out.
func TestRBD(t *testing.T) {
	t.Skip("built without the build tag rbd: the RBD backstore and its tests need librbd-dev (make test-rbd)")
}
