package srp

import "time"

// stallWatch is the state of the stall watchdog, which closes a channel whose oldest
// outstanding work request is older than Limits.RDMATimeout. It knows that age without a
// clock read per post: each check (every RDMATimeout/watchSteps while work is outstanding)
// records a mark, the number of batches posted by then. Send-queue work completes in the
// order it was posted on a reliable connection, so when fewer batches have completed than a
// mark taken RDMATimeout ago counted, a batch posted before that mark is still outstanding:
// the channel is stalled. Whether anything completed meanwhile does not matter: an initiator
// that trickles receive buffers lets a response through now and then, but the work queued
// behind keeps ageing. The stall is noticed at most RDMATimeout/watchSteps late.
type stallWatch struct {
	posted uint64    // send-queue batches posted; completed = posted - sendBatches
	at     time.Time // the next check; zero: not armed (nothing outstanding)
	// marks is a ring of the checks' marks, oldest first, none older than needed.
	marks      [watchSteps + 2]watchMark
	head, size int
}

// watchMark says that posted batches had been posted by at.
type watchMark struct {
	at     time.Time
	posted uint64
}

// watchSteps is the number of checks per RDMATimeout.
const watchSteps = 8

func (w *stallWatch) push(at time.Time, posted uint64) {
	if w.size == len(w.marks) {
		w.head = (w.head + 1) % len(w.marks)
		w.size--
	}
	w.marks[(w.head+w.size)%len(w.marks)] = watchMark{at, posted}
	w.size++
}

// oldest returns the newest mark taken at or before cutoff, dropping the marks before it
// (it is the strongest evidence a later check can have), or ok false if there is none.
func (w *stallWatch) oldest(cutoff time.Time) (m watchMark, ok bool) {
	for w.size > 1 && !w.marks[(w.head+1)%len(w.marks)].at.After(cutoff) {
		w.head = (w.head + 1) % len(w.marks)
		w.size--
	}
	if w.size == 0 || w.marks[w.head].at.After(cutoff) {
		return watchMark{}, false
	}
	return w.marks[w.head], true
}
