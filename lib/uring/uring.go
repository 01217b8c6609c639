// Package uring is a small io_uring for file reads and writes: set up a ring, register
// buffers and an eventfd, queue reads, writes and fsyncs, submit them in one system call,
// and reap completions without blocking (or wait for them). It speaks to the kernel through
// golang.org/x/sys/unix's system calls and the ring layout of include/uapi/linux/io_uring.h;
// liburing does the same in C.
//
// A Ring is not safe for concurrent use: one goroutine queues, submits and reaps. With
// Options.SingleIssuer that goroutine must also stay on one OS thread
// (runtime.LockOSThread): the kernel then runs the completion work only when that thread
// asks for completions (IORING_SETUP_DEFER_TASKRUN), not in interrupts of whatever thread
// submitted last.
package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Operation codes (enum io_uring_op).
const (
	opFsync     = 3
	opReadFixed = 4
	opWriteFix  = 5
	opRead      = 22
	opWrite     = 23
)

// Setup flags, feature bits, enter flags, register operations and mmap offsets.
const (
	setupSubmitAll     = 1 << 7
	setupTaskrunFlag   = 1 << 9
	setupSingleIssuer  = 1 << 12
	setupDeferTaskrun  = 1 << 13
	featSingleMmap     = 1 << 0
	featNoDrop         = 1 << 1
	enterGetEvents     = 1 << 0
	registerBuffers    = 0
	unregisterBuffers  = 1
	registerEventfd    = 4
	offSQRing          = 0
	offCQRing          = 0x8000000
	offSQEs            = 0x10000000
	fsyncDatasync      = 1
	cqEventfdDisabled  = 1 << 0
	sqCQOverflow       = 1 << 1
	sqTaskrun          = 1 << 2
	sqeSize            = 64
	cqeSize            = 16
	maxRegisteredBytes = 1 << 30 // the kernel's limit per registered buffer
)

// params is struct io_uring_params.
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

// sqe is struct io_uring_sqe, for the operations used here.
type sqe struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	opFlags  uint32 // rw_flags, fsync_flags
	userData uint64
	bufIndex uint16
	_        uint16
	_        uint32
	_        [2]uint64
}

// cqe is struct io_uring_cqe.
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// Options are the ring's; the zero value is a ring any goroutine may drive.
type Options struct {
	// SingleIssuer: one OS thread queues, submits and reaps, always the same one.
	SingleIssuer bool
}

// Ring is one io_uring instance.
type Ring struct {
	fd      int
	sqMem   []byte
	cqMem   []byte // the same memory as sqMem with IORING_FEAT_SINGLE_MMAP
	sqeMem  []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqFlags *uint32
	sqArray []uint32
	sqes    []sqe
	cqHead  *uint32
	cqTail  *uint32
	cqFlags *uint32 // nil on a kernel without the field (before Linux 5.8)
	cqMask  uint32
	cqes    []cqe
	entries uint32
	tail    uint32 // the next SQE to fill (sqTail is published at Submit)
	enter   uint32 // flags every io_uring_enter that waits takes
	// taskrunFlag: the kernel flags pending completions (IORING_SQ_TASKRUN) and Reap looks
	// there before it enters; armed: SignalEventfd turned the signal on since the last Reap,
	// which then enters whatever the flag says (see Reap).
	taskrunFlag, armed bool

	bufs     []byte // the registered buffer, nil without
	eventfd  int
	inFlight int // submitted and not reaped
}

// ErrUnsupported means the kernel (or a seccomp filter, a sysctl) refuses io_uring.
var ErrUnsupported = errors.New("io_uring not available")

// New sets up a ring with room for entries submissions (a power of two is used; the
// completion queue is twice that, and the kernel does not drop completions).
func New(entries int, o Options) (*Ring, error) {
	if entries < 1 || entries > 4096 {
		return nil, fmt.Errorf("uring: %d entries, want 1 to 4096", entries)
	}
	p := params{}
	// Each try falls back to what an older kernel knows: SUBMIT_ALL (5.18) keeps submitting
	// past a request that fails, SINGLE_ISSUER (6.0) and DEFER_TASKRUN (6.1) are above, and
	// TASKRUN_FLAG with DEFER_TASKRUN (6.1) has the kernel set IORING_SQ_TASKRUN in the SQ
	// ring's flags while completions wait to be posted, so that Reap enters the kernel only
	// then (io_req_local_work_add in io_uring/io_uring.c; liburing's cq_ring_needs_flush).
	flags := []uint32{setupSubmitAll, 0}
	if o.SingleIssuer {
		flags = []uint32{setupSingleIssuer | setupDeferTaskrun | setupTaskrunFlag | setupSubmitAll,
			setupSingleIssuer | setupDeferTaskrun | setupSubmitAll, setupSingleIssuer | setupSubmitAll, setupSubmitAll, 0}
	}
	var fd int
	var errno unix.Errno
	for _, f := range flags {
		p = params{flags: f}
		r1, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
		fd, errno = int(r1), e
		if e != unix.EINVAL {
			break
		}
	}
	switch errno {
	case 0:
	case unix.ENOSYS, unix.EPERM, unix.EACCES:
		return nil, fmt.Errorf("uring: io_uring_setup: %w (%w)", ErrUnsupported, errno)
	default:
		return nil, fmt.Errorf("uring: io_uring_setup: %w", errno)
	}
	r := &Ring{fd: fd, eventfd: -1}
	if err := r.mapRings(&p); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if p.features&featNoDrop == 0 {
		r.Close()
		return nil, fmt.Errorf("uring: %w: the kernel may drop completions (no IORING_FEAT_NODROP, Linux 5.5)", ErrUnsupported)
	}
	if p.flags&setupDeferTaskrun != 0 {
		r.enter = enterGetEvents
		r.taskrunFlag = p.flags&setupTaskrunFlag != 0
	}
	return r, nil
}

func (r *Ring) mapRings(p *params) error {
	if p.features&featSingleMmap == 0 {
		return fmt.Errorf("uring: %w: no IORING_FEAT_SINGLE_MMAP (Linux 5.4)", ErrUnsupported)
	}
	sqLen := int(p.sqOff.array) + int(p.sqEntries)*4
	cqLen := int(p.cqOff.cqes) + int(p.cqEntries)*cqeSize
	n := max(sqLen, cqLen)
	mem, err := unix.Mmap(r.fd, offSQRing, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("uring: mapping the rings: %w", err)
	}
	r.sqMem, r.cqMem = mem, mem
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Munmap(mem)
		return fmt.Errorf("uring: mapping the submission entries: %w", err)
	}
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqHead, r.sqTail, r.sqFlags = u32(p.sqOff.head), u32(p.sqOff.tail), u32(p.sqOff.flags)
	r.sqMask = *u32(p.sqOff.ringMask)
	r.entries = *u32(p.sqOff.ringEntries)
	r.sqArray = unsafe.Slice(u32(p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqHead, r.cqTail = u32(p.cqOff.head), u32(p.cqOff.tail)
	if p.cqOff.flags != 0 {
		r.cqFlags = u32(p.cqOff.flags)
	}
	r.cqMask = *u32(p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&mem[p.cqOff.cqes])), p.cqEntries)
	// The array maps ring slots to entries one to one, once: entry i is always slot i.
	for i := range r.sqArray {
		r.sqArray[i] = uint32(i)
	}
	r.tail = atomic.LoadUint32(r.sqTail)
	return nil
}

// Close unregisters what was registered and releases the ring.
func (r *Ring) Close() error {
	if r.fd < 0 {
		return os.ErrClosed
	}
	unix.Munmap(r.sqeMem)
	unix.Munmap(r.sqMem)
	err := unix.Close(r.fd)
	r.fd = -1
	r.bufs = nil
	return err
}

// Entries is the submission queue's size.
func (r *Ring) Entries() int { return int(r.entries) }

// InFlight is the number of requests submitted and not yet reaped.
func (r *Ring) InFlight() int { return r.inFlight }

// Queued is the number of requests queued and not yet taken by the kernel.
func (r *Ring) Queued() int { return int(r.tail - atomic.LoadUint32(r.sqHead)) }

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

// ErrFull means every submission entry is queued: Submit first.
var ErrFull = errors.New("uring: submission queue full")

// next returns the next free submission entry, zeroed.
func (r *Ring) next() (*sqe, error) {
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.entries {
		return nil, ErrFull
	}
	s := &r.sqes[r.tail&r.sqMask]
	*s = sqe{}
	r.tail++
	return s, nil
}

// Read queues a read of len(p) bytes at off from fd into p; the completion carries tag. p
// must stay valid, and not move, until the completion is reaped: memory outside the Go heap
// (an mmap'd slab) or pinned.
func (r *Ring) Read(fd int, p []byte, off int64, tag uint64) error {
	return r.rw(opRead, opReadFixed, fd, p, off, 0, tag)
}

// Write queues a write of p at off to fd; rwFlags are preadv2(2)'s (unix.RWF_DSYNC).
func (r *Ring) Write(fd int, p []byte, off int64, rwFlags int, tag uint64) error {
	return r.rw(opWrite, opWriteFix, fd, p, off, uint32(rwFlags), tag)
}

func (r *Ring) rw(op, opFixed uint8, fd int, p []byte, off int64, rwFlags uint32, tag uint64) error {
	if len(p) == 0 || len(p) > 1<<31-1 {
		return fmt.Errorf("uring: a transfer of %d bytes", len(p))
	}
	s, err := r.next()
	if err != nil {
		return err
	}
	s.opcode = op
	if r.fixed(p) {
		s.opcode = opFixed // buf_index 0
	}
	s.fd = int32(fd)
	s.off = uint64(off)
	s.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))
	s.len = uint32(len(p))
	s.opFlags = rwFlags
	s.userData = tag
	return nil
}

// Fdatasync queues an fdatasync of fd.
func (r *Ring) Fdatasync(fd int, tag uint64) error {
	s, err := r.next()
	if err != nil {
		return err
	}
	s.opcode = opFsync
	s.fd = int32(fd)
	s.opFlags = fsyncDatasync
	s.userData = tag
	return nil
}

// Submit hands the queued requests to the kernel in one system call, and with wait > 0 also
// waits until that many completions are there to reap. It returns how many were submitted;
// fewer than were queued when the completion queue is full (reap, then submit again).
func (r *Ring) Submit(wait int) (int, error) {
	atomic.StoreUint32(r.sqTail, r.tail) // publishes the entries written before it
	n := r.tail - atomic.LoadUint32(r.sqHead)
	if n == 0 && wait == 0 {
		return 0, nil
	}
	flags := uintptr(0)
	if wait > 0 {
		flags = enterGetEvents
	}
	for {
		r1, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(wait), flags, 0, 0)
		switch e {
		case 0:
			r.inFlight += int(r1)
			return int(r1), nil
		case unix.EINTR:
			continue
		case unix.EBUSY, unix.EAGAIN:
			// the completion queue is full or the kernel lacks memory for now: nothing was
			// taken, the entries stay queued
			return 0, nil
		default:
			return 0, fmt.Errorf("uring: io_uring_enter: %w", e)
		}
	}
}

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

// Probe uses every system call a ring needs (io_uring_setup, io_uring_register,
// io_uring_enter) once: it registers a page, reads a page of /dev/zero into it through the
// ring and checks what came back. It returns nil where rings work, and an error wrapping
// ErrUnsupported where the kernel or a seccomp filter refuses one of the calls.
func Probe() error {
	r, err := New(1, Options{})
	if err != nil {
		return err
	}
	defer r.Close()
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return fmt.Errorf("uring: probe: %w", err)
	}
	defer unix.Munmap(page)
	page[0] = 1
	if err := r.RegisterBuffer(page); err != nil {
		return refused(err)
	}
	fd, err := unix.Open("/dev/zero", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("uring: probe: %w", err)
	}
	defer unix.Close(fd)
	if err := r.Read(fd, page, 0, 7); err != nil {
		return fmt.Errorf("uring: probe: %w", err)
	}
	if err := r.Wait(); err != nil {
		return refused(err)
	}
	var got Completion
	if r.Reap(func(c Completion) { got = c }) != 1 || got.Tag != 7 || got.Res != int32(len(page)) || page[0] != 0 {
		return fmt.Errorf("uring: probe: a read of /dev/zero through the ring gave %d bytes (tag %d), first byte %d", got.Res, got.Tag, page[0])
	}
	return nil
}

// refused marks an error of io_uring_register or io_uring_enter that a seccomp filter or
// the kernel's policy gives (EPERM, ENOSYS, EACCES) as ErrUnsupported.
func refused(err error) error {
	for _, e := range []unix.Errno{unix.EPERM, unix.ENOSYS, unix.EACCES} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
	}
	return err
}
