package scsi

import (
	"sync"
	"sync/atomic"
)

// taskSet orders the commands of one logical unit by their task attributes (SAM-5 8.6) and lets
// task management find them. There is one task set per logical unit shared by all nexuses (the
// control mode page reports TST 000b).
//
//   - SIMPLE runs unless an older ORDERED command is still in the set.
//   - ORDERED runs once every older command has completed; newer ones wait for it.
//   - HEAD OF QUEUE runs at once.
//
// Commands link into an intrusive list in arrival order (HEAD OF QUEUE at the front), so entering
// and leaving allocate nothing. When no ORDERED command is queued, which is the usual case,
// leaving wakes nobody and costs a list unlink.
//
// Commands that cannot wait long (LogicalUnit.enterAndRun says which) may run untracked
// instead, outside the list and without the lock: an atomic add each way. Whatever must see
// every command first closes that path and waits for the count to drop to zero
// (quiesceLocked): task management, which then finds the untracked commands ended rather than
// running, and an ORDERED command, which must wait for every older command anyway.
type taskSet struct {
	mu         *sync.Mutex // the logical unit's lock
	head, tail *Command
	ordered    int // ORDERED commands in the list
	waiting    int // commands in the list not yet running
	aborters   int // task management functions waiting for running commands to finish
	done       sync.Cond
	// untracked counts, in its low 32 bits, the commands running untracked, and above them
	// what keeps new ones from that path (ORDERED commands in the list, quiesceLocked
	// calls): one word, so that a command's add tells it whether the path was open.
	untracked atomic.Uint64
}

const (
	untrackedCmd    uint64 = 1
	untrackedCloser uint64 = 1 << 32
)

// closeUntracked and openUntracked add and remove one reason to keep commands from the
// untracked path; runningUntracked reports how many still run there.
func (ts *taskSet) closeUntracked()          { ts.untracked.Add(untrackedCloser) }
func (ts *taskSet) openUntracked()           { ts.untracked.Add(^(untrackedCloser - 1)) }
func (ts *taskSet) runningUntracked() uint32 { return uint32(ts.untracked.Load()) }

func (ts *taskSet) init(mu *sync.Mutex) {
	ts.mu = mu
	ts.done.L = mu
}

// enterUntracked lets a command run outside the list when nothing closes that path;
// leaveUntracked ends it. False: the command must enter.
func (ts *taskSet) enterUntracked() bool {
	if ts.untracked.Add(untrackedCmd) < untrackedCloser {
		return true
	}
	ts.leaveUntracked()
	return false
}

// leaveUntracked ends an untracked command.
func (ts *taskSet) leaveUntracked() {
	if v := ts.untracked.Add(^(untrackedCmd - 1)); uint32(v) == 0 && v != 0 {
		ts.untrackedGone() // the last one out of a closed path
	}
}

// untrackedGone wakes what waits for the untracked commands to end (quiesceLocked, an
// ORDERED command) once the last one has.
func (ts *taskSet) untrackedGone() {
	ts.mu.Lock()
	if ts.waiting > 0 {
		ts.startRunnableLocked()
	}
	if ts.aborters > 0 {
		ts.done.Broadcast()
	}
	ts.mu.Unlock()
}

// quiesceLocked closes the untracked path and waits until no command runs untracked: from
// then on every command is in the list. ts.mu held (released while it waits); reopen undoes
// it.
func (ts *taskSet) quiesceLocked() {
	ts.closeUntracked()
	for ts.runningUntracked() != 0 {
		ts.aborters++
		ts.done.Wait()
		ts.aborters--
	}
}

// reopen undoes a quiesceLocked.
func (ts *taskSet) reopen() { ts.openUntracked() }

// enter adds c to the set and waits until its attribute lets it run. It returns false when a
// task management function aborted c while it waited; c is then no longer in the set.
func (ts *taskSet) enter(c *Command) bool {
	ts.mu.Lock()
	if c.aborted.Load() {
		ts.mu.Unlock()
		return false
	}
	c.queued = true
	switch c.Attr {
	case TaskHeadOfQueue:
		ts.pushFront(c)
		c.running = true
	case TaskOrdered:
		ts.ordered++
		ts.closeUntracked()
		c.running = ts.head == nil && ts.runningUntracked() == 0
		ts.pushBack(c)
	default:
		c.running = ts.ordered == 0
		ts.pushBack(c)
	}
	if c.running {
		ts.mu.Unlock()
		return true
	}
	ts.waiting++
	if c.wake == nil {
		c.wake = make(chan struct{}, 1)
	}
	ts.mu.Unlock()
	<-c.wake
	return !c.aborted.Load() || c.running
}

// tryEnter is enter for a caller that must not wait: when c's attribute lets it run now it
// joins the set, running, and entered is true; otherwise it stays out of the set, and the
// caller hands it to a goroutine that may wait in enter. aborted reports that task management
// aborted c already.
func (ts *taskSet) tryEnter(c *Command) (entered, aborted bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if c.aborted.Load() {
		return false, true
	}
	switch c.Attr {
	case TaskHeadOfQueue:
		ts.pushFront(c)
	case TaskOrdered:
		ts.closeUntracked()
		if ts.head != nil || ts.runningUntracked() != 0 {
			ts.openUntracked()
			return false, false
		}
		ts.ordered++
		ts.pushBack(c)
	default:
		if ts.ordered != 0 {
			return false, false
		}
		ts.pushBack(c)
	}
	c.queued, c.running = true, true
	return true, false
}

// leave removes a command that ran from the set and starts those it held back.
func (ts *taskSet) leave(c *Command) {
	ts.mu.Lock()
	ts.removeLocked(c)
	if ts.aborters > 0 {
		ts.done.Broadcast()
	}
	ts.mu.Unlock()
}

// removeLocked unlinks c and wakes the commands that may now run.
func (ts *taskSet) removeLocked(c *Command) {
	if !c.queued {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		ts.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		ts.tail = c.prev
	}
	c.prev, c.next, c.queued = nil, nil, false
	if c.Attr == TaskOrdered {
		ts.ordered--
		ts.openUntracked()
	}
	if !c.running {
		ts.waiting--
	}
	if ts.waiting > 0 {
		ts.startRunnableLocked()
	}
}

// startRunnableLocked wakes every waiting command whose attribute now lets it run.
func (ts *taskSet) startRunnableLocked() {
	olderAny, olderOrdered := false, false
	for t := ts.head; t != nil; t = t.next {
		if !t.running {
			if t.aborted.Load() {
				continue // being removed by abortLocked: never started, and holds nobody back
			}
			if (t.Attr == TaskOrdered && !olderAny && ts.runningUntracked() == 0) || (t.Attr != TaskOrdered && !olderOrdered) {
				t.running = true
				ts.waiting--
				t.wake <- struct{}{}
			}
		}
		olderAny = true
		if t.Attr == TaskOrdered {
			olderOrdered = true
		}
	}
}

func (ts *taskSet) pushBack(c *Command) {
	c.prev, c.next = ts.tail, nil
	if ts.tail != nil {
		ts.tail.next = c
	} else {
		ts.head = c
	}
	ts.tail = c
}

func (ts *taskSet) pushFront(c *Command) {
	c.prev, c.next = nil, ts.head
	if ts.head != nil {
		ts.head.prev = c
	} else {
		ts.tail = c
	}
	ts.head = c
}

// abortLocked aborts every command for which match is true: waiting ones leave the set at once
// (their enter returns false), running ones are marked and waited for, so that when it returns
// none of them touches its buffers any more (untracked commands end first: quiesceLocked). It
// returns how many commands it aborted.
func (ts *taskSet) abortLocked(match func(*Command) bool) int {
	ts.quiesceLocked()
	defer ts.reopen()
	// Mark every match before removing any: removing a waiting command can make the commands
	// behind it runnable, and those that this function aborts too must not start.
	n := 0
	for t := ts.head; t != nil; t = t.next {
		if match(t) {
			n++
			t.aborted.Store(true)
		}
	}
	for t := ts.head; t != nil; {
		next := t.next
		if !t.running && match(t) {
			ts.removeLocked(t)
			t.wake <- struct{}{}
		}
		t = next
	}
	for {
		busy := false
		for t := ts.head; t != nil; t = t.next {
			if t.aborted.Load() && match(t) {
				busy = true
				break
			}
		}
		if !busy {
			return n
		}
		ts.aborters++
		ts.done.Wait()
		ts.aborters--
	}
}

// findLocked returns the command of nexus n with tag, or nil. An untracked command is found
// ended (quiesceLocked).
func (ts *taskSet) findLocked(n *Nexus, tag uint64) *Command {
	ts.quiesceLocked()
	defer ts.reopen()
	for t := ts.head; t != nil; t = t.next {
		if t.Nexus == n && t.Tag == tag {
			return t
		}
	}
	return nil
}
