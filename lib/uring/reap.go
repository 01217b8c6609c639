package uring

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Taking finished requests off the completion ring, with or without waiting.

// Completion is one finished request: its tag and the result, a byte count or a negative
// errno.
type Completion struct {
	Tag uint64
	Res int32
}

// Err returns the completion's error, nil for a non-negative result.
func (c Completion) Err() error {
	if c.Res >= 0 {
		return nil
	}
	return unix.Errno(-c.Res)
}

// Reap calls fn for each completion there is, without blocking, and returns how many. With
// Options.SingleIssuer the kernel posts completions only when this thread enters it: Reap
// does that (a non-blocking io_uring_enter) when nothing is there and the kernel says that
// completions wait (IORING_SQ_TASKRUN), or, on a kernel that does not say, whenever
// requests are in flight. The first Reap after SignalEventfd(true) enters either way: a
// completion that came just before the signal was on raised no signal, and the flag is not
// ordered against that store on every architecture.
func (r *Ring) Reap(fn func(Completion)) int {
	n := r.reap(fn)
	if n == 0 && r.enter != 0 && r.inFlight > 0 &&
		(!r.taskrunFlag || r.armed || atomic.LoadUint32(r.sqFlags)&(sqTaskrun|sqCQOverflow) != 0) {
		unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 0, enterGetEvents, 0, 0)
		n = r.reap(fn)
	}
	r.armed = false
	return n
}

func (r *Ring) reap(fn func(Completion)) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail) // the entries before it are written
	n := 0
	for ; head != tail; head++ {
		c := r.cqes[head&r.cqMask]
		atomic.StoreUint32(r.cqHead, head+1) // the entry may be reused once the head moves
		n++
		r.inFlight--
		fn(Completion{Tag: c.userData, Res: c.res})
	}
	return n
}

// Wait blocks until at least one completion is there to reap (and submits what is queued).
func (r *Ring) Wait() error {
	if r.inFlight == 0 && r.Queued() == 0 {
		return errors.New("uring: wait with nothing in flight")
	}
	_, err := r.Submit(1)
	return err
}
