package srp

import (
	"errors"
	"os"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/backstore"
	"github.com/srptarget/srptarget/scsi"
)

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
