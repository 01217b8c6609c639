//go:build rbd && cgo

package rbd

/*
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <rbd/librbd.h>

enum { srpt_op_read, srpt_op_write, srpt_op_discard, srpt_op_write_zeroes, srpt_op_flush };

// srpt_rbd_submit creates a completion whose argument is the request's slot number and starts
// one aio request with it; the completion is released here if librbd refuses the request, and
// by srpt_rbd_poll once it completes.
static int srpt_rbd_submit(rbd_image_t img, int op, uint64_t off, uint64_t len, void *buf, uintptr_t slot) {
	rbd_completion_t c;
	int r = rbd_aio_create_completion((void *)slot, NULL, &c);
	if (r < 0)
		return r;
	switch (op) {
	case srpt_op_read:
		r = rbd_aio_read(img, off, (size_t)len, (char *)buf, c);
		break;
	case srpt_op_write:
		r = rbd_aio_write(img, off, (size_t)len, (const char *)buf, c);
		break;
	case srpt_op_discard:
		r = rbd_aio_discard(img, off, len, c);
		break;
	case srpt_op_write_zeroes:
		r = rbd_aio_write_zeroes(img, off, (size_t)len, c, 0, 0);
		break;
	case srpt_op_flush:
		r = rbd_aio_flush(img, c);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		rbd_aio_release(c);
	return r;
}

// srpt_rbd_poll collects up to max finished completions: their slot numbers and return values,
// then releases them. It returns how many, or a negative errno.
static int srpt_rbd_poll(rbd_image_t img, uint32_t *slots, int64_t *rets, int max) {
	rbd_completion_t comps[64];
	if (max > 64)
		max = 64;
	int n = rbd_poll_io_events(img, comps, max);
	for (int i = 0; i < n; i++) {
		slots[i] = (uint32_t)(uintptr_t)rbd_aio_get_arg(comps[i]);
		rets[i] = (int64_t)rbd_aio_get_return_value(comps[i]);
		rbd_aio_release(comps[i]);
	}
	return n;
}

// srpt_rbd_caw is a synchronous compare-and-write; *mismatch gets librbd's mismatch offset.
static ssize_t srpt_rbd_caw(rbd_image_t img, uint64_t off, size_t len, const char *cmp, const char *buf, uint64_t *mismatch) {
	return rbd_compare_and_write(img, off, len, cmp, buf, mismatch, 0);
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// An open image: its asynchronous requests, started through librbd's aio calls and collected by
// a poller woken through an eventfd, and its size.

// pollBatch is how many completions one rbd_poll_io_events call collects (srpt_rbd_poll's array).
const pollBatch = 64

// slot is one request in flight: its submitter waits on done for librbd's return value.
type slot struct {
	done chan int64
	// pin keeps a Go-heap buffer where it is while librbd holds its address (cgo's rule for
	// memory that C keeps after a call returns). Registered RDMA buffers are not Go memory;
	// pinning them is a no-op.
	pin runtime.Pinner
}

// Image is an open RBD image. Its methods are safe for concurrent use until Close.
type Image struct {
	io    C.rados_ioctx_t
	img   C.rbd_image_t
	name  string
	slots []slot
	free  chan uint32

	efd     *os.File // librbd's completion eventfd, read by poll
	polled  chan struct{}
	closing atomic.Bool // set by Close before it wakes poll to end it

	// poll's batch, on the heap with the Image so that passing it to C does not make it escape
	// at each call.
	pollSlots [pollBatch]uint32
	pollRets  [pollBatch]int64

	watchMu  sync.Mutex
	watching bool
	watchH   C.uint64_t
	wfd      *os.File
	watched  chan struct{}
}

// OpenImage opens pool/[ns/]name, read-only when readOnly. depth bounds the requests in flight
// (0: DefaultDepth).
func (c *Conn) OpenImage(pool, ns, name string, readOnly bool, depth int) (*Image, error) {
	if depth <= 0 {
		depth = DefaultDepth
	}
	io, err := c.ioctx(pool, ns)
	if err != nil {
		return nil, err
	}
	im := &Image{io: io, name: pool + "/" + name, slots: make([]slot, depth), free: make(chan uint32, depth), polled: make(chan struct{})}
	if ns != "" {
		im.name = pool + "/" + ns + "/" + name
	}
	n := cstr(name)
	defer C.free(unsafe.Pointer(n))
	if readOnly {
		err = errno(C.rbd_open_read_only(io, n, &im.img, nil))
	} else {
		err = errno(C.rbd_open(io, n, &im.img, nil))
	}
	if err != nil {
		C.rados_ioctx_destroy(io)
		return nil, fmt.Errorf("rbd_open %s: %w", im.name, err)
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		C.rbd_close(im.img)
		C.rados_ioctx_destroy(io)
		return nil, fmt.Errorf("eventfd for %s: %w", im.name, err)
	}
	if err := errno(C.rbd_set_image_notification(im.img, C.int(fd), C.EVENT_TYPE_EVENTFD)); err != nil {
		unix.Close(fd)
		C.rbd_close(im.img)
		C.rados_ioctx_destroy(io)
		return nil, fmt.Errorf("rbd_set_image_notification %s: %w", im.name, err)
	}
	// A non-blocking descriptor given to os.NewFile is read through the netpoller: the poll
	// goroutine sleeps without holding an OS thread.
	im.efd = os.NewFile(uintptr(fd), "rbd-completions")
	for i := range im.slots {
		im.slots[i].done = make(chan int64, 1)
		im.free <- uint32(i)
	}
	go im.poll()
	return im, nil
}

// poll hands finished requests to their submitters until the eventfd is closed.
func (im *Image) poll() {
	defer close(im.polled)
	var buf [8]byte
	for {
		if _, err := im.efd.Read(buf[:]); err != nil || im.closing.Load() {
			return // Close woke it, after every request completed
		}
		for {
			n := int(C.srpt_rbd_poll(im.img, (*C.uint32_t)(&im.pollSlots[0]), (*C.int64_t)(&im.pollRets[0]), pollBatch))
			for i := 0; i < n; i++ {
				im.slots[im.pollSlots[i]].done <- im.pollRets[i]
			}
			if n < pollBatch {
				break
			}
		}
	}
}

// submit runs one request and waits for it; it returns librbd's completion value (bytes for a
// read, 0 otherwise) or the errno.
func (im *Image) submit(op C.int, off, length uint64, p []byte) (int64, error) {
	idx := <-im.free
	s := &im.slots[idx]
	var buf unsafe.Pointer
	if len(p) > 0 {
		buf = unsafe.Pointer(&p[0])
		s.pin.Pin(buf)
	}
	r := C.srpt_rbd_submit(im.img, op, C.uint64_t(off), C.uint64_t(length), buf, C.uintptr_t(idx))
	var ret int64
	if r < 0 {
		ret = int64(r)
	} else {
		ret = <-s.done
	}
	if buf != nil {
		s.pin.Unpin()
	}
	im.free <- idx
	if ret < 0 {
		return 0, syscall.Errno(-ret)
	}
	return ret, nil
}

// Read fills p from off.
func (im *Image) Read(p []byte, off int64) error {
	n, err := im.submit(C.srpt_op_read, uint64(off), uint64(len(p)), p)
	if err != nil {
		return err
	}
	if n != int64(len(p)) {
		return ErrShortRead
	}
	return nil
}

// Write writes p at off. The write is on the OSDs when it returns unless the RBD cache is on.
func (im *Image) Write(p []byte, off int64) error {
	_, err := im.submit(C.srpt_op_write, uint64(off), uint64(len(p)), p)
	return err
}

// Discard deallocates [off, off+length).
func (im *Image) Discard(off, length int64) error {
	_, err := im.submit(C.srpt_op_discard, uint64(off), uint64(length), nil)
	return err
}

// WriteZeroes makes [off, off+length) read back as zeroes.
func (im *Image) WriteZeroes(off, length int64) error {
	_, err := im.submit(C.srpt_op_write_zeroes, uint64(off), uint64(length), nil)
	return err
}

// Flush waits until every completed write is on the OSDs (only matters with the RBD cache on).
func (im *Image) Flush() error {
	_, err := im.submit(C.srpt_op_flush, 0, 0, nil)
	return err
}

// CompareAndWrite writes data at off when the image holds cmp there (of the same length), as
// one operation on the OSD: no other client's write can come between the compare and the
// write. On a miscompare nothing is written and the error is ErrMiscompare with the offset,
// from off, of the first byte that differs. librbd takes it only for one 512-byte sector
// (CompareAndWriteMax; EINVAL otherwise). It waits in the calling goroutine's thread: it is rare (VMware's atomic
// test and set, a heartbeat every few seconds).
func (im *Image) CompareAndWrite(cmp, data []byte, off int64) (mismatch int64, err error) {
	if len(cmp) != len(data) || len(cmp) == 0 {
		return 0, fmt.Errorf("rbd: compare and write of %d bytes against %d: %w", len(data), len(cmp), syscall.EINVAL)
	}
	var mo C.uint64_t
	r := C.srpt_rbd_caw(im.img, C.uint64_t(off), C.size_t(len(cmp)), (*C.char)(unsafe.Pointer(&cmp[0])),
		(*C.char)(unsafe.Pointer(&data[0])), &mo)
	runtime.KeepAlive(cmp)
	runtime.KeepAlive(data)
	switch {
	case r >= 0:
		return 0, nil
	case syscall.Errno(-r) == syscall.EILSEQ:
		return int64(mo), ErrMiscompare // librbd counts from off
	}
	return 0, syscall.Errno(-r)
}

// Size returns the image's size as librbd knows it now (it follows resizes by others).
func (im *Image) Size() (uint64, error) {
	var size C.uint64_t
	if err := errno(C.rbd_get_size(im.img, &size)); err != nil {
		return 0, err
	}
	return uint64(size), nil
}

// Resize changes the image's size.
func (im *Image) Resize(size uint64) error {
	return errno(C.rbd_resize(im.img, C.uint64_t(size)))
}

// Close closes the image. The caller makes sure no request is in flight or starts later.
func (im *Image) Close() error {
	err := im.Unwatch()
	// poll ends before rbd_close: librbd may still write the eventfd for a completion that
	// poll already collected (it queues the completion, then notifies), and a poll woken by
	// that must not reach a closed image. The eventfd stays open until librbd is done with it.
	im.closing.Store(true)
	one := [8]byte{1}
	if _, e := im.efd.Write(one[:]); e != nil && err == nil {
		err = fmt.Errorf("waking the completion poller of %s: %w", im.name, e)
	}
	<-im.polled
	if e := errno(C.rbd_close(im.img)); e != nil && err == nil {
		err = fmt.Errorf("rbd_close %s: %w", im.name, e)
	}
	im.efd.Close()
	C.rados_ioctx_destroy(im.io)
	return err
}
