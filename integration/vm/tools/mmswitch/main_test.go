package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMain plays the echo end when measure re-executes the test binary as the child process.
func TestMain(m *testing.M) {
	if isChild(os.Args) {
		if err := childMain(os.Args); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestMeasureBothModes(t *testing.T) {
	for _, mode := range []string{"threads", "processes"} {
		t.Run(mode, func(t *testing.T) {
			d, err := measure(mode, 200, 2)
			require.NoError(t, err)
			require.Positive(t, d)
		})
	}
}

func TestMeasureUnknownMode(t *testing.T) {
	_, err := measure("fibers", 1, 0)
	require.ErrorContains(t, err, `unknown mode "fibers"`)
}
