package srp

import (
	"errors"
	"os"
	"sync/atomic"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/scsi"
)

// groupIO is a poll group's io_uring (Limits.BackstoreIO io_uring): the reads, writes and
// flushes of its channels' commands on file and block logical units start in the pass that
// dispatches them (scsi.LUNMap.Start), reach the kernel in one system call at the end of the
// pass (submit), and are reaped in a later pass (reap), which moves each command on
// (scsi.LUNMap.Complete) to its response. No goroutine blocks per command: a command that
// would have to wait (scsi.Blocked: behind an ORDERED command, for a range COMPARE AND WRITE
// holds, for room in the ring) goes to a worker as every command of a blocking logical unit
// does with the sync engine.
//
// While the group sleeps with requests in flight, the ring signals an eventfd that a
// goroutine waits on in the netpoller, and that goroutine wakes the group; while the group is
// awake the signal is off (Queue.SignalEventfd), so that a busy group pays nothing for it.
type groupIO struct {
	g *pollGroup
	q *backstore.Queue // made on first use; nil with the sync engine or when it could not be
	// off: the sync engine, or the ring could not be made: commands go to workers.
	off bool
	// cmds holds by tag the command whose request is in flight; free the unused tags.
	cmds       []*cmdCtx
	free       []uint32
	inFlight   atomic.Int32  // commands with a request in flight
	started    atomic.Uint64 // commands Start took (tests, and the group's share of the work)
	bufs       ringBuffers
	wake       ringWake
	onComplete func(backstore.Completion)
	// holdReap, set by a test, keeps reap from reaping: commands stay pending in their
	// logical units as long as a slow disk would keep them.
	holdReap atomic.Bool
}

// groupIODepth is the requests a group's ring holds in flight, and the commands: more than
// its channels have outstanding in the usual case (a few channels' credits); a command that
// finds the ring full goes to a worker. A variable for the tests.
var groupIODepth = 1024

// newGroupQueue makes a group's ring (backstore.NewQueue); tests make it fail.
var newGroupQueue = backstore.NewQueue

func (io *groupIO) init(g *pollGroup) {
	io.g = g
	io.off = g.t.io.engine != BackstoreIOURing
	io.onComplete = io.complete
}

// open makes the ring on first use; false: it could not be made, and every command goes to
// the workers from now on.
func (io *groupIO) open() bool {
	if io.q != nil {
		return true
	}
	q, err := newGroupQueue(groupIODepth, false)
	if err == nil {
		err = io.wake.listen(q, io.g.notify)
		if err != nil {
			q.Close()
		}
	}
	if err != nil {
		io.off = true
		io.g.log.Error("the poll group's io_uring could not be made: its file and block LUNs use blocking calls on workers", zap.Error(err))
		return false
	}
	io.q = q
	io.cmds = make([]*cmdCtx, groupIODepth)
	io.free = make([]uint32, groupIODepth)
	for i := range io.free {
		io.free[i] = uint32(groupIODepth - 1 - i)
	}
	return true
}

// start begins c on the ring when its logical unit's backstore can be driven by one, and
// reports whether it took c; false: c goes to a worker.
func (io *groupIO) start(c *cmdCtx) bool {
	lu := c.lu.Load()
	// A script's group has no goroutine to reap on: its commands go to scriptWork.
	if io.off || io.g.script || lu == nil || !lu.AsyncFor(c.cmd.CDB) || !io.open() {
		return false
	}
	ch := c.ch
	if c.state() != ctxCmd || ch.closed() {
		ch.executed(c) // as a worker leaves it
		return true
	}
	if len(io.free) == 0 {
		return false // every tag has a command in flight: this one blocks on a worker
	}
	io.bufs.register(io.q, ch.pool, io.g.log)
	tag := io.free[len(io.free)-1]
	io.free = io.free[:len(io.free)-1]
	io.started.Add(1)
	switch c.lunMap.Start(&c.cmd, io.q, uint64(tag)) {
	case scsi.Pending:
		io.cmds[tag] = c
		io.inFlight.Add(1)
		ch.handedOff++
	case scsi.Done:
		io.free = append(io.free, tag)
		ch.executed(c)
	default: // Blocked
		io.free = append(io.free, tag)
		ch.handedOff++
		io.g.execute(c)
	}
	return true
}

// reap moves on every command whose request completed; it reports whether there was any
// (pollSource).
func (io *groupIO) reap() bool {
	if io.inFlight.Load() == 0 || io.holdReap.Load() {
		return false
	}
	return io.q.Reap(io.onComplete) > 0
}

// complete takes one completion to its command.
func (io *groupIO) complete(r backstore.Completion) {
	tag := uint32(r.Tag)
	c := io.cmds[tag]
	p := c.lunMap.Complete(&c.cmd, r.Err)
	if p == scsi.Pending {
		return
	}
	io.cmds[tag] = nil
	io.free = append(io.free, tag)
	io.inFlight.Add(-1)
	if p == scsi.Blocked {
		io.g.execute(c) // still handed off
		return
	}
	c.ch.onDone(c)
	io.g.touch(c.ch)
}

// submit hands the kernel what the pass started, in one system call (pollSource).
func (io *groupIO) submit() {
	if io.q == nil {
		return
	}
	if err := io.q.Submit(); err != nil {
		io.g.log.Error("submitting to the io_uring failed", zap.Error(err))
	}
}

// arm turns the eventfd's signal on before the group sleeps with requests in flight, and
// reports whether it did: the group then reaps once more, for what completed before
// (pollSource).
func (io *groupIO) arm() bool {
	if io.inFlight.Load() == 0 || io.wake.armed {
		return false
	}
	io.wake.arm(io.q)
	return true
}

// disarm turns the signal off once the group is awake (pollSource).
func (io *groupIO) disarm() { io.wake.disarm(io.q) }

// close releases the ring once the group's channels are gone (none has a request in flight).
func (io *groupIO) close() {
	if io.q == nil {
		return
	}
	if err := io.q.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		io.g.log.Warn("closing the poll group's io_uring", zap.Error(err))
	}
	io.wake.close()
	io.q = nil
}

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
