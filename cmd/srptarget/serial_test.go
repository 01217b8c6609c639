package main

import (
	"testing"

	"github.com/srptarget/srptarget/internal/daemon/daemontest"
	"github.com/stretchr/testify/require"
)

// TestValidateRefusesDuplicateSerials: two LUNs with one serial (one reservation state, one
// APTPL file, one WWID) are refused by validate, with the lines of both.
func TestValidateRefusesDuplicateSerials(t *testing.T) {
	file := writeFile(t, "dup.yaml", daemontest.WithSerials("disk1", "disk1"))
	_, errOut, err := run(t, noDeps, "validate", "--config", file)
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, errOut, file+`:16: luns[1].serial: "disk1" is also the serial of luns[0] (line 12): two LUNs with one serial share one persistent reservation state`)
}
