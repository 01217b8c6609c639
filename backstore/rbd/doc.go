// Package rbd is the thin cgo layer over librbd and librados that the RBD backstore
// (backstore.RBD) stands on, and the one place of the build tag rbd: with it, the package links
// librbd and librados, which need librbd-dev and librados-dev (Debian) at build time and librbd1
// and librados2 at run time; without it, Connect fails with ErrNotBuilt (stub.go), so that
// everything above builds and vets the same on hosts without Ceph.
//
// I/O is asynchronous inside librbd and synchronous for the caller: Image.Read and friends
// submit one librbd aio request and wait for its completion on a channel. No OS thread or
// goroutine is made per request: librbd writes an eventfd registered with
// rbd_set_image_notification when a request completes, one goroutine per image waits for it
// in the Go netpoller and collects the finished completions with rbd_poll_io_events. Request
// state lives in a fixed table of slots, so steady-state I/O allocates nothing on the Go heap.
package rbd
