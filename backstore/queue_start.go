package backstore

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/lib/uring"
)

// Starting requests on a Queue: the store's checks, a request slot, and the submission entry.

// queue puts request i's remainder on the ring.
func (q *Queue) queue(i int32) error {
	r := &q.reqs[i]
	if !r.write {
		return q.ring.Read(r.fd, r.p, r.off, uint64(i))
	}
	flags := 0
	if r.fua && !r.syncAfter {
		flags = unix.RWF_DSYNC
	}
	return q.ring.Write(r.fd, r.p, r.off, flags, uint64(i))
}

func (q *Queue) queueSync(i int32) {
	if err := q.ring.Fdatasync(q.reqs[i].fd, uint64(i)); err != nil {
		q.reqs[i].syncing = false
		q.finish(i, err)
	}
}

// opKind is what a request does.
type opKind uint8

const (
	opRead opKind = iota
	opWrite
	opFlush
)

func (k opKind) String() string {
	switch k {
	case opWrite:
		return "write"
	case opFlush:
		return "flush"
	}
	return "read"
}

func opName(write bool) string {
	if write {
		return opWrite.String()
	}
	return opRead.String()
}

// tryAcquire is acquire for the goroutine that drives a queue: it never waits. Only Close
// takes the store's lock exclusively, and it waits for the requests in flight, which only
// that goroutine reaps: had the goroutine blocked in RLock behind Close's pending Lock, neither
// could go on. A store being closed is closed for new requests.
func (s *fdStore) tryAcquire() bool {
	if !s.mu.TryRLock() {
		return false
	}
	if s.closed {
		s.mu.RUnlock()
		return false
	}
	return true
}

// start queues a request of s; the store's checks are those of ReadAt and WriteAt.
func (q *Queue) start(s *fdStore, p []byte, off int64, write, fua bool, tag uint64) error {
	if !s.tryAcquire() {
		return s.opError(opName(write), off, ErrClosed)
	}
	return q.startHeld(s, p, off, write, fua, tag)
}

// startHeld is start for a caller that holds s.mu shared (acquire), which the request keeps
// until it finishes or, when it cannot start, startHeld releases.
func (q *Queue) startHeld(s *fdStore, p []byte, off int64, write, fua bool, tag uint64) error {
	op := opName(write)
	if len(q.free) == 0 {
		s.mu.RUnlock()
		return s.opError(op, off, ErrQueueFull)
	}
	if len(p) == 0 {
		s.mu.RUnlock()
		return s.opError(op, off, errors.New("empty transfer"))
	}
	if write && s.readOnly {
		s.mu.RUnlock()
		return s.opError(op, off, unix.EROFS)
	}
	if !checkRange(s.size.Load(), off, int64(len(p))) {
		s.mu.RUnlock()
		return s.rangeError(op, off, int64(len(p)))
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	kind := opRead
	if write {
		kind = opWrite
	}
	q.reqs[i] = request{s: s, p: p, off: off, start: off, fd: s.fdFor(p, off), tag: tag, kind: kind, write: write, fua: fua}
	if s.onIO != nil {
		s.onIO(q.reqs[i].fd == s.dfd)
	}
	if err := q.queue(i); err != nil {
		q.reqs[i] = request{}
		q.free = append(q.free, i)
		s.mu.RUnlock()
		if errors.Is(err, uring.ErrFull) {
			err = ErrQueueFull
		}
		return s.opError(op, off, err)
	}
	return nil
}

// StartRead queues a read of all of p from off (see AsyncStore).
func (s *fdStore) StartRead(q *Queue, p []byte, off int64, tag uint64) error {
	return q.start(s, p, off, false, false, tag)
}

// StartWrite queues a write of all of p at off (see AsyncStore).
func (s *fdStore) StartWrite(q *Queue, p []byte, off int64, fua bool, tag uint64) error {
	return q.start(s, p, off, true, fua, tag)
}

// StartFlush queues an fdatasync of the store's page-cache descriptor, as Flush does (see
// AsyncStore).
func (s *fdStore) StartFlush(q *Queue, tag uint64) error {
	if !s.tryAcquire() {
		return fmt.Errorf("backstore %s: flush: %w", s.path, ErrClosed)
	}
	if len(q.free) == 0 {
		s.mu.RUnlock()
		return fmt.Errorf("backstore %s: flush: %w", s.path, ErrQueueFull)
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.reqs[i] = request{s: s, fd: s.fd, tag: tag, kind: opFlush, syncing: true}
	if err := q.ring.Fdatasync(s.fd, uint64(i)); err != nil {
		q.reqs[i] = request{}
		q.free = append(q.free, i)
		s.mu.RUnlock()
		if errors.Is(err, uring.ErrFull) {
			err = ErrQueueFull
		}
		return fmt.Errorf("backstore %s: flush: %w", s.path, err)
	}
	return nil
}
