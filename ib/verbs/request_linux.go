//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

// A connection request, from the CM event that brings it to the listener until Accept or
// Reject answers it (or the device's removal does).

// onRequest runs on the loop's goroutine for RDMA_CM_EVENT_CONNECT_REQUEST: ev.id is a new id
// that librdmacm created for the request on the loop's channel.
func (l *Listener) onRequest(loop *cmLoop, ev *cmEvent) {
	reject := func(why string, args ...any) {
		C.srpt_reject(ev.id, nil, 0)
		C.rdma_destroy_id(ev.id)
		if l.logf != nil {
			l.logf("verbs: %v: rejected a connection request: "+why, append([]any{l}, args...)...)
		}
	}
	if !loop.tryAcquire() {
		reject("shutting down")
		return
	}
	zone := l.addr.Addr().Zone()
	r := &connRequest{
		loop: loop,
		ln:   l,
		key:  newKey(),
		id:   ev.id,
		priv: ev.priv,
		// The IB CM reports a REQ's RDMA READ parameters from the receiver's side
		// (responder_resources is the initiator's initiator depth, and the reverse); the
		// request reports the initiator's offer as the initiator made it.
		rr:    ev.depth,
		depth: ev.rr,
	}
	if l.fam == ib.FamilyIB {
		// AF_IB: the path's GIDs and P_Key, and the REQ's service ID locally
		// (cma.c: cma_save_ib_info).
		r.ibLocal, _ = decodeSockaddrIB(ev.local)
		r.ibRemote, _ = decodeSockaddrIB(ev.peer)
		r.local, r.remote = ibAddrPort(r.ibLocal), ibAddrPort(r.ibRemote)
	} else {
		r.local = inheritZone(decodeSockaddr(ev.local), zone)
		r.remote = inheritZone(decodeSockaddr(ev.peer), zone)
	}
	C.srpt_set_key(ev.id, C.uint64_t(r.key))
	d, err := openDev(ev.device, ev.id)
	if err != nil {
		reject("%v", err)
		loop.release()
		return
	}
	r.dev = d
	if l.fam != ib.FamilyIB && zone == "" && r.local.Addr().IsLinkLocalUnicast() {
		zone = d.zoneOf(r.local.Addr())
		r.local = inheritZone(r.local, zone)
		r.remote = inheritZone(r.remote, zone)
	}
	if err := d.join(r); err != nil {
		reject("%v", err)
		d.release()
		loop.release()
		return
	}
	d.watch(loop, r.local.Addr(), l.fam)
	loop.register(r.key, r)
	l.mu.Lock()
	queued := false
	if !l.closed {
		select {
		case l.reqs <- r:
			queued = true
		default:
		}
	}
	l.mu.Unlock()
	if !queued {
		if l.logf != nil {
			l.logf("verbs: %v: rejected the connection request from %v: backlog of %d full or listener closed",
				l, r.remote, cap(l.reqs))
		}
		_ = r.Reject(nil) // best effort
	}
}

// ibConnRequest is a request that an AF_IB listener delivers: it also has the InfiniBand
// addresses of both ends.
type ibConnRequest struct{ *connRequest }

func (r ibConnRequest) RemoteIB() ib.IBAddr { return r.ibRemote }
func (r ibConnRequest) LocalIB() ib.IBAddr  { return r.ibLocal }

type reqState uint8

const (
	reqPending reqState = iota
	reqAnswered
	reqRemoved
)

// connRequest is an ib.ConnRequest: an id in the CONNECT_REQUEST state and a copy of the
// request's private data and parameters. Until it is answered it holds a reference on the
// loop and on the device.
type connRequest struct {
	loop   *cmLoop
	ln     *Listener
	dev    *devCtx
	key    uint64
	priv   []byte
	local  netip.AddrPort
	remote netip.AddrPort
	// ibLocal and ibRemote are the AF_IB addresses of an AF_IB listener's request.
	ibLocal, ibRemote ib.IBAddr
	rr                uint8
	depth             uint8
	// withdrawn: the initiator gave up (its CM sent a REJ, e.g. after a timeout).
	withdrawn atomic.Bool

	mu    sync.Mutex
	state reqState
	id    *C.struct_rdma_cm_id // nil once the request no longer owns it
}

func (r *connRequest) PrivateData() []byte        { return r.priv }
func (r *connRequest) RemoteAddr() netip.AddrPort { return r.remote }
func (r *connRequest) LocalAddr() netip.AddrPort  { return r.local }
func (r *connRequest) ResponderResources() uint8  { return r.rr }
func (r *connRequest) InitiatorDepth() uint8      { return r.depth }
func (r *connRequest) Limits() ib.DeviceLimits    { return r.dev.limits }
func (r *connRequest) PD() ib.ProtectionDomain    { return pdHandle{r.dev} }
func (r *connRequest) String() string             { return fmt.Sprintf("request %v -> %v", r.remote, r.local) }

func (r *connRequest) cmEvent(ev *cmEvent) {
	switch ev.typ {
	case C.RDMA_CM_EVENT_REJECTED, C.RDMA_CM_EVENT_CONNECT_ERROR, C.RDMA_CM_EVENT_UNREACHABLE,
		C.RDMA_CM_EVENT_DISCONNECTED:
		r.withdrawn.Store(true)
	case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
		r.dev.remove()
	}
}

// deviceRemoved answers nothing (there is no one to answer) and releases the request.
func (r *connRequest) deviceRemoved() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != reqPending {
		return
	}
	r.state = reqRemoved
	r.releaseLocked()
}

// releaseLocked destroys the request's id, if it still owns it, and drops its references.
func (r *connRequest) releaseLocked() {
	r.loop.unregisterIf(r.key, r)
	if r.id != nil {
		C.rdma_destroy_id(r.id)
		r.id = nil
	}
	r.dev.leave(r)
	r.dev.release()
	r.loop.release()
}

// answerable reports why the request can no longer be answered, under r.mu.
func (r *connRequest) answerable() error {
	switch r.state {
	case reqAnswered:
		return ib.ErrAnswered
	case reqRemoved:
		return ib.ErrDeviceRemoved
	}
	return nil
}

// Reject implements ib.ConnRequest with rdma_reject: the initiator sees a REJ with reason 28
// (consumer defined) carrying privateData. Over InfiniBand and RoCE the CM pads the private
// data with zeros to 148 bytes.
func (r *connRequest) Reject(privateData []byte) error {
	if len(privateData) > ib.MaxRejectPrivateData {
		return errorf("reject %v: %d bytes: %w", r, len(privateData), ib.ErrPrivateDataTooLong)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.answerable(); err != nil {
		return errorf("reject %v: %w", r, err)
	}
	r.state = reqAnswered
	e := C.srpt_reject(r.id, unsafe.Pointer(unsafe.SliceData(privateData)), C.uint8_t(len(privateData)))
	r.releaseLocked()
	if e != 0 && !r.withdrawn.Load() {
		return errorf("reject %v: rdma_reject: %w", r, syscall.Errno(e))
	}
	return nil
}

// Accept implements ib.ConnRequest: it creates the CQ (with its completion channel) and the
// RC QP, moves the QP to INIT, posts p.Recv, moves it to RTR and RTS with the CM's attributes
// (max_dest_rd_atomic = p.ResponderResources, max_rd_atomic = p.InitiatorDepth), and only then
// sends the REP with rdma_accept (flow control 1, the given RNR retry count).
func (r *connRequest) Accept(p ib.AcceptParams) (ib.Conn, error) {
	if err := ib.CheckAccept(&p, r.rr, r.dev.limits, r.dev.maxCQE); err != nil {
		return nil, errorf("accept %v: %w", r, err)
	}
	sh, err := sharedOf(&p, r.dev)
	if err != nil {
		return nil, errorf("accept %v: %w", r, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.answerable(); err != nil {
		return nil, errorf("accept %v: %w", r, err)
	}
	r.state = reqAnswered
	// The connection takes over the id and key; the request drops its references.
	id := r.id
	r.id = nil
	c, err := newConn(r.dev, r.loop, id, r.key, p.QP, r.local, r.remote, sh)
	if err != nil {
		C.srpt_reject(id, nil, 0)
		C.rdma_destroy_id(id)
		r.releaseLocked()
		return nil, errorf("accept %v: %w", r, err)
	}
	c.onEvent = p.OnEvent
	if p.OnQP != nil {
		p.OnQP(c.qpn) // in INIT: it receives once in RTR, below
	}
	c.loop.register(c.key, c)
	r.releaseLocked()
	c.rdDepth = p.InitiatorDepth
	fail := func(err error) (ib.Conn, error) {
		C.srpt_reject(id, nil, 0)
		c.teardown(false)
		return nil, errorf("accept %v: %w", r, err)
	}
	if len(p.Recv) > 0 {
		if n, err := c.PostRecv(p.Recv); err != nil {
			return fail(fmt.Errorf("receive %d: %w", n, err))
		}
	}
	if e := C.srpt_qp_rtr_rts(id, c.qp, C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth)); e != 0 {
		return fail(fmt.Errorf("QP to RTR/RTS: %w", syscall.Errno(e)))
	}
	e := C.srpt_accept(id, C.srpt_qp_num(c.qp), unsafe.Pointer(unsafe.SliceData(p.PrivateData)),
		C.uint8_t(len(p.PrivateData)), C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth),
		C.uint8_t(p.RNRRetryCount))
	if e != 0 {
		err := error(syscall.Errno(e))
		if r.withdrawn.Load() {
			err = fmt.Errorf("the initiator withdrew its request: %w", err)
		}
		c.teardown(false)
		return nil, errorf("accept %v: rdma_accept: %w", r, err)
	}
	return c, nil
}
