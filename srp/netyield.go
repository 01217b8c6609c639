package srp

import (
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// groupWait is how a group waits (Limits.Completion): its poll window, and whether its CQs are
// armed.
type groupWait struct {
	// Adaptive: the idle passes since the last work, and the clock when the first of them
	// read it (0: not read yet; -1: the window is over).
	idleSpins int
	lastWork  int64
	// busyPasses counts the passes since the group last slept that were followed by another
	// instead of the arm (event mode); recvs is the receive completions the last pass took.
	busyPasses int
	recvs      int
	// armed: the CQs are armed since the last sleep; sendsArmed: the send CQs too.
	armed      bool
	sendsArmed bool
	// sendsWanted counts the group's channels that must be woken by their send completions
	// (channel.sendsAwaited, kept by service).
	sendsWanted int
	spins       int // idle passes spinning (spin)
}

// noteWork opens a new poll window: the group found work.
func (w *groupWait) noteWork() { w.idleSpins, w.lastWork = 0, 0 }

// woke resets what a sleep ends: the budget of busy passes (the arms last until their CQ's
// event is taken: block, arm).
func (w *groupWait) woke() { w.busyPasses = 0 }

// netYield parks its goroutine in the netpoller on an eventfd of its own, made readable
// right after the park began: the P, finding nothing else to run, polls the network
// (findRunnable's non-blocking netpoll) and that same poll makes the goroutine runnable again.
// A timer would not do: the netpoller waits in whole milliseconds (epoll_pwait), so a
// microsecond's sleep on a P with nothing else to run lasts a millisecond.
type netYield struct {
	f      *os.File
	rc     syscall.RawConn
	fn     func(fd uintptr) bool // the RawConn.Read function, made once: no allocation per yield
	wrote  bool
	failed bool
	buf    [8]byte
}

// yield parks once, as above; runtime.Gosched when the eventfd could not be made.
func (y *netYield) yield() {
	if y.rc == nil && !y.open() {
		runtime.Gosched()
		return
	}
	y.wrote = false
	_ = y.rc.Read(y.fn)
}

// open makes the eventfd, once.
func (y *netYield) open() bool {
	if y.failed {
		return false
	}
	y.failed = true
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "poll group yield")
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // not in the netpoller
		f.Close()
		return false
	}
	// Read calls fn first and parks when it returns false: the write comes after Read began
	// to watch the descriptor, so the readiness it raises is not forgotten (an edge the
	// netpoller saw before a Read began would be).
	y.fn = func(fd uintptr) bool {
		if !y.wrote {
			y.wrote = true
			y.buf = [8]byte{1}
			_, _ = unix.Write(int(fd), y.buf[:])
			return false
		}
		_, err := unix.Read(int(fd), y.buf[:])
		return err != unix.EAGAIN
	}
	y.f, y.rc, y.failed = f, rc, false
	return true
}

// close releases the eventfd.
func (y *netYield) close() {
	if y.f != nil {
		y.f.Close()
		y.f, y.rc = nil, nil
	}
}
