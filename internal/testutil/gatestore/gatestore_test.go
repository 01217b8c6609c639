package gatestore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/internal/testutil"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	mem, err := backstore.NewMemory(8*512, 512)
	require.NoError(t, err)
	return New(mem)
}

// TestHold checks that a held store keeps reads and writes until Release, counts them in
// Entered, and lets everything through once released.
func TestHold(t *testing.T) {
	g := newStore(t)
	require.NoError(t, g.WriteAt(make([]byte, 512), 0, false), "open: no wait")
	g.Hold()
	require.Zero(t, g.Entered.Load(), "Hold restarts the count")
	done := make(chan error, 2)
	go func() { done <- g.ReadAt(make([]byte, 512), 512) }()
	go func() { done <- g.WriteAt(make([]byte, 512), 1024, true) }()
	testutil.WaitFor(t, "two operations at the gate", func() bool { return g.Entered.Load() == 2 })
	g.Hold() // holding again keeps the same gate
	require.Empty(t, done)
	g.Release()
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	g.Release() // releasing an open store is harmless
	require.ElementsMatch(t, []string{"write 0", "read 512", "write 1024"}, g.TakeOrder())
	require.Empty(t, g.TakeOrder())
}

// TestGate checks that a gate at one offset stops only the I/O there, announces it, and records
// the order in which I/O passed.
func TestGate(t *testing.T) {
	g := newStore(t)
	open := g.Gate(512)
	done := make(chan error, 1)
	go func() { done <- g.WriteAt(make([]byte, 512), 512, false) }()
	g.RequireEntered(t, 512)
	require.NoError(t, g.ReadAt(make([]byte, 512), 0), "another offset passes")
	require.Empty(t, done)
	open()
	open() // opening twice is harmless
	require.NoError(t, <-done)
	require.Equal(t, []string{"read 0", "write 512"}, g.TakeOrder())
}
