package scsi

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// rangeLockSlots bounds the LBA ranges held or waited for at once on one logical unit. A command
// that finds every slot taken waits for one to be released, so the bound throttles but never
// fails; it is well above the queue depth an SRP initiator keeps on one LUN.
const rangeLockSlots = 512

// rangeLock makes COMPARE AND WRITE atomic with respect to the commands that modify the medium
// (SBC-3: no other command may change the blocks between the compare and the write).
//
// Commands that write (WRITE, WRITE AND VERIFY, WRITE SAME, UNMAP) take their LBA range shared:
// they never wait for each other, since SAM-5 gives no ordering between overlapping SIMPLE
// commands anyway. COMPARE AND WRITE takes its range exclusive: it waits until no overlapping
// range is held, and holds off overlapping shared and exclusive requests until it is done.
//
// An exclusive request waits only for ranges already held, never for requests that wait
// themselves, and a shared request that overlaps a waiting exclusive one waits behind it, so a
// stream of writes cannot starve a COMPARE AND WRITE and no cycle of waiters can form.
//
// Ranges live in a fixed array of slots with a bitmap of the used ones: taking and releasing a
// range allocates nothing. While no exclusive range is held or wanted, which is the normal case,
// a shared request does not even look at the others; one that will not hold its range long
// (lockShort) is then only counted, with one atomic add each way, and an exclusive request
// waits for every range so counted, overlapping or not.
type rangeLock struct {
	once sync.Once
	mu   sync.Mutex
	cond sync.Cond // signalled when a range is released and someone waits

	used      [rangeLockSlots / 64]uint64
	slots     [rangeLockSlots]lockedRange
	exclusive int // exclusive ranges, held or pending
	waiters   int // goroutines in cond.Wait
	// short counts, in its low 32 bits, the shared ranges taken by lockShort without a slot,
	// and above them the exclusive ranges, held or pending (rl.exclusive again, in the word
	// that a shared request's add reads back).
	short atomic.Uint64
}

const (
	shortShared    uint64 = 1
	shortExclusive uint64 = 1 << 32
	// shortSlot is the slot lockShort returns for a range it only counted.
	shortSlot = -1
)

// lockShort is lock(lba, n, false) for a range that is held briefly (a write to a backstore
// that never blocks): while no exclusive range is held or wanted it only counts the range.
func (rl *rangeLock) lockShort(lba, n uint64) int {
	if rl.short.Add(shortShared) < shortExclusive {
		return shortSlot
	}
	rl.unlockShort()
	return rl.lock(lba, n, false)
}

// unlockShort releases a range lockShort counted; the last one out while an exclusive request
// waits wakes it.
func (rl *rangeLock) unlockShort() {
	if v := rl.short.Add(^(shortShared - 1)); uint32(v) == 0 && v != 0 {
		rl.mu.Lock()
		if rl.waiters > 0 {
			rl.cond.Broadcast()
		}
		rl.mu.Unlock()
	}
}

// addExclusiveLocked counts an exclusive range, held or pending, and dropExclusiveLocked
// uncounts it; rl.mu held.
func (rl *rangeLock) addExclusiveLocked() {
	rl.exclusive++
	rl.short.Add(shortExclusive)
}

func (rl *rangeLock) dropExclusiveLocked() {
	rl.exclusive--
	rl.short.Add(^(shortExclusive - 1))
}

// lockedRange is one slot: the blocks [start, end), whether they are taken exclusive, and whether
// the request still waits (pending) or holds them.
type lockedRange struct {
	start, end uint64
	exclusive  bool
	pending    bool
}

func (rl *rangeLock) init() { rl.cond.L = &rl.mu }

// lock takes the n > 0 blocks from lba, shared or exclusive, waiting as long as a conflicting
// range is held. It returns the slot to pass to unlock.
func (rl *rangeLock) lock(lba, n uint64, exclusive bool) int {
	rl.once.Do(rl.init)
	rl.mu.Lock()
	slot := -1
	for {
		if slot < 0 {
			slot = rl.claimLocked()
			if slot >= 0 {
				rl.slots[slot] = lockedRange{start: lba, end: lba + n, exclusive: exclusive, pending: true}
				if exclusive {
					rl.addExclusiveLocked()
				}
			}
		}
		if slot >= 0 && !rl.conflictLocked(slot) {
			break
		}
		rl.waiters++
		rl.cond.Wait()
		rl.waiters--
	}
	rl.slots[slot].pending = false
	rl.mu.Unlock()
	return slot
}

// tryLock is lock for a caller that must not wait: it takes the range only when that needs no
// waiting, and otherwise takes nothing and returns -1.
func (rl *rangeLock) tryLock(lba, n uint64, exclusive bool) int {
	rl.once.Do(rl.init)
	rl.mu.Lock()
	defer rl.mu.Unlock()
	slot := rl.claimLocked()
	if slot < 0 {
		return -1
	}
	rl.slots[slot] = lockedRange{start: lba, end: lba + n, exclusive: exclusive}
	if !exclusive && rl.exclusive == 0 {
		return slot
	}
	rl.slots[slot].pending = true
	if exclusive {
		rl.addExclusiveLocked()
	}
	if rl.conflictLocked(slot) {
		if exclusive {
			rl.dropExclusiveLocked()
		}
		rl.used[slot/64] &^= 1 << (slot % 64)
		return -1
	}
	rl.slots[slot].pending = false
	return slot
}

// unlock releases the range of slot and wakes the requests that wait.
func (rl *rangeLock) unlock(slot int) {
	if slot == shortSlot {
		rl.unlockShort()
		return
	}
	rl.mu.Lock()
	if rl.slots[slot].exclusive {
		rl.dropExclusiveLocked()
	}
	rl.used[slot/64] &^= 1 << (slot % 64)
	if rl.waiters > 0 {
		rl.cond.Broadcast()
	}
	rl.mu.Unlock()
}

// claimLocked marks a free slot used and returns it, or -1 when there is none.
func (rl *rangeLock) claimLocked() int {
	for i, w := range rl.used {
		if w != ^uint64(0) {
			b := bits.TrailingZeros64(^w)
			rl.used[i] |= 1 << b
			return i*64 + b
		}
	}
	return -1
}

// conflictLocked reports whether the pending request in slot must wait: a shared request for an
// overlapping exclusive range (held or pending), an exclusive one for any overlapping held range
// and for any range lockShort counted.
func (rl *rangeLock) conflictLocked(slot int) bool {
	me := &rl.slots[slot]
	if !me.exclusive && rl.exclusive == 0 {
		return false
	}
	if me.exclusive && uint32(rl.short.Load()) != 0 {
		return true
	}
	for i, w := range rl.used {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			w &^= 1 << b
			j := i*64 + b
			if j == slot {
				continue
			}
			o := &rl.slots[j]
			if o.start >= me.end || me.start >= o.end {
				continue
			}
			if me.exclusive {
				if !o.pending {
					return true
				}
			} else if o.exclusive {
				return true
			}
		}
	}
	return false
}
