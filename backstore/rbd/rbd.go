//go:build rbd && cgo

package rbd

/*
#cgo LDFLAGS: -lrbd -lrados
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <rados/librados.h>
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

// srpt_rbd_watch_cb runs on a librbd thread when the image header changes (a resize among
// other things): it only wakes the Go side through the eventfd given as its argument.
static void srpt_rbd_watch_cb(void *arg) {
	uint64_t one = 1;
	ssize_t r = write((int)(intptr_t)arg, &one, sizeof one);
	(void)r;
}

// srpt_mon_command sends one JSON command to the monitors; *out and *outs (status text) are
// malloc'ed by librados and freed with rados_buffer_free.
static int srpt_mon_command(rados_t cluster, const char *cmd, char **out, size_t *outlen, char **outs, size_t *outslen) {
	const char *cmds[1] = { cmd };
	return rados_mon_command(cluster, cmds, 1, NULL, 0, out, outlen, outs, outslen);
}

// srpt_rbd_caw is a synchronous compare-and-write; *mismatch gets librbd's mismatch offset.
static ssize_t srpt_rbd_caw(rbd_image_t img, uint64_t off, size_t len, const char *cmp, const char *buf, uint64_t *mismatch) {
	return rbd_compare_and_write(img, off, len, cmp, buf, mismatch, 0);
}

static int srpt_rbd_update_watch(rbd_image_t img, uint64_t *handle, int fd) {
	return rbd_update_watch(img, handle, srpt_rbd_watch_cb, (void *)(intptr_t)fd);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is a connection to a cluster (a librados client with its own threads).
type Conn struct {
	cluster C.rados_t
}

// errno turns librados' and librbd's negative return values into a syscall.Errno.
func errno(r C.int) error {
	if r >= 0 {
		return nil
	}
	return syscall.Errno(-r)
}

func cstr(s string) *C.char { return C.CString(s) }

func (c *Conn) confSet(key, val string) error {
	k, v := cstr(key), cstr(val)
	defer C.free(unsafe.Pointer(k))
	defer C.free(unsafe.Pointer(v))
	if err := errno(C.rados_conf_set(c.cluster, k, v)); err != nil {
		return fmt.Errorf("setting %s=%s: %w", key, val, err)
	}
	return nil
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// Built: this binary links librbd and librados (the build tag rbd, with cgo).
const Built = true

// Connect makes a librados client with o and connects it; more are set last.
func Connect(o Options, more ...Setting) (*Conn, error) {
	o = o.WithDefaults()
	c := &Conn{}
	var id *C.char
	if o.ClientID != "" {
		id = cstr(o.ClientID)
		defer C.free(unsafe.Pointer(id))
	}
	if err := errno(C.rados_create(&c.cluster, id)); err != nil {
		return nil, fmt.Errorf("rados_create: %w", err)
	}
	fail := func(err error) (*Conn, error) {
		C.rados_shutdown(c.cluster)
		return nil, err
	}
	if o.ConfFile != "" || o.MonHost == "" {
		var path *C.char
		if o.ConfFile != "" {
			path = cstr(o.ConfFile)
			defer C.free(unsafe.Pointer(path))
		}
		if err := errno(C.rados_conf_read_file(c.cluster, path)); err != nil {
			what := o.ConfFile
			if what == "" {
				what = "the default ceph.conf"
			}
			return fail(fmt.Errorf("reading %s: %w", what, err))
		}
	}
	set := [][2]string{
		// A 4 KiB discard inside an object is otherwise skipped, and UNMAP could not promise
		// that unmapped blocks read back as zeroes.
		{"rbd_skip_partial_discard", "false"},
	}
	if o.MonHost != "" {
		set = append(set, [2]string{"mon_host", o.MonHost})
	}
	if o.Keyring != "" {
		set = append(set, [2]string{"keyring", o.Keyring})
	}
	if o.MountTimeout > 0 {
		set = append(set, [2]string{"client_mount_timeout", seconds(o.MountTimeout)})
	}
	if o.OSDOpTimeout > 0 {
		set = append(set, [2]string{"rados_osd_op_timeout", seconds(o.OSDOpTimeout)},
			[2]string{"rados_mon_op_timeout", seconds(o.OSDOpTimeout)})
	}
	for _, kv := range set {
		if err := c.confSet(kv[0], kv[1]); err != nil {
			return fail(err)
		}
	}
	for _, kv := range more {
		if err := c.confSet(kv.Name, kv.Value); err != nil {
			return fail(err)
		}
	}
	if err := errno(C.rados_connect(c.cluster)); err != nil {
		return fail(fmt.Errorf("rados_connect: %w", err))
	}
	return c, nil
}

// ConfGet returns the value of a configuration option as the client sees it.
func (c *Conn) ConfGet(key string) (string, error) {
	k := cstr(key)
	defer C.free(unsafe.Pointer(k))
	buf := make([]byte, 256)
	if err := errno(C.rados_conf_get(c.cluster, k, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))); err != nil {
		return "", fmt.Errorf("rados_conf_get %s: %w", key, err)
	}
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0]))), nil
}

// MonCommand sends a JSON command to the monitors (as the ceph tool does) and returns its
// output; the status text is in the error when it fails.
func (c *Conn) MonCommand(cmd string) (string, error) {
	cc := cstr(cmd)
	defer C.free(unsafe.Pointer(cc))
	var out, outs *C.char
	var outLen, outsLen C.size_t
	r := C.srpt_mon_command(c.cluster, cc, &out, &outLen, &outs, &outsLen)
	o, st := C.GoStringN(out, C.int(outLen)), C.GoStringN(outs, C.int(outsLen))
	if out != nil {
		C.rados_buffer_free(out)
	}
	if outs != nil {
		C.rados_buffer_free(outs)
	}
	if err := errno(r); err != nil {
		return o, fmt.Errorf("mon command %s: %w: %s", cmd, err, st)
	}
	return o, nil
}

// PoolCreate makes a pool with the cluster's default settings.
func (c *Conn) PoolCreate(name string) error {
	n := cstr(name)
	defer C.free(unsafe.Pointer(n))
	if err := errno(C.rados_pool_create(c.cluster, n)); err != nil {
		return fmt.Errorf("rados_pool_create %s: %w", name, err)
	}
	return nil
}

// Close shuts the client down. Every image opened through it must be closed first.
func (c *Conn) Close() {
	C.rados_shutdown(c.cluster)
}

// ioctx opens an I/O context on pool, in namespace ns when not empty.
func (c *Conn) ioctx(pool, ns string) (C.rados_ioctx_t, error) {
	var io C.rados_ioctx_t
	p := cstr(pool)
	defer C.free(unsafe.Pointer(p))
	if err := errno(C.rados_ioctx_create(c.cluster, p, &io)); err != nil {
		return nil, fmt.Errorf("pool %s: rados_ioctx_create: %w", pool, err)
	}
	if ns != "" {
		n := cstr(ns)
		defer C.free(unsafe.Pointer(n))
		C.rados_ioctx_set_namespace(io, n)
	}
	return io, nil
}

// CreateImage makes an image of size bytes with the default features (tests use it).
func (c *Conn) CreateImage(pool, ns, name string, size uint64) error {
	return c.imageOp("rbd_create", pool, ns, name, func(io C.rados_ioctx_t, n *C.char) C.int {
		var order C.int
		return C.rbd_create(io, n, C.uint64_t(size), &order)
	})
}

// RemoveImage deletes an image (tests use it).
func (c *Conn) RemoveImage(pool, ns, name string) error {
	return c.imageOp("rbd_remove", pool, ns, name, func(io C.rados_ioctx_t, n *C.char) C.int {
		return C.rbd_remove(io, n)
	})
}

// imageOp calls op, librbd's function what, with an I/O context of pool (and namespace ns)
// and the image's name.
func (c *Conn) imageOp(what, pool, ns, name string, op func(io C.rados_ioctx_t, name *C.char) C.int) error {
	io, err := c.ioctx(pool, ns)
	if err != nil {
		return err
	}
	defer C.rados_ioctx_destroy(io)
	n := cstr(name)
	defer C.free(unsafe.Pointer(n))
	if err := errno(op(io, n)); err != nil {
		return fmt.Errorf("%s %s/%s: %w", what, pool, name, err)
	}
	return nil
}

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

// Watch calls fn, on a goroutine of its own, after the image's header changed (a resize, a
// snapshot, a lock handed over): fn re-reads what it cares about. One watch per image.
func (im *Image) Watch(fn func()) error {
	im.watchMu.Lock()
	defer im.watchMu.Unlock()
	if im.watching {
		return errors.New("rbd: image already watched")
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	if err := errno(C.srpt_rbd_update_watch(im.img, &im.watchH, C.int(fd))); err != nil {
		unix.Close(fd)
		return fmt.Errorf("rbd_update_watch %s: %w", im.name, err)
	}
	im.wfd = os.NewFile(uintptr(fd), "rbd-watch")
	im.watched = make(chan struct{})
	im.watching = true
	go func() {
		defer close(im.watched)
		var buf [8]byte
		for {
			if _, err := im.wfd.Read(buf[:]); err != nil {
				return
			}
			fn()
		}
	}()
	return nil
}

// Unwatch ends Watch and waits until its callback has returned; Close does it too. Call it
// holding no lock that the callback takes.
func (im *Image) Unwatch() error {
	im.watchMu.Lock()
	defer im.watchMu.Unlock()
	if !im.watching {
		return nil
	}
	var err error
	// rbd_update_unwatch waits for the C callback in progress, so nothing writes the eventfd
	// once it is closed.
	if e := errno(C.rbd_update_unwatch(im.img, im.watchH)); e != nil {
		err = fmt.Errorf("rbd_update_unwatch %s: %w", im.name, e)
	}
	im.wfd.Close()
	<-im.watched
	im.watching = false
	return err
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
