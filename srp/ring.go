package srp

import (
	"os"
	"unsafe"

	"github.com/srptarget/srptarget/backstore"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ringBuffers is the buffer pool registered with a group's ring (Queue.RegisterBuffer), nil for
// none: one pool can be, the first one a command's buffer came from. failed: the kernel
// refused, requests pin their buffers.
type ringBuffers struct {
	pool   *bufPool
	failed bool
}

// register registers pool with q, unless one is: reads and writes in it then
// skip the pinning of their pages. A registered pool that is closing (its device was removed:
// every buffer of it is back, so no request into it is in flight) is unregistered first, before
// any request starts: its memory is about to be unmapped, and a pool mapped later at the same
// addresses would otherwise be read and written through the old pages the ring holds.
func (r *ringBuffers) register(q *backstore.Queue, pool *bufPool, log *zap.Logger) {
	if r.pool != nil {
		select {
		case <-r.pool.closing:
		default:
			return
		}
		r.pool = nil
		if err := q.UnregisterBuffers(); err != nil {
			log.Warn("unregistering a removed device's buffer pool from the io_uring failed: its pages stay pinned", zap.Error(err))
		}
	}
	if r.failed || pool == nil || len(pool.mem) == 0 {
		return
	}
	if err := q.RegisterBuffer(pool.mem); err != nil {
		r.failed = true
		log.Debug("registering the buffer pool with the io_uring failed: requests pin their buffers", zap.Error(err),
			zap.Uintptr("pool", uintptr(unsafe.Pointer(unsafe.SliceData(pool.mem)))))
		return
	}
	r.pool = pool
}

// ringWake is the eventfd a group's ring signals while the group sleeps with requests in
// flight, and the goroutine that waits on it in the netpoller and wakes the group. The signal
// is off while the group is awake, so that a busy group pays nothing for it.
type ringWake struct {
	efd   *os.File
	armed bool // the signal is on: the group sleeps or is about to
}

// listen registers an eventfd with q and starts the goroutine that calls wake when it is
// signalled; the signal starts off.
func (w *ringWake) listen(q *backstore.Queue, wake func()) error {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return err
	}
	if err := q.RegisterEventfd(fd); err != nil {
		unix.Close(fd)
		return err
	}
	q.SignalEventfd(false)
	// Non-blocking: the read parks its goroutine in the netpoller, not a thread.
	w.efd = os.NewFile(uintptr(fd), "io_uring eventfd")
	go func(f *os.File) {
		var b [8]byte
		for {
			if _, err := f.Read(b[:]); err != nil {
				return // closed (close)
			}
			wake()
		}
	}(w.efd)
	return nil
}

func (w *ringWake) arm(q *backstore.Queue) {
	w.armed = true
	q.SignalEventfd(true)
}

func (w *ringWake) disarm(q *backstore.Queue) {
	if w.armed {
		w.armed = false
		q.SignalEventfd(false)
	}
}

func (w *ringWake) close() { w.efd.Close() }
