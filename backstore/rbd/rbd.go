//go:build rbd && cgo

package rbd

/*
#cgo LDFLAGS: -lrbd -lrados
#include <stdlib.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

// srpt_mon_command sends one JSON command to the monitors; *out and *outs (status text) are
// malloc'ed by librados and freed with rados_buffer_free.
static int srpt_mon_command(rados_t cluster, const char *cmd, char **out, size_t *outlen, char **outs, size_t *outslen) {
	const char *cmds[1] = { cmd };
	return rados_mon_command(cluster, cmds, 1, NULL, 0, out, outlen, outs, outslen);
}
*/
import "C"

import (
	"fmt"
	"strconv"
	"syscall"
	"time"
	"unsafe"
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
