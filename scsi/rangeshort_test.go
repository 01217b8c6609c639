package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
)

// TestRangeLockShort checks lockShort: with no exclusive range held or wanted, a shared range is
// only counted; an exclusive request then waits for every counted range, overlapping or not,
// and while it waits or holds, shared requests take slots and wait behind it only where they
// overlap it.
func TestRangeLockShort(t *testing.T) {
	var rl rangeLock
	a := rl.lockShort(0, 10)
	b := rl.lockShort(100, 10) // disjoint from what follows
	require.Equal(t, shortSlot, a)
	require.Equal(t, shortSlot, b)
	require.Equal(t, [rangeLockSlots / 64]uint64{}, rl.used, "counted, not in a slot")

	x := lockAsync(&rl, 50, 1, true) // overlaps neither
	testutil.WaitFor(t, "the exclusive request to wait", func() bool { return rl.waitingCount() == 1 })
	rl.unlock(a)
	requireNotGranted(t, x) // b still counted
	// A shared request now takes a slot: a disjoint one is granted at once, an overlapping
	// one waits behind the exclusive request.
	c := rl.lockShort(200, 1)
	require.NotEqual(t, shortSlot, c)
	d := make(chan int, 1)
	go func() { d <- rl.lockShort(50, 1) }()
	testutil.WaitFor(t, "the overlapping shared request to wait", func() bool { return rl.waitingCount() == 2 })
	rl.unlock(b)
	xs := requireGranted(t, x)
	requireNotGranted(t, d)
	rl.unlock(xs)
	ds := requireGranted(t, d)
	require.NotEqual(t, shortSlot, ds, "taken while the exclusive one was wanted")
	rl.unlock(ds)
	rl.unlock(c)

	// Nothing exclusive left: counted again.
	e := rl.lockShort(50, 1)
	require.Equal(t, shortSlot, e)
	rl.unlock(e)
	require.Zero(t, rl.exclusive)
	require.Zero(t, rl.short.Load())
	require.Equal(t, [rangeLockSlots / 64]uint64{}, rl.used)
}

// TestRangeLockShortTry checks that tryLock's exclusive request fails while a counted range
// is held, and leaves nothing behind.
func TestRangeLockShortTry(t *testing.T) {
	var rl rangeLock
	a := rl.lockShort(0, 10)
	require.Equal(t, -1, rl.tryLock(20, 1, true))
	require.Zero(t, rl.exclusive)
	require.Equal(t, uint64(1), rl.short.Load())
	rl.unlock(a)
	x := rl.tryLock(20, 1, true)
	require.GreaterOrEqual(t, x, 0)
	s := rl.lockShort(0, 1)
	require.NotEqual(t, shortSlot, s, "not counted while an exclusive range is held")
	rl.unlock(s)
	rl.unlock(x)
}
