package scsi

import "sync"

// The task set: the rules by which a logical unit's commands enter it, wait and leave it. Its
// list is cmdList (taskset_list.go), the untracked path beside the list untrackedPath
// (taskset_untracked.go); what task management does to the set is in taskset_abort.go.

// taskSet orders the commands of one logical unit by their task attributes (SAM-5 8.6) and lets
// task management find them. There is one task set per logical unit shared by all nexuses (the
// control mode page reports TST 000b).
//
//   - SIMPLE runs unless an older ORDERED command is still in the set.
//   - ORDERED runs once every older command has completed; newer ones wait for it.
//   - HEAD OF QUEUE runs at once.
//
// Commands link into an intrusive list (cmdList) in arrival order (HEAD OF QUEUE at the front), so entering
// and leaving allocate nothing. When no ORDERED command is queued, which is the usual case,
// leaving wakes nobody and costs a list unlink.
//
// Commands that cannot wait long (LogicalUnit.enterAndRun says which) may run untracked
// instead, outside the list and without the lock: an atomic add each way. Whatever must see
// every command first closes that path and waits for the count to drop to zero
// (quiesceLocked): task management, which then finds the untracked commands ended rather than
// running, and an ORDERED command, which must wait for every older command anyway.
type taskSet struct {
	mu        *sync.Mutex // the logical unit's lock
	list      cmdList
	ordered   int // ORDERED commands in the list
	waiting   int // commands in the list not yet running
	aborters  int // task management functions waiting for running commands to finish
	done      sync.Cond
	untracked untrackedPath // the commands running outside the list (enterUntracked)
}

func (ts *taskSet) init(mu *sync.Mutex) {
	ts.mu = mu
	ts.done.L = mu
}

// enterUntracked lets a command run outside the list when nothing closes that path;
// leaveUntracked ends it. False: the command must enter.
func (ts *taskSet) enterUntracked() bool {
	if ts.untracked.enter() {
		return true
	}
	ts.leaveUntracked()
	return false
}

// leaveUntracked ends an untracked command.
func (ts *taskSet) leaveUntracked() {
	if ts.untracked.leave() {
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
		ts.list.pushFront(c)
		c.running = true
	case TaskOrdered:
		ts.ordered++
		ts.untracked.close()
		c.running = ts.list.head == nil && ts.untracked.running() == 0
		ts.list.pushBack(c)
	default:
		c.running = ts.ordered == 0
		ts.list.pushBack(c)
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
		ts.list.pushFront(c)
	case TaskOrdered:
		ts.untracked.close()
		if ts.list.head != nil || ts.untracked.running() != 0 {
			ts.untracked.open()
			return false, false
		}
		ts.ordered++
		ts.list.pushBack(c)
	default:
		if ts.ordered != 0 {
			return false, false
		}
		ts.list.pushBack(c)
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
	ts.list.remove(c)
	c.queued = false
	if c.Attr == TaskOrdered {
		ts.ordered--
		ts.untracked.open()
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
	for t := ts.list.head; t != nil; t = t.next {
		if !t.running {
			if t.aborted.Load() {
				continue // being removed by abortLocked: never started, and holds nobody back
			}
			if (t.Attr == TaskOrdered && !olderAny && ts.untracked.running() == 0) || (t.Attr != TaskOrdered && !olderOrdered) {
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
