package scsi

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
)

// TestRetireWaitsForHolds: a retiring logical unit refuses new holds, closes its backstore only
// after the last hold is released, and reports that it drained.
func TestRetireWaitsForHolds(t *testing.T) {
	lu := newTestLU(t, 64, 512, nil)
	require.True(t, lu.Hold())
	require.True(t, lu.Hold())
	require.EqualValues(t, 2, lu.Holds())

	type result struct {
		drained bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		d, err := lu.Retire(context.Background())
		done <- result{d, err}
	}()
	require.Eventually(t, func() bool { return lu.retiring.Load() }, 5*time.Second, time.Millisecond)
	require.False(t, lu.Hold(), "a hold after Retire began")
	require.EqualValues(t, 2, lu.Holds(), "a refused hold leaves no count behind")

	lu.Release()
	select {
	case <-done:
		t.Fatal("Retire returned with a command still holding the logical unit")
	case <-time.After(50 * time.Millisecond):
	}
	// The backstore still serves the command that holds it.
	require.NoError(t, lu.bs.ReadAt(make([]byte, 512), 0))

	lu.Release()
	select {
	case r := <-done:
		require.True(t, r.drained)
		require.NoError(t, r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("Retire did not return after the last release")
	}
	require.ErrorIs(t, lu.bs.ReadAt(make([]byte, 512), 0), backstore.ErrClosed)
}

// TestRetireWithoutHolds closes at once.
func TestRetireWithoutHolds(t *testing.T) {
	lu := newTestLU(t, 64, 512, nil)
	drained, err := lu.Retire(context.Background())
	require.True(t, drained)
	require.NoError(t, err)
	require.False(t, lu.Hold())
	require.ErrorIs(t, lu.bs.ReadAt(make([]byte, 512), 0), backstore.ErrClosed)
}

// TestRetireTimeout: when ctx ends before the holds are released the backstore is closed
// anyway, drained is false, and a late release does not panic.
func TestRetireTimeout(t *testing.T) {
	lu := newTestLU(t, 64, 512, nil)
	require.True(t, lu.Hold())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	drained, err := lu.Retire(ctx)
	require.False(t, drained)
	require.NoError(t, err)
	require.ErrorIs(t, lu.bs.ReadAt(make([]byte, 512), 0), backstore.ErrClosed)
	lu.Release()
	require.EqualValues(t, 0, lu.Holds())
}
