package backstore

import (
	"errors"
	"fmt"

	"github.com/srptarget/srptarget/lib/uring"
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
