//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// cmLoop owns the process's RDMA/CM event channel. Every id of the package (listeners, the
// requests they receive, connections, routes) is created on it, and one goroutine, parked in
// the netpoller on the channel's non-blocking fd, reads and dispatches all events. One channel
// rather than one per listener because a connection's id stays on the channel of the listener
// that received it, and connections outlive their listener.
//
// Events are acknowledged inside srpt_get_cm_event, before dispatch: rdma_destroy_id waits for
// the events of its id to be acknowledged, so ids can be destroyed from any goroutine, the
// dispatching one included.
//
// The loop lives while ids exist (refs); the last release closes the channel.
type cmLoop struct {
	ch   *C.struct_rdma_event_channel
	file *os.File
	rc   syscall.RawConn
	ev   *C.struct_srpt_cm_event // C memory, read by run only
	done chan struct{}

	mu       sync.Mutex
	refs     int
	stopping bool
	handlers map[uint64]cmHandler
}

// cmHandler receives the events of one id.
type cmHandler interface{ cmEvent(ev *cmEvent) }

// cmEvent is a Go copy of struct srpt_cm_event.
type cmEvent struct {
	typ       C.int
	status    int
	key       uint64
	listenKey uint64
	id        *C.struct_rdma_cm_id
	device    *C.struct_ibv_device
	rr, depth uint8
	rnr       uint8
	priv      []byte
	local     []byte // sockaddr, connection requests only
	peer      []byte
}

// cmaMu orders the librdmacm calls that can make librdmacm re-read its device list
// (sync_devices_list, on a device lookup that misses and in ucma_init when its list is empty),
// and so free its verbs context of a removed device, before srpt_release_cma closes that
// context's files (devCtx.closeRemoved): those calls hold it shared, srpt_release_cma
// exclusively. Calls that look up no device (accept, reject, connect, disconnect, destroy) do
// without it.
var cmaMu sync.RWMutex

var (
	loopMu  sync.Mutex
	curLoop *cmLoop
	// keys identify ids in rdma_cm_id.context (an integer: C memory may not hold Go pointers).
	keySeq atomic.Uint64
)

func newKey() uint64 { return keySeq.Add(1) }

// acquireLoop returns the running loop with a reference, starting one if needed.
func acquireLoop() (*cmLoop, error) {
	loopMu.Lock()
	defer loopMu.Unlock()
	if l := curLoop; l != nil && l.tryAcquire() {
		return l, nil
	}
	cmaMu.RLock()
	ch, err := C.rdma_create_event_channel()
	cmaMu.RUnlock()
	if ch == nil {
		return nil, errorf("rdma_create_event_channel: %w", setupError(errnoFrom(err, errnoENODEV)))
	}
	f, rc, perr := pollable(int(ch.fd), "rdma_cm events")
	if perr != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, errorf("%w", perr)
	}
	l := &cmLoop{
		ch:       ch,
		file:     f,
		rc:       rc,
		ev:       (*C.struct_srpt_cm_event)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_srpt_cm_event{})))),
		done:     make(chan struct{}),
		refs:     1,
		handlers: map[uint64]cmHandler{},
	}
	curLoop = l
	go l.run()
	return l, nil
}

func errnoFrom(err error, fallback syscall.Errno) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok && e != 0 {
		return e
	}
	return fallback
}

// tryAcquire takes a reference unless the loop is stopping. The dispatching goroutine uses it
// for the id of a new connection request, which librdmacm created on this channel.
func (l *cmLoop) tryAcquire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return false
	}
	l.refs++
	return true
}

// release drops a reference. The last one stops the loop: closing the File wakes run, which
// destroys the channel on its way out. It does not wait, so that it can be called from run.
func (l *cmLoop) release() {
	l.mu.Lock()
	l.refs--
	stop := l.refs == 0
	if stop {
		l.stopping = true
	}
	l.mu.Unlock()
	if !stop {
		return
	}
	loopMu.Lock()
	if curLoop == l {
		curLoop = nil
	}
	loopMu.Unlock()
	l.file.Close()
}

func (l *cmLoop) register(key uint64, h cmHandler) {
	l.mu.Lock()
	l.handlers[key] = h
	l.mu.Unlock()
}

func (l *cmLoop) unregister(key uint64) {
	l.mu.Lock()
	delete(l.handlers, key)
	l.mu.Unlock()
}

// unregisterIf removes the handler of key if it is still h (a connection takes over the key
// of the request it was accepted from).
func (l *cmLoop) unregisterIf(key uint64, h cmHandler) {
	l.mu.Lock()
	if l.handlers[key] == h {
		delete(l.handlers, key)
	}
	l.mu.Unlock()
}

func (l *cmLoop) handler(key uint64) cmHandler {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handlers[key]
}

// RDMA CM port spaces (enum rdma_port_space): RDMA_PS_TCP for ids on IP addresses, RDMA_PS_IB
// for AF_IB ids.
const (
	psTCP C.int = C.RDMA_PS_TCP
	psIB  C.int = C.RDMA_PS_IB
)

// createID creates an id in port space ps on the loop's channel; the caller holds a reference.
func (l *cmLoop) createID(key uint64, ps C.int) (*C.struct_rdma_cm_id, error) {
	var id *C.struct_rdma_cm_id
	cmaMu.RLock()
	e := C.srpt_create_id(l.ch, C.uint64_t(key), ps, &id)
	cmaMu.RUnlock()
	if e != 0 {
		return nil, errorf("rdma_create_id: %w", setupError(syscall.Errno(e)))
	}
	return id, nil
}

func (l *cmLoop) run() {
	defer close(l.done)
	var e C.int
	read := func(uintptr) bool {
		cmaMu.RLock()
		e = C.srpt_get_cm_event(l.ch, l.ev)
		cmaMu.RUnlock()
		return e != C.EAGAIN
	}
	for {
		if err := l.rc.Read(read); err != nil {
			break // the File was closed: no id is left
		}
		if e != 0 {
			// Not expected (ENOMEM in librdmacm): do not spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		ev := l.copyEvent()
		l.dispatch(&ev)
	}
	C.rdma_destroy_event_channel(l.ch)
	C.free(unsafe.Pointer(l.ev))
}

func (l *cmLoop) copyEvent() cmEvent {
	c := l.ev
	ev := cmEvent{
		typ:       c.event,
		status:    int(c.status),
		key:       uint64(c.key),
		listenKey: uint64(c.listen_key),
		id:        c.id,
		device:    c.device,
		rr:        uint8(c.responder_resources),
		depth:     uint8(c.initiator_depth),
		rnr:       uint8(c.rnr_retry_count),
	}
	if n := int(c.private_data_len); n > 0 {
		ev.priv = C.GoBytes(unsafe.Pointer(&c.private_data[0]), C.int(n))
	}
	if c.event == C.RDMA_CM_EVENT_CONNECT_REQUEST {
		ev.local = C.GoBytes(unsafe.Pointer(&c.local[0]), C.SRPT_SOCKADDR_SIZE)
		ev.peer = C.GoBytes(unsafe.Pointer(&c.peer[0]), C.SRPT_SOCKADDR_SIZE)
	}
	return ev
}

func (l *cmLoop) dispatch(ev *cmEvent) {
	if ev.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
		ln, _ := l.handler(ev.listenKey).(*Listener)
		if ln == nil {
			// The listener was closed after the request was queued in the kernel.
			C.srpt_reject(ev.id, nil, 0)
			C.rdma_destroy_id(ev.id)
			return
		}
		ln.onRequest(l, ev)
		return
	}
	if h := l.handler(ev.key); h != nil {
		h.cmEvent(ev)
	}
}

// cmEventName is rdma_event_str, for error messages.
func cmEventName(t C.int) string {
	return C.GoString(C.rdma_event_str(uint32(t)))
}
