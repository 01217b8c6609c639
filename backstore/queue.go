package backstore

import (
	"errors"
	"fmt"
	"io"

	"github.com/srptarget/srptarget/lib/uring"
	"golang.org/x/sys/unix"
)

// Queue does the reads and writes of file and block stores asynchronously, through an
// io_uring: a caller starts requests (StartRead, StartWrite), hands them to the kernel
// together (Submit: one system call for all of them) and collects completions without
// blocking (Reap) or waits for one (Wait). That is the shape a poll loop wants: submit
// what a pass produced, reap what finished, never block a goroutine per command.
//
// One goroutine drives a Queue (it is not safe for concurrent use); it may serve any number
// of stores. A request holds its store open (Close waits) until it is reaped. The data
// buffers must stay where they are until then: memory outside the Go heap, such as the SRP
// buffer pool's slab, which RegisterBuffer registers with the kernel once so that no request
// pins its pages again.
//
// NewQueue fails with an error wrapping ErrAsyncUnsupported where io_uring is not there (an
// old kernel, kernel.io_uring_disabled, a seccomp filter such as systemd's
// SystemCallFilter=@system-service); callers then use ReadAt and WriteAt.
type Queue struct {
	ring  *uring.Ring
	reqs  []request
	free  []int32 // indexes of reqs not in use
	ready []Completion
	// failed are requests that Fail ended before they reached the kernel, delivered by the
	// next Reap.
	failed []int32
}

// AsyncStore is a store whose reads and writes a Queue can do: File and Block.
type AsyncStore interface {
	Backstore
	// StartRead queues a read of all of p from off on q; its completion carries tag. It
	// fails at once (nothing queued) for a closed store, a range outside the store, or a
	// full queue (ErrQueueFull).
	StartRead(q *Queue, p []byte, off int64, tag uint64) error
	// StartWrite queues a write of all of p at off, durable before it completes with fua.
	StartWrite(q *Queue, p []byte, off int64, fua bool, tag uint64) error
	// StartFlush queues what Flush does: every write completed before it is made durable.
	StartFlush(q *Queue, tag uint64) error
}

// Completion is a finished request: its tag and its error, nil when all of it was done.
type Completion struct {
	Tag uint64
	Err error
}

// ErrAsyncUnsupported: the kernel refuses io_uring here.
var ErrAsyncUnsupported = uring.ErrUnsupported

// ProbeAsync reports whether queues work here: nil, or an error wrapping ErrAsyncUnsupported
// where the kernel or a seccomp filter refuses io_uring. It uses every system call a queue
// makes once, a read included.
func ProbeAsync() error { return uring.Probe() }

// ErrQueueFull: as many requests are in flight as the queue holds.
var ErrQueueFull = errors.New("backstore: queue full")

var (
	_ AsyncStore = (*File)(nil)
	_ AsyncStore = (*Block)(nil)
)

// request is one read or write in flight, continued until all of it is done.
type request struct {
	s         *fdStore
	p         []byte // what remains to transfer
	off       int64  // where it goes
	start     int64  // the offset the request started at, for errors
	fd        int
	tag       uint64
	kind      opKind
	write     bool
	fua       bool  // RWF_DSYNC on each write
	syncAfter bool  // the kernel refused RWF_DSYNC: fdatasync when the data is written
	syncing   bool  // the fdatasync is in flight
	err       error // Fail's error, for a request without a store
}

// NewQueue sets up a queue for up to depth requests in flight (at most 4096). With
// singleIssuer the goroutine that drives it must stay on one OS thread
// (runtime.LockOSThread), and the kernel then does the completion work only when that
// thread reaps, not by interrupting whichever thread submitted.
func NewQueue(depth int, singleIssuer bool) (*Queue, error) {
	r, err := uring.New(depth, uring.Options{SingleIssuer: singleIssuer})
	if err != nil {
		return nil, fmt.Errorf("backstore: %w", err)
	}
	q := &Queue{ring: r, reqs: make([]request, depth), free: make([]int32, depth), ready: make([]Completion, 0, depth)}
	for i := range q.free {
		q.free[i] = int32(depth - 1 - i)
	}
	return q, nil
}

// RegisterBuffer registers mem, the memory the data buffers come from, with the kernel:
// requests inside it then skip pinning the pages of their buffer. A request outside it works
// too, unregistered.
func (q *Queue) RegisterBuffer(mem []byte) error { return q.ring.RegisterBuffer(mem) }

// UnregisterBuffers lets the registered buffer go before it is unmapped (see
// uring.Ring.UnregisterBuffers): no request into it may be in flight.
func (q *Queue) UnregisterBuffers() error { return q.ring.UnregisterBuffers() }

// RegisterEventfd has the kernel signal efd on every completion, for a loop that sleeps on
// other descriptors too.
func (q *Queue) RegisterEventfd(efd int) error { return q.ring.RegisterEventfd(efd) }

// SignalEventfd turns the registered eventfd's signal on (on) or off, for a loop that wants it
// only while it sleeps: after turning it on, Reap once more before sleeping, since a request
// that completed while it was off raised no signal.
func (q *Queue) SignalEventfd(on bool) { q.ring.SignalEventfd(on) }

// InFlight is the number of requests started and not yet reaped.
func (q *Queue) InFlight() int { return len(q.reqs) - len(q.free) }

// Close releases the ring. Requests still in flight are waited for first.
func (q *Queue) Close() error {
	for q.InFlight() > 0 {
		if err := q.Wait(); err != nil {
			break
		}
		q.Reap(func(Completion) {})
	}
	return q.ring.Close()
}

// Fail starts a request that ends with err, unchanged, without reaching the kernel: for a
// store that wraps another and refuses a request itself (a fault injector). It is reaped like
// any other, and takes a place in the queue until then.
func (q *Queue) Fail(err error, tag uint64) error {
	if len(q.free) == 0 {
		return ErrQueueFull
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.reqs[i] = request{tag: tag, err: err}
	q.failed = append(q.failed, i)
	return nil
}

// Submit hands every queued request to the kernel in one system call.
func (q *Queue) Submit() error {
	_, err := q.ring.Submit(0)
	return err
}

// Wait submits what is queued and blocks until a completion is there to reap.
func (q *Queue) Wait() error {
	if len(q.ready) > 0 || len(q.failed) > 0 {
		return nil
	}
	return q.ring.Wait()
}

// Reap calls fn for each request that finished, without blocking, and returns how many. A
// request that needs more (a short transfer, a retry on the page cache) is queued again and
// submitted before Reap returns.
func (q *Queue) Reap(fn func(Completion)) int {
	for _, i := range q.failed {
		q.finish(i, q.reqs[i].err)
	}
	q.failed = q.failed[:0]
	q.ring.Reap(q.complete)
	if q.ring.Queued() > 0 {
		_, _ = q.ring.Submit(0)
	}
	n := len(q.ready)
	for i, c := range q.ready {
		q.ready[i] = Completion{}
		fn(c)
	}
	q.ready = q.ready[:0]
	return n
}

// complete handles one completion of the ring.
func (q *Queue) complete(c uring.Completion) {
	i := int32(c.Tag)
	r := &q.reqs[i]
	switch {
	case r.syncing:
		if c.Res == -int32(unix.EINTR) {
			q.queueSync(i)
			return
		}
		r.syncing = false
		q.finish(i, c.Err())
		return
	case c.Res < 0:
		err := c.Err()
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
		case err == unix.EINVAL && r.fd == r.s.dfd && r.s.fd >= 0:
			// the direct descriptor refused an alignment it did not report: the rest
			// through the page cache, as transferFull does
			r.fd = r.s.fd
		case (err == unix.EOPNOTSUPP || err == unix.ENOSYS) && r.fua && !r.syncAfter:
			r.syncAfter = true // a plain write, then fdatasync
		default:
			q.finish(i, err)
			return
		}
	case c.Res == 0 && r.write:
		q.finish(i, io.ErrShortWrite)
		return
	case c.Res == 0:
		q.finish(i, io.ErrUnexpectedEOF)
		return
	default:
		r.p = r.p[c.Res:]
		r.off += int64(c.Res)
		if len(r.p) == 0 {
			if r.syncAfter {
				r.syncing = true
				q.queueSync(i)
				return
			}
			q.finish(i, nil)
			return
		}
	}
	if err := q.queue(i); err != nil {
		q.finish(i, err)
	}
}

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

// finish ends request i: its store is released and its completion is ready to reap. Its
// error reads as ReadAt's, WriteAt's or Flush's would.
func (q *Queue) finish(i int32, err error) {
	r := &q.reqs[i]
	switch {
	case err == nil || r.s == nil:
	case r.kind == opFlush:
		err = fmt.Errorf("backstore %s: flush: %w", r.s.path, err)
	default:
		err = r.s.opError(r.kind.String(), r.start, err)
	}
	if r.s != nil {
		r.s.mu.RUnlock()
	}
	q.ready = append(q.ready, Completion{Tag: r.tag, Err: err})
	*r = request{}
	q.free = append(q.free, i)
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
