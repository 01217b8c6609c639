//go:build !rbd || !cgo

package rbd

import (
	"errors"
	"time"
)

// Without the build tag rbd (or without cgo), librbd and librados are not linked in: Connect
// fails with ErrNotBuilt, so no Conn, Image, Object or Watch is ever made, and their methods
// are here only so that the code above this package compiles the same with and without Ceph.

// Built: this binary links librbd and librados (the build tag rbd, with cgo).
const Built = false

// ErrNotBuilt is Connect's error in a binary built without the build tag rbd.
var ErrNotBuilt = errors.New("built without RBD support (build with -tags rbd where librbd-dev and librados-dev are installed; make build does)")

// Connect fails: see ErrNotBuilt.
func Connect(Options, ...Setting) (*Conn, error) { return nil, ErrNotBuilt }

type (
	// Conn is a connection to a cluster.
	Conn struct{}
	// Image is an open RBD image.
	Image struct{}
	// Object is one RADOS object.
	Object struct{}
	// Watch is a watch on an object.
	Watch struct{}
)

func (*Conn) ConfGet(string) (string, error)                          { return "", ErrNotBuilt }
func (*Conn) MonCommand(string) (string, error)                       { return "", ErrNotBuilt }
func (*Conn) PoolCreate(string) error                                 { return ErrNotBuilt }
func (*Conn) Close()                                                  {}
func (*Conn) CreateImage(_, _, _ string, _ uint64) error              { return ErrNotBuilt }
func (*Conn) RemoveImage(_, _, _ string) error                        { return ErrNotBuilt }
func (*Conn) OpenImage(_, _, _ string, _ bool, _ int) (*Image, error) { return nil, ErrNotBuilt }
func (*Conn) OpenObject(_, _, _ string) (*Object, error)              { return nil, ErrNotBuilt }
func (*Conn) InstanceID() uint64                                      { return 0 }
func (*Conn) WaitForLatestOSDMap() error                              { return ErrNotBuilt }
func (*Conn) Addrs() (string, error)                                  { return "", ErrNotBuilt }

func (*Image) Read([]byte, int64) error                            { return ErrNotBuilt }
func (*Image) Write([]byte, int64) error                           { return ErrNotBuilt }
func (*Image) Discard(_, _ int64) error                            { return ErrNotBuilt }
func (*Image) WriteZeroes(_, _ int64) error                        { return ErrNotBuilt }
func (*Image) Flush() error                                        { return ErrNotBuilt }
func (*Image) CompareAndWrite(_, _ []byte, _ int64) (int64, error) { return 0, ErrNotBuilt }
func (*Image) Size() (uint64, error)                               { return 0, ErrNotBuilt }
func (*Image) Resize(uint64) error                                 { return ErrNotBuilt }
func (*Image) Watch(func()) error                                  { return ErrNotBuilt }
func (*Image) Unwatch() error                                      { return ErrNotBuilt }
func (*Image) Close() error                                        { return ErrNotBuilt }

func (*Object) Remove() error { return ErrNotBuilt }
func (*Object) Name() string  { return "" }
func (*Object) Close()        {}
func (*Object) ReadOmap([]string, map[string][]byte) (map[string][]byte, error) {
	return nil, ErrNotBuilt
}
func (*Object) ListOmap(string, int) (map[string][]byte, error)   { return nil, ErrNotBuilt }
func (*Object) WriteOmap(OmapWrite) error                         { return ErrNotBuilt }
func (*Object) Notify([]byte, time.Duration) (NotifyReply, error) { return NotifyReply{}, ErrNotBuilt }
func (*Object) Ack(Notification, []byte) error                    { return ErrNotBuilt }
func (*Object) Watch(time.Duration, func(Notification), func(error)) (*Watch, error) {
	return nil, ErrNotBuilt
}

func (*Watch) Cookie() uint64                { return 0 }
func (*Watch) Check() (time.Duration, error) { return 0, ErrNotBuilt }
func (*Watch) Close() error                  { return ErrNotBuilt }
