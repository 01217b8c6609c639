//go:build rbd && cgo

package rbd

/*
#cgo LDFLAGS: -lrados
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rados/librados.h>

// A watch's events (notifies and errors) wait in a queue that the librados callbacks fill and
// a Go goroutine drains when the eventfd says so: no Go code runs on librados' threads, which
// complete every operation of the client.
struct srpt_wev {
	struct srpt_wev *next;
	uint64_t notify_id, cookie, notifier;
	int err;
	size_t len;
	char data[];
};

struct srpt_wq {
	pthread_mutex_t mu;
	struct srpt_wev *head, *tail;
	int efd;
};

static struct srpt_wq *srpt_wq_new(int efd) {
	struct srpt_wq *q = calloc(1, sizeof *q);
	if (q == NULL)
		return NULL;
	pthread_mutex_init(&q->mu, NULL);
	q->efd = efd;
	return q;
}

static void srpt_wq_push(struct srpt_wq *q, struct srpt_wev *e) {
	uint64_t one = 1;
	pthread_mutex_lock(&q->mu);
	if (q->tail)
		q->tail->next = e;
	else
		q->head = e;
	q->tail = e;
	pthread_mutex_unlock(&q->mu);
	ssize_t r = write(q->efd, &one, sizeof one);
	(void)r;
}

static struct srpt_wev *srpt_wq_pop(struct srpt_wq *q) {
	pthread_mutex_lock(&q->mu);
	struct srpt_wev *e = q->head;
	if (e) {
		q->head = e->next;
		if (q->head == NULL)
			q->tail = NULL;
	}
	pthread_mutex_unlock(&q->mu);
	return e;
}

static char *srpt_wev_data(struct srpt_wev *e) { return e->data; }

static void srpt_wq_free(struct srpt_wq *q) {
	struct srpt_wev *e;
	while ((e = srpt_wq_pop(q)) != NULL)
		free(e);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

static void srpt_watch_cb(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier, void *data, size_t len) {
	struct srpt_wev *e = malloc(sizeof *e + len);
	if (e == NULL)
		return; // not acknowledged: the notifier sees a timeout
	memset(e, 0, sizeof *e);
	e->notify_id = notify_id;
	e->cookie = handle;
	e->notifier = notifier;
	e->len = len;
	if (len)
		memcpy(e->data, data, len);
	srpt_wq_push(arg, e);
}

static void srpt_watch_err(void *arg, uint64_t cookie, int err) {
	struct srpt_wev *e = calloc(1, sizeof *e);
	if (e == NULL)
		return;
	e->cookie = cookie;
	e->err = err < 0 ? err : -EIO;
	srpt_wq_push(arg, e);
}

static int srpt_watch(rados_ioctx_t io, const char *oid, uint64_t *cookie, uint32_t timeout, struct srpt_wq *q) {
	return rados_watch3(io, oid, cookie, srpt_watch_cb, srpt_watch_err, timeout, q);
}

// srpt_read_op_run runs and releases a read op that reads omap values through *iter, and
// returns *val, the op's own result, which librados sets while it runs; on failure the
// iterator is ended and the error returned.
static int srpt_read_op_run(rados_read_op_t op, rados_ioctx_t io, const char *oid, rados_omap_iter_t *iter, int *val) {
	int r = rados_read_op_operate(op, io, oid, 0);
	rados_release_read_op(op);
	if (r < 0) {
		if (*iter) {
			rados_omap_get_end(*iter);
			*iter = NULL;
		}
		return r;
	}
	return *val;
}

// srpt_omap_read compares keys with values (a failed comparison fails the read with
// -ECANCELED) and reads the values of other keys, returning an iterator over those found.
static int srpt_omap_read(rados_ioctx_t io, const char *oid,
		char **ck, size_t *ckl, char **cv, size_t *cvl, int ncmp,
		char **gk, size_t *gkl, int nget, rados_omap_iter_t *iter) {
	int cmpval[64], getval = 0;
	if (ncmp > 64)
		return -E2BIG;
	rados_read_op_t op = rados_create_read_op();
	for (int i = 0; i < ncmp; i++)
		rados_read_op_omap_cmp2(op, ck[i], LIBRADOS_CMPXATTR_OP_EQ, cv[i], ckl[i], cvl[i], &cmpval[i]);
	*iter = NULL;
	if (nget > 0)
		rados_read_op_omap_get_vals_by_keys2(op, (char const *const *)gk, nget, gkl, iter, &getval);
	return srpt_read_op_run(op, io, oid, iter, &getval);
}

// srpt_omap_list reads up to max keys starting with prefix, and their values.
static int srpt_omap_list(rados_ioctx_t io, const char *oid, const char *prefix, uint64_t max, rados_omap_iter_t *iter) {
	rados_read_op_t op = rados_create_read_op();
	unsigned char more = 0;
	int val = 0;
	*iter = NULL;
	rados_read_op_omap_get_vals2(op, "", prefix, max, iter, &more, &val);
	return srpt_read_op_run(op, io, oid, iter, &val);
}

static int srpt_omap_write(rados_ioctx_t io, const char *oid, int create,
		char **ck, size_t *ckl, char **cv, size_t *cvl, int ncmp,
		char **sk, size_t *skl, char **sv, size_t *svl, int nset,
		char **rk, size_t *rkl, int nrm) {
	rados_write_op_t op = rados_create_write_op();
	int cmpval[64];
	if (ncmp > 64)
		return -E2BIG;
	if (create)
		rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, NULL);
	for (int i = 0; i < ncmp; i++)
		rados_write_op_omap_cmp2(op, ck[i], LIBRADOS_CMPXATTR_OP_EQ, cv[i], ckl[i], cvl[i], &cmpval[i]);
	if (nset > 0)
		rados_write_op_omap_set2(op, (char const *const *)sk, (char const *const *)sv, skl, svl, nset);
	if (nrm > 0)
		rados_write_op_omap_rm_keys2(op, (char const *const *)rk, rkl, nrm);
	int r = rados_write_op_operate2(op, io, oid, NULL, 0);
	rados_release_write_op(op);
	return r;
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Object is one RADOS object, reached through an I/O context of its own: atomic reads and
// guarded updates of its omap, and watch and notify. Its methods are safe for concurrent use
// until Close.
type Object struct {
	conn *Conn
	io   C.rados_ioctx_t
	oid  *C.char
	name string
}

// OpenObject names object oid in pool (and namespace ns when not empty); the object need not
// exist.
func (c *Conn) OpenObject(pool, ns, oid string) (*Object, error) {
	io, err := c.ioctx(pool, ns)
	if err != nil {
		return nil, err
	}
	name := pool + "/" + oid
	if ns != "" {
		name = pool + "/" + ns + "/" + oid
	}
	return &Object{conn: c, io: io, oid: cstr(oid), name: name}, nil
}

// Remove deletes the object (tests use it).
func (o *Object) Remove() error { return o.opError("remove", C.rados_remove(o.io, o.oid)) }

// Name is pool/[namespace/]oid.
func (o *Object) Name() string { return o.name }

// Close releases the I/O context. Every watch must be closed first.
func (o *Object) Close() {
	C.rados_ioctx_destroy(o.io)
	C.free(unsafe.Pointer(o.oid))
}

// InstanceID is the client's global id (client.N's N), as notify replies name watchers.
func (c *Conn) InstanceID() uint64 { return uint64(C.rados_get_instance_id(c.cluster)) }

// WaitForLatestOSDMap waits until the client has the cluster's newest OSD map (tests: after a
// blocklist entry, the client's next operations make the OSDs apply it).
func (c *Conn) WaitForLatestOSDMap() error {
	return errno(C.rados_wait_for_latest_osdmap(c.cluster))
}

// Addrs is the client's address as the OSDs see it (for a blocklist entry).
func (c *Conn) Addrs() (string, error) {
	var addrs *C.char
	if err := errno(C.rados_getaddrs(c.cluster, &addrs)); err != nil {
		return "", fmt.Errorf("rados_getaddrs: %w", err)
	}
	defer C.free(unsafe.Pointer(addrs))
	return C.GoString(addrs), nil
}

// cArrays is byte strings copied to C memory: pointers and lengths, freed together.
type cArrays struct {
	ptrs **C.char
	lens *C.size_t
	n    int
}

func newCArrays(items [][]byte) cArrays {
	a := cArrays{n: len(items)}
	if a.n == 0 {
		return a
	}
	a.ptrs = (**C.char)(C.calloc(C.size_t(a.n), C.size_t(unsafe.Sizeof(uintptr(0)))))
	a.lens = (*C.size_t)(C.calloc(C.size_t(a.n), C.size_t(unsafe.Sizeof(C.size_t(0)))))
	ptrs := unsafe.Slice(a.ptrs, a.n)
	lens := unsafe.Slice(a.lens, a.n)
	for i, b := range items {
		ptrs[i] = (*C.char)(C.CBytes(append(b, 0))) // never a nil pointer, even for ""
		lens[i] = C.size_t(len(b))
	}
	return a
}

func (a cArrays) free() {
	if a.n == 0 {
		return
	}
	for _, p := range unsafe.Slice(a.ptrs, a.n) {
		C.free(unsafe.Pointer(p))
	}
	C.free(unsafe.Pointer(a.ptrs))
	C.free(unsafe.Pointer(a.lens))
}

// keysValues splits m into keys and values, in one order.
func keysValues(m map[string][]byte) (ks, vs [][]byte) {
	for k, v := range m {
		ks, vs = append(ks, []byte(k)), append(vs, v)
	}
	return ks, vs
}

func strs(l []string) [][]byte {
	var b [][]byte
	for _, s := range l {
		b = append(b, []byte(s))
	}
	return b
}

// opError turns an operation's return value into an error naming the object.
func (o *Object) opError(what string, r C.int) error {
	switch {
	case r >= 0:
		return nil
	case syscall.Errno(-r) == syscall.ECANCELED:
		return fmt.Errorf("%s %s: %w", what, o.name, ErrCompare)
	}
	return fmt.Errorf("%s %s: %w", what, o.name, syscall.Errno(-r))
}

// ReadOmap reads the values of keys (missing keys are absent from the result) in one
// operation that first checks that every key of cmp holds its value (ErrCompare otherwise). A
// missing object is ENOENT.
func (o *Object) ReadOmap(keys []string, cmp map[string][]byte) (map[string][]byte, error) {
	ck, cv := keysValues(cmp)
	cka, cva, gka := newCArrays(ck), newCArrays(cv), newCArrays(strs(keys))
	defer cka.free()
	defer cva.free()
	defer gka.free()
	var iter C.rados_omap_iter_t
	r := C.srpt_omap_read(o.io, o.oid, cka.ptrs, cka.lens, cva.ptrs, cva.lens, C.int(cka.n),
		gka.ptrs, gka.lens, C.int(gka.n), &iter)
	if err := o.opError("omap read", r); err != nil {
		return nil, err
	}
	return o.drain(iter)
}

// ListOmap reads up to max keys that start with prefix, and their values.
func (o *Object) ListOmap(prefix string, max int) (map[string][]byte, error) {
	p := cstr(prefix)
	defer C.free(unsafe.Pointer(p))
	var iter C.rados_omap_iter_t
	if err := o.opError("omap list", C.srpt_omap_list(o.io, o.oid, p, C.uint64_t(max), &iter)); err != nil {
		return nil, err
	}
	return o.drain(iter)
}

// drain collects an omap iterator's pairs and ends it.
func (o *Object) drain(iter C.rados_omap_iter_t) (map[string][]byte, error) {
	out := make(map[string][]byte)
	if iter == nil {
		return out, nil
	}
	defer C.rados_omap_get_end(iter)
	for {
		var k, v *C.char
		var kl, vl C.size_t
		if err := errno(C.rados_omap_get_next2(iter, &k, &v, &kl, &vl)); err != nil {
			return nil, fmt.Errorf("omap read %s: %w", o.name, err)
		}
		if k == nil {
			return out, nil
		}
		out[C.GoStringN(k, C.int(kl))] = C.GoBytes(unsafe.Pointer(v), C.int(vl))
	}
}

// WriteOmap applies w atomically (ErrCompare when a comparison fails, and nothing changes).
func (o *Object) WriteOmap(w OmapWrite) error {
	ck, cv := keysValues(w.Cmp)
	sk, sv := keysValues(w.Set)
	cka, cva, ska, sva, rka := newCArrays(ck), newCArrays(cv), newCArrays(sk), newCArrays(sv), newCArrays(strs(w.Remove))
	defer cka.free()
	defer cva.free()
	defer ska.free()
	defer sva.free()
	defer rka.free()
	create := C.int(0)
	if w.Create {
		create = 1
	}
	r := C.srpt_omap_write(o.io, o.oid, create, cka.ptrs, cka.lens, cva.ptrs, cva.lens, C.int(cka.n),
		ska.ptrs, ska.lens, sva.ptrs, sva.lens, C.int(ska.n), rka.ptrs, rka.lens, C.int(rka.n))
	return o.opError("omap write", r)
}

// Notify sends data to every watcher of the object and waits until they all acknowledged it or
// timeout passed; the reply says who did and who did not (a timeout is not an error here).
func (o *Object) Notify(data []byte, timeout time.Duration) (NotifyReply, error) {
	var buf *C.char
	if len(data) > 0 {
		buf = (*C.char)(C.CBytes(data))
		defer C.free(unsafe.Pointer(buf))
	}
	var reply *C.char
	var replyLen C.size_t
	r := C.rados_notify2(o.io, o.oid, buf, C.int(len(data)), C.uint64_t(timeout.Milliseconds()), &reply, &replyLen)
	var b []byte
	if reply != nil {
		b = C.GoBytes(unsafe.Pointer(reply), C.int(replyLen))
		C.rados_buffer_free(reply)
	}
	if r < 0 && syscall.Errno(-r) != syscall.ETIMEDOUT {
		return NotifyReply{}, o.opError("notify", r)
	}
	return ParseNotifyReply(b)
}

// Ack acknowledges notification n with payload.
func (o *Object) Ack(n Notification, payload []byte) error {
	var buf *C.char
	if len(payload) > 0 {
		buf = (*C.char)(C.CBytes(payload))
		defer C.free(unsafe.Pointer(buf))
	}
	return o.opError("notify ack", C.rados_notify_ack(o.io, o.oid, C.uint64_t(n.ID), C.uint64_t(n.Cookie), buf, C.int(len(payload))))
}

// Watch is a watch on an object: onNotify and onError run on a goroutine of the watch, one at
// a time, in the order librados called back.
type Watch struct {
	o      *Object
	cookie C.uint64_t
	q      *C.struct_srpt_wq
	efd    *os.File
	done   chan struct{}
	once   sync.Once
}

// Watch registers a watch. timeout is how long the OSD keeps it after losing the client
// (osd_client_watch_timeout when 0). onError hears that the watch broke (notifies may have
// been missed): the caller then makes a new one.
func (o *Object) Watch(timeout time.Duration, onNotify func(Notification), onError func(error)) (*Watch, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	q := C.srpt_wq_new(C.int(fd))
	if q == nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: out of memory", o.name)
	}
	w := &Watch{o: o, q: q, efd: os.NewFile(uintptr(fd), "rados-watch"), done: make(chan struct{})}
	if err := o.opError("watch", C.srpt_watch(o.io, o.oid, &w.cookie, C.uint32_t(timeout/time.Second), q)); err != nil {
		w.efd.Close()
		C.srpt_wq_free(q)
		return nil, err
	}
	go w.run(onNotify, onError)
	return w, nil
}

// run hands the queued events to the callbacks until Close.
func (w *Watch) run(onNotify func(Notification), onError func(error)) {
	defer close(w.done)
	var buf [8]byte
	for {
		if _, err := w.efd.Read(buf[:]); err != nil {
			return // Close
		}
		for {
			e := C.srpt_wq_pop(w.q)
			if e == nil {
				break
			}
			if e.err != 0 {
				onError(fmt.Errorf("watch %s: %w", w.o.name, syscall.Errno(-e.err)))
			} else {
				onNotify(Notification{ID: uint64(e.notify_id), Cookie: uint64(e.cookie), Notifier: uint64(e.notifier),
					Data: C.GoBytes(unsafe.Pointer(C.srpt_wev_data(e)), C.int(e.len))})
			}
			C.free(unsafe.Pointer(e))
		}
	}
}

// Cookie identifies the watch in notify replies (with the client's InstanceID).
func (w *Watch) Cookie() uint64 { return uint64(w.cookie) }

// Check returns how long ago the watch was last confirmed by the OSD, or the error that broke
// it.
func (w *Watch) Check() (time.Duration, error) {
	r := C.rados_watch_check(w.o.io, w.cookie)
	if r < 0 {
		return 0, w.o.opError("watch check", r)
	}
	return time.Duration(r) * time.Millisecond, nil
}

// Close removes the watch and waits until no callback runs or will run. Call it holding no lock
// the callbacks take.
func (w *Watch) Close() error {
	var err error
	w.once.Do(func() {
		err = w.o.opError("unwatch", C.rados_unwatch2(w.o.io, w.cookie))
		// rados_watch_flush waits for the callbacks in progress: after it nothing touches
		// the queue, and the eventfd can go.
		C.rados_watch_flush(w.o.conn.cluster)
		w.efd.Close()
		<-w.done
		C.srpt_wq_free(w.q)
	})
	return err
}
