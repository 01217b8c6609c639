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
