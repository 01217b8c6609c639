package uring

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a ring registers with the kernel: the fixed buffer the reads and writes use, and the
// eventfd its completions signal.

// RegisterBuffer registers mem as fixed buffer 0 (IORING_REGISTER_BUFFERS): the kernel pins
// its pages once, and reads and writes inside it then skip the pinning per request. Without
// CAP_IPC_LOCK the pages count against RLIMIT_MEMLOCK.
func (r *Ring) RegisterBuffer(mem []byte) error {
	if len(mem) == 0 || len(mem) > maxRegisteredBytes {
		return fmt.Errorf("uring: a registered buffer of %d bytes (at most %d)", len(mem), maxRegisteredBytes)
	}
	iov := unix.Iovec{Base: &mem[0]}
	iov.SetLen(len(mem))
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerBuffers, uintptr(unsafe.Pointer(&iov)), 1, 0, 0)
	runtime.KeepAlive(mem)
	if e != 0 {
		return fmt.Errorf("uring: registering %d bytes: %w", len(mem), e)
	}
	r.bufs = mem
	return nil
}

// UnregisterBuffers lets the registered buffer go (IORING_UNREGISTER_BUFFERS): its pages are
// no longer pinned by the ring, and later requests into its addresses are plain reads and
// writes of whatever is mapped there then. Call it before the buffer is unmapped, with no
// request into it in flight: a registered buffer stands for the pages that were mapped when it
// was registered, so a mapping made later at the same addresses would otherwise be read and
// written through the old pages. The ring forgets the buffer even when the kernel fails.
func (r *Ring) UnregisterBuffers() error {
	if r.bufs == nil {
		return nil
	}
	r.bufs = nil
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), unregisterBuffers, 0, 0, 0, 0)
	if e != 0 {
		return fmt.Errorf("uring: unregistering the buffers: %w", e)
	}
	return nil
}

// RegisterEventfd makes the kernel signal efd on every completion (IORING_REGISTER_EVENTFD),
// for a caller that sleeps in a poller on other descriptors too.
func (r *Ring) RegisterEventfd(efd int) error {
	e32 := int32(efd)
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerEventfd, uintptr(unsafe.Pointer(&e32)), 1, 0, 0)
	if e != 0 {
		return fmt.Errorf("uring: registering eventfd %d: %w", efd, e)
	}
	r.eventfd = efd
	return nil
}

// SignalEventfd turns the registered eventfd's signal on or off (IORING_CQ_EVENTFD_DISABLED,
// Linux 5.8): a loop that reaps as it runs wants it only while it sleeps. On an older kernel
// the signal stays on. A completion posted while it was off raises no signal: reap once
// more after turning it on, before sleeping.
func (r *Ring) SignalEventfd(on bool) {
	if r.cqFlags == nil {
		return
	}
	for {
		old := atomic.LoadUint32(r.cqFlags)
		v := old | cqEventfdDisabled
		if on {
			v = old &^ cqEventfdDisabled
		}
		if old == v || atomic.CompareAndSwapUint32(r.cqFlags, old, v) {
			r.armed = r.armed || on
			return
		}
	}
}

// fixed reports whether p lies inside the registered buffer.
func (r *Ring) fixed(p []byte) bool {
	if r.bufs == nil || len(p) == 0 {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(r.bufs)))
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	return a >= base && a+uintptr(len(p)) <= base+uintptr(len(r.bufs))
}
