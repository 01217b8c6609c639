//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

// DefaultResolveTimeout bounds address and route resolution each when
// ResolveOptions.Timeout is 0.
const DefaultResolveTimeout = 2 * time.Second

// Route is the initiator side before the connection: an RDMA/CM id whose address and route
// are resolved, so the local device is known. Register the initiator's memory in PD, then
// Connect. Connecting happens in two steps because the receive buffers posted before the
// request is sent must be registered on the device that the route picked.
type Route struct {
	loop   *cmLoop
	key    uint64
	dev    *devCtx
	local  netip.AddrPort
	remote netip.AddrPort
	events chan cmEvent

	mu      sync.Mutex
	id      *C.struct_rdma_cm_id // nil once Connect took it, or after Close or removal
	removed bool
}

// Resolve resolves dst with rdma_resolve_addr and rdma_resolve_route (RDMA_PS_TCP).
func Resolve(ctx context.Context, dst netip.AddrPort, opts ResolveOptions) (*Route, error) {
	dsa, err := encodeSockaddr(dst)
	if err != nil {
		return nil, errorf("resolve %v: %w", dst, err)
	}
	var ssa sockaddr
	var src *C.uint8_t
	if opts.Src.IsValid() {
		if ssa, err = encodeSockaddr(netip.AddrPortFrom(opts.Src, 0)); err != nil {
			return nil, errorf("resolve %v: source: %w", dst, err)
		}
		src = (*C.uint8_t)(unsafe.Pointer(&ssa[0]))
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultResolveTimeout
	}
	loop, err := acquireLoop()
	if err != nil {
		return nil, errorf("resolve %v: %w", dst, err)
	}
	r := &Route{loop: loop, key: newKey(), remote: dst, events: make(chan cmEvent, 8)}
	id, err := loop.createID(r.key, psTCP)
	if err != nil {
		loop.release()
		return nil, errorf("resolve %v: %w", dst, err)
	}
	r.id = id
	loop.register(r.key, r)
	fail := func(err error) (*Route, error) {
		r.Close()
		return nil, errorf("resolve %v: %w", dst, err)
	}
	ms := C.int(timeout / time.Millisecond)
	cmaMu.RLock()
	e := C.srpt_resolve_addr(id, src, (*C.uint8_t)(unsafe.Pointer(&dsa[0])), ms)
	cmaMu.RUnlock()
	if e != 0 {
		return fail(fmt.Errorf("rdma_resolve_addr: %w", bindError(syscall.Errno(e))))
	}
	if err := r.wait(ctx, C.RDMA_CM_EVENT_ADDR_RESOLVED); err != nil {
		return fail(err)
	}
	cmaMu.RLock()
	rc, err := C.rdma_resolve_route(id, ms)
	cmaMu.RUnlock()
	if rc != 0 {
		return fail(fmt.Errorf("rdma_resolve_route: %w", errnoFrom(err, errnoEIO)))
	}
	if err := r.wait(ctx, C.RDMA_CM_EVENT_ROUTE_RESOLVED); err != nil {
		return fail(err)
	}
	d, err := openDev(C.srpt_id_device(id), id)
	if err != nil {
		return fail(err)
	}
	r.mu.Lock()
	r.dev = d
	r.mu.Unlock()
	if err := d.join(r); err != nil {
		return fail(err)
	}
	var local sockaddr
	C.srpt_addrs(id, (*C.uint8_t)(unsafe.Pointer(&local[0])), nil)
	r.local = inheritZone(decodeSockaddr(local[:]), dst.Addr().Zone())
	d.watch(r.loop, r.local.Addr(), ib.FamilyIP)
	return r, nil
}

func (r *Route) wait(ctx context.Context, want C.int) error {
	select {
	case ev := <-r.events:
		if ev.typ == want {
			return nil
		}
		if ev.typ == C.RDMA_CM_EVENT_DEVICE_REMOVAL {
			return ib.ErrDeviceRemoved
		}
		return fmt.Errorf("%s: %w", cmEventName(ev.typ), cmStatusError(ev.status))
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Route) cmEvent(ev *cmEvent) {
	r.mu.Lock()
	d := r.dev
	r.mu.Unlock()
	if ev.typ == C.RDMA_CM_EVENT_DEVICE_REMOVAL && d != nil {
		d.remove()
		return
	}
	select {
	case r.events <- *ev:
	default:
	}
}

func (r *Route) deviceRemoved() {
	r.mu.Lock()
	r.removed = true
	r.mu.Unlock()
	r.Close()
}

// PD is the protection domain of the route's device.
func (r *Route) PD() ib.ProtectionDomain { return pdHandle{r.dev} }

// Limits are the route's device limits.
func (r *Route) Limits() ib.DeviceLimits { return r.dev.limits }

// LocalAddr is the local address the route uses (its port is chosen at connect time).
func (r *Route) LocalAddr() netip.AddrPort { return r.local }

// RemoteAddr is the target's address.
func (r *Route) RemoteAddr() netip.AddrPort { return r.remote }

// Close abandons a route that was not connected. After Connect it does nothing.
func (r *Route) Close() error {
	r.mu.Lock()
	id, d := r.id, r.dev
	r.id = nil
	r.mu.Unlock()
	if id == nil {
		return nil
	}
	r.loop.unregisterIf(r.key, r)
	C.rdma_destroy_id(id)
	if d != nil {
		d.leave(r)
		d.release()
	}
	r.loop.release()
	return nil
}

// Connect creates the QP, posts p.Recv, sends the connection request with privateData (at most
// ib.MaxConnRequestPrivateData bytes) and waits for the answer. On a REP it moves the QP to
// RTR and RTS, sends the RTU (rdma_establish) and returns the connection, whose PrivateData is
// the REP's and whose first event is EventEstablished. A REJ gives a *RejectedError. The route
// is used up either way; if ctx ends first, the request is withdrawn.
func (r *Route) Connect(ctx context.Context, privateData []byte, p ConnectParams) (*Conn, error) {
	if err := checkConnect(privateData, &p, r.dev.limits, r.dev.maxCQE); err != nil {
		return nil, errorf("connect %v: %w", r.remote, err)
	}
	r.mu.Lock()
	id, removed := r.id, r.removed
	r.id = nil
	r.mu.Unlock()
	switch {
	case removed:
		return nil, errorf("connect %v: %w", r.remote, ib.ErrDeviceRemoved)
	case id == nil:
		return nil, errorf("connect %v: route already used: %w", r.remote, ib.ErrClosed)
	}
	c, err := newConn(r.dev, r.loop, id, r.key, p.QP, r.local, r.remote, sharedQueues{})
	if err != nil {
		C.rdma_destroy_id(id)
		r.release()
		return nil, errorf("connect %v: %w", r.remote, err)
	}
	c.evMu.Lock()
	c.connEv = make(chan cmEvent, 8)
	c.evMu.Unlock()
	c.loop.register(c.key, c)
	r.release()
	fail := func(err error) (*Conn, error) {
		c.teardown(false)
		return nil, errorf("connect %v: %w", r.remote, err)
	}
	if n, err := c.PostRecv(p.Recv); err != nil {
		return fail(fmt.Errorf("receive %d: %w", n, err))
	}
	e := C.srpt_connect(id, C.srpt_qp_num(c.qp), unsafe.Pointer(unsafe.SliceData(privateData)),
		C.uint8_t(len(privateData)), C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth),
		C.uint8_t(p.RNRRetryCount))
	if e != 0 {
		return fail(fmt.Errorf("rdma_connect: %w", syscall.Errno(e)))
	}
	for {
		var ev cmEvent
		select {
		case ev = <-c.connEv:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		switch ev.typ {
		case C.RDMA_CM_EVENT_CONNECT_RESPONSE:
			// 0xff: keep the CM's values, computed from the REP.
			if e := C.srpt_qp_rtr_rts(id, c.qp, 0xff, 0xff); e != 0 {
				return fail(fmt.Errorf("QP to RTR/RTS: %w", syscall.Errno(e)))
			}
			if rc, err := C.rdma_establish(id); rc != 0 {
				return fail(fmt.Errorf("rdma_establish: %w", errnoFrom(err, errnoEIO)))
			}
			c.privateData = ev.priv
			// ev.depth is the target's responder resources (the CM reports the REP's fields
			// from the receiver's side).
			c.rdDepth = min(p.InitiatorDepth, ev.depth)
			c.evMu.Lock()
			c.connEv = nil
			c.evMu.Unlock()
			c.establishedEvent()
			return c, nil
		case C.RDMA_CM_EVENT_REJECTED:
			c.teardown(false)
			return nil, errorf("connect %v: %w", r.remote, &RejectedError{Reason: ev.status, PrivateData: ev.priv})
		case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
			c.dev.remove()
			return nil, errorf("connect %v: %w", r.remote, ib.ErrDeviceRemoved)
		case C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_CONNECT_ERROR, C.RDMA_CM_EVENT_DISCONNECTED:
			return fail(fmt.Errorf("%s: %w", cmEventName(ev.typ), cmStatusError(ev.status)))
		}
	}
}

// release drops the route's references once a connection took over its id.
func (r *Route) release() {
	r.loop.unregisterIf(r.key, r)
	r.dev.leave(r)
	r.dev.release()
	r.loop.release()
}
