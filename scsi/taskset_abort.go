package scsi

// What task management does to the task set (taskSet): it closes the untracked path and waits
// for the commands on it to end, so that every command it can concern is in the list, then
// aborts the commands it names or finds one by its tag (tmf.go).

// quiesceLocked closes the untracked path and waits until no command runs untracked: from
// then on every command is in the list. ts.mu held (released while it waits); reopen undoes
// it.
func (ts *taskSet) quiesceLocked() {
	ts.untracked.close()
	for ts.untracked.running() != 0 {
		ts.aborters++
		ts.done.Wait()
		ts.aborters--
	}
}

// reopen undoes a quiesceLocked.
func (ts *taskSet) reopen() { ts.untracked.open() }

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
	for t := ts.list.head; t != nil; t = t.next {
		if match(t) {
			n++
			t.aborted.Store(true)
		}
	}
	for t := ts.list.head; t != nil; {
		next := t.next
		if !t.running && match(t) {
			ts.removeLocked(t)
			t.wake <- struct{}{}
		}
		t = next
	}
	for {
		busy := false
		for t := ts.list.head; t != nil; t = t.next {
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
	for t := ts.list.head; t != nil; t = t.next {
		if t.Nexus == n && t.Tag == tag {
			return t
		}
	}
	return nil
}
