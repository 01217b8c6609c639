package backstore

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/lib/uring"
)

// Collecting a Queue's completions: a short transfer continued, an error given its context,
// the request's slot and its hold on the store released.

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
