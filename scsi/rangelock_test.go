package scsi

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
)

// waitingCount reports how many goroutines wait in rl.
func (rl *rangeLock) waitingCount() int {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.waiters
}

// lockAsync takes the range in a goroutine and returns a channel that yields the slot once it is
// held.
func lockAsync(rl *rangeLock, lba, n uint64, exclusive bool) <-chan int {
	ch := make(chan int, 1)
	go func() { ch <- rl.lock(lba, n, exclusive) }()
	return ch
}

func requireGranted(t *testing.T, ch <-chan int) int {
	t.Helper()
	select {
	case slot := <-ch:
		return slot
	case <-time.After(10 * time.Second):
		t.Fatal("lock not granted")
		return -1
	}
}

// requireNotGranted checks that a request has not been granted. The callers only use it when the
// request cannot be granted (a conflicting range is held), so a pass is never luck.
func requireNotGranted(t *testing.T, ch <-chan int) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("lock granted while a conflicting range is held")
	default:
	}
}

// TestRangeLockShared checks that shared ranges never wait for each other, overlapping or not,
// and that an exclusive range that overlaps nothing held does not wait.
func TestRangeLockShared(t *testing.T) {
	var rl rangeLock
	a := rl.lock(0, 10, false)
	b := rl.lock(5, 10, false)
	c := rl.lock(5, 1, false)
	d := rl.lock(15, 5, true) // [15,20) touches b's end but does not overlap it
	e := rl.lock(20, 1, true)
	for _, s := range []int{a, b, c, d, e} {
		rl.unlock(s)
	}
	require.Zero(t, rl.exclusive)
	require.Equal(t, [rangeLockSlots / 64]uint64{}, rl.used)
}

// TestRangeLockExclusiveWaitsForHeld checks that an exclusive range waits for every overlapping
// held range, shared or exclusive, and that a held exclusive range holds off overlapping
// requests of both kinds but not disjoint ones.
func TestRangeLockExclusiveWaitsForHeld(t *testing.T) {
	var rl rangeLock
	s1 := rl.lock(0, 10, false)
	s2 := rl.lock(8, 4, false)
	x := lockAsync(&rl, 9, 1, true) // overlaps both
	testutil.WaitFor(t, "the exclusive request to wait", func() bool { return rl.waitingCount() == 1 })
	rl.unlock(s1)
	requireNotGranted(t, x) // s2 still held
	rl.unlock(s2)
	xs := requireGranted(t, x)

	y := lockAsync(&rl, 0, 10, false) // overlaps xs
	z := lockAsync(&rl, 9, 5, true)   // overlaps xs
	testutil.WaitFor(t, "both requests to wait", func() bool { return rl.waitingCount() == 2 })
	disjoint := rl.lock(20, 1, false)
	rl.unlock(disjoint)
	requireNotGranted(t, y)
	requireNotGranted(t, z)
	rl.unlock(xs)
	// z only waits for held ranges, y waits for z (pending or held): z comes first.
	zs := requireGranted(t, z)
	requireNotGranted(t, y)
	rl.unlock(zs)
	rl.unlock(requireGranted(t, y))
	require.Zero(t, rl.exclusive)
}

// TestRangeLockNoStarvation checks that a shared request overlapping a waiting exclusive one
// waits behind it, so that a stream of writes cannot keep a COMPARE AND WRITE out forever.
func TestRangeLockNoStarvation(t *testing.T) {
	var rl rangeLock
	s := rl.lock(0, 10, false)
	e := lockAsync(&rl, 5, 1, true)
	testutil.WaitFor(t, "the exclusive request to wait", func() bool { return rl.waitingCount() == 1 })
	s2 := lockAsync(&rl, 0, 10, false) // only a shared range is held, yet it waits
	testutil.WaitFor(t, "the second shared request to wait", func() bool { return rl.waitingCount() == 2 })
	rl.unlock(s)
	es := requireGranted(t, e)
	requireNotGranted(t, s2) // e is held
	rl.unlock(es)
	rl.unlock(requireGranted(t, s2))
}

// TestRangeLockExclusiveSerialised checks that two overlapping exclusive requests waiting for the
// same held range are granted one at a time.
func TestRangeLockExclusiveSerialised(t *testing.T) {
	var rl rangeLock
	s := rl.lock(0, 4, false)
	e1 := lockAsync(&rl, 0, 2, true)
	e2 := lockAsync(&rl, 1, 2, true)
	testutil.WaitFor(t, "both exclusive requests to wait", func() bool { return rl.waitingCount() == 2 })
	rl.unlock(s)
	var first int
	var second <-chan int
	select {
	case first = <-e1:
		second = e2
	case first = <-e2:
		second = e1
	case <-time.After(10 * time.Second):
		t.Fatal("neither exclusive request granted")
	}
	requireNotGranted(t, second) // first is held
	rl.unlock(first)
	rl.unlock(requireGranted(t, second))
}

// TestRangeLockSlotsExhausted checks that when every slot is taken a request waits for one to
// be released instead of failing.
func TestRangeLockSlotsExhausted(t *testing.T) {
	var rl rangeLock
	slots := make([]int, rangeLockSlots)
	for i := range slots {
		slots[i] = rl.lock(uint64(i), 1, false)
	}
	extra := lockAsync(&rl, 10000, 1, false)
	testutil.WaitFor(t, "the request to wait for a slot", func() bool { return rl.waitingCount() == 1 })
	requireNotGranted(t, extra) // every slot is held
	rl.unlock(slots[77])
	require.Equal(t, 77, requireGranted(t, extra))
}

// TestRangeLockAllocs checks that taking and releasing ranges allocates nothing, on the fast path
// (no exclusive range anywhere) and on the path that scans the held ranges.
func TestRangeLockAllocs(t *testing.T) {
	var rl rangeLock
	allocs := testing.AllocsPerRun(1000, func() {
		a := rl.lock(0, 8, false)  // no exclusive range: no scan
		b := rl.lock(20, 8, true)  // exclusive: scans the held ranges
		c := rl.lock(40, 8, false) // shared while an exclusive range is held: scans
		rl.unlock(c)
		rl.unlock(b)
		rl.unlock(a)
	})
	require.Zero(t, allocs)
}

// TestRangeLockStress takes random shared and exclusive ranges from many goroutines and checks,
// for every block, that an exclusive holder is alone and that shared holders never overlap an
// exclusive one.
func TestRangeLockStress(t *testing.T) {
	const (
		blocks     = 64
		goroutines = 16
		rounds     = 500
	)
	var rl rangeLock
	var shared, excl [blocks]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < rounds; i++ {
				lba := r.Uint64N(blocks)
				n := 1 + r.Uint64N(min(8, blocks-lba))
				exclusive := r.IntN(4) == 0
				slot := rl.lock(lba, n, exclusive)
				for b := lba; b < lba+n; b++ {
					if exclusive {
						if excl[b].Add(1) != 1 || shared[b].Load() != 0 {
							errs <- fmt.Errorf("block %d: exclusive holder not alone", b)
						}
					} else {
						shared[b].Add(1)
						if excl[b].Load() != 0 {
							errs <- fmt.Errorf("block %d: shared holder beside an exclusive one", b)
						}
					}
				}
				for b := lba; b < lba+n; b++ {
					if exclusive {
						excl[b].Add(-1)
					} else {
						shared[b].Add(-1)
					}
				}
				rl.unlock(slot)
			}
		}(uint64(g))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, rl.exclusive)
	require.Equal(t, [rangeLockSlots / 64]uint64{}, rl.used)
}
