package daemon

import (
	"github.com/srptarget/srptarget/backstore"
)

// asyncStore is the sharedStore of a file or block LUN as its logical unit sees it: the
// backstore.AsyncStore of the store inside, so that the poll groups start the LUN's reads,
// writes and flushes on their io_uring (scsi.LUNMap.Start) instead of a worker's blocking
// call. Without it the wrapper hid the interface and every command of the daemon's file and
// block LUNs took a worker. A start holds mu shared only while it queues: the request in
// flight holds the store inside (backstore's own lock, which its Close waits for), so that a
// store closed meanwhile refuses new requests (backstore.ErrClosed) and closes its descriptor
// only once the requests in flight are over.
type asyncStore struct {
	*sharedStore
	async backstore.AsyncStore
}

var _ backstore.AsyncStore = asyncStore{}

// forLU returns what the logical units over s use as their backstore: s, or s with the
// asynchronous starts of the store inside when it has them.
func (s *sharedStore) forLU() backstore.Backstore {
	if a, ok := s.Backstore.(backstore.AsyncStore); ok {
		return asyncStore{sharedStore: s, async: a}
	}
	return s
}

func (s asyncStore) StartRead(q *backstore.Queue, p []byte, off int64, tag uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.async.StartRead(q, p, off, tag)
}

func (s asyncStore) StartWrite(q *backstore.Queue, p []byte, off int64, fua bool, tag uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.async.StartWrite(q, p, off, fua, tag)
}

func (s asyncStore) StartFlush(q *backstore.Queue, tag uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.async.StartFlush(q, tag)
}
