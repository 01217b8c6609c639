package testutil

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPatternDiffersBySeedAndBlock(t *testing.T) {
	a, b := Pattern(4096, 1), Pattern(4096, 2)
	require.Len(t, a, 4096)
	require.Equal(t, a, Pattern(4096, 1), "the same seed gives the same data")
	require.NotEqual(t, a, b)
	for blk := 1; blk < 8; blk++ {
		require.NotEqual(t, a[:512], a[blk*512:(blk+1)*512], "block %d repeats block 0", blk)
	}
	require.NotEqual(t, Pattern(16, 0), make([]byte, 16), "seed 0 is not all zeroes")
}

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, "three polls", func() bool { n++; return n == 3 })
	require.Equal(t, 3, n)
}
