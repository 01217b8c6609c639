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
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

// Listener is an ib.Listener over RDMA/CM: on an IP address in the TCP port space
// (RDMA_PS_TCP), the port space the Linux SRP initiator connects to with dest=IP:PORT (Listen),
// or on InfiniBand GIDs as an AF_IB id in the IB port space (RDMA_PS_IB), where its native IB
// CM logins arrive with dgid=...,service_id=0x013fPPPP (ListenIB).
type Listener struct {
	loop *cmLoop
	key  uint64
	fam  ib.Family
	addr netip.AddrPort
	ibA  ib.IBAddr // the bound AF_IB address (FamilyIB)
	dev  *devCtx   // the device the address belongs to; nil for a wildcard address
	logf func(string, ...any)
	reqs chan *connRequest
	done chan struct{}

	mu     sync.Mutex
	id     *C.struct_rdma_cm_id // nil once closed
	closed bool
	err    error
}

var (
	_ ib.Listener       = (*Listener)(nil)
	_ ib.FamilyListener = (*Listener)(nil)
)

// Listen binds addr (IPv4, IPv6, an IPv6 link-local address with its zone, or a wildcard
// address; port 0 picks a free port) and listens for RDMA/CM connection requests. A specific
// address ties the listener to the device that owns it: when that device goes away, Next
// returns ErrDeviceRemoved. A wildcard listener receives requests on every device.
func Listen(addr netip.AddrPort, opts Options) (*Listener, error) {
	sa, err := encodeSockaddr(addr)
	if err != nil {
		return nil, errorf("listen %v: %w", addr, err)
	}
	return listenOn(sa, ib.FamilyIP, psTCP, addr.String(), addr.Addr().Zone(), opts)
}

// ListenIB binds an AF_IB id in RDMA CM's IB port space to a (its GID, or the zero GID for
// every InfiniBand port of every device; its service ID, which must be 0x00000000013FPPPP,
// ib.IBServiceID) and listens. Its requests carry the IB CM REQ's private data raw (92 bytes)
// and implement ib.IBAddresser.
//
// The kernel delivers AF_IB requests only on ports whose link layer is InfiniBand, and only to
// listeners in the initial network namespace; on RoCE the bind succeeds but every request is
// rejected before it reaches user space (drivers/infiniband/core/cma.c, cma_ib_acquire_dev).
// So a wildcard ListenIB first looks for such a port and fails with ErrNoIBPort when there is
// none (ErrNoDevice when there is no device at all). A service ID outside the IB port space
// fails with ErrServiceID; a port below 1024 needs CAP_NET_BIND_SERVICE, as for IP.
func ListenIB(a ib.IBAddr, opts Options) (*Listener, error) {
	what := "AF_IB " + a.String()
	if _, ok := ib.IBServicePort(a.ServiceID); !ok {
		return nil, errorf("listen %s: %w", what, serviceIDError(a.ServiceID))
	}
	if !a.GID.IsValid() || a.GID.IsUnspecified() {
		if err := ibPortCheck(); err != nil {
			return nil, errorf("listen %s: %w", what, err)
		}
	}
	sa, err := encodeSockaddrIB(a)
	if err != nil {
		return nil, errorf("listen %s: %w", what, err)
	}
	return listenOn(sa, ib.FamilyIB, psIB, what, "", opts)
}

// ibPortCheck is haveIBPort; tests on soft-RoCE replace it to exercise the AF_IB set-up and
// teardown paths, which work there although no request ever arrives.
var ibPortCheck = haveIBPort

// listenOn creates an id in port space ps, binds sa, and listens; what names the address in
// errors, zone is the IPv6 zone the caller gave.
func listenOn(sa sockaddr, fam ib.Family, ps C.int, what, zone string, opts Options) (*Listener, error) {
	backlog := opts.Backlog
	if backlog <= 0 {
		backlog = DefaultBacklog
	}
	loop, err := acquireLoop()
	if err != nil {
		return nil, errorf("listen %s: %w", what, err)
	}
	l := &Listener{
		loop: loop,
		key:  newKey(),
		fam:  fam,
		logf: opts.Logf,
		reqs: make(chan *connRequest, backlog),
		done: make(chan struct{}),
	}
	id, err := loop.createID(l.key, ps)
	if err != nil {
		loop.release()
		return nil, errorf("listen %s: %w", what, err)
	}
	l.id = id
	fail := func(err error) (*Listener, error) {
		l.shutdown(ib.ErrClosed) // releases the id, the device and the loop, once
		return nil, errorf("listen %s: %w", what, err)
	}
	cmaMu.RLock()
	e := C.srpt_bind(id, (*C.uint8_t)(unsafe.Pointer(&sa[0])))
	cmaMu.RUnlock()
	if e != 0 {
		if fam == ib.FamilyIB {
			return fail(fmt.Errorf("rdma_bind_addr: %w", bindIBError(syscall.Errno(e), sockaddrIB(sa[:]).SID())))
		}
		return fail(fmt.Errorf("rdma_bind_addr: %w", bindError(syscall.Errno(e))))
	}
	if device := C.srpt_id_device(id); device != nil {
		d, err := openDev(device, id)
		if err != nil {
			return fail(err)
		}
		l.dev = d
		if err := d.join(l); err != nil {
			return fail(err)
		}
	}
	// The bound address, with the port picked if the caller gave 0.
	var local sockaddr
	C.srpt_addrs(id, (*C.uint8_t)(unsafe.Pointer(&local[0])), nil)
	if fam == ib.FamilyIB {
		l.ibA, _ = decodeSockaddrIB(local[:])
		l.addr = ibAddrPort(l.ibA)
	} else {
		l.addr = inheritZone(decodeSockaddr(local[:]), zone)
	}
	if l.dev != nil {
		l.dev.watch(loop, l.addr.Addr(), fam)
	}
	// Registered once l.dev and l.addr are set: the loop reads them.
	loop.register(l.key, l)
	cmaMu.RLock()
	r, err := C.rdma_listen(id, C.int(backlog))
	cmaMu.RUnlock()
	if r != 0 {
		return fail(fmt.Errorf("rdma_listen: %w", errnoFrom(err, errnoEINVAL)))
	}
	if l.logf != nil {
		noticeMu.Lock()
		noticeTo[l] = struct{}{}
		noticeMu.Unlock()
	}
	return l, nil
}

var (
	// noticeTo are the open listeners with a Logf: the oldest one receives the notices that
	// concern no listener in particular (a device's removal).
	noticeMu sync.Mutex
	noticeTo = map[*Listener]struct{}{}
)

// notice logs through the Logf of the oldest open listener that has one, if any.
func notice(format string, args ...any) {
	noticeMu.Lock()
	var to *Listener
	for l := range noticeTo {
		if to == nil || l.key < to.key {
			to = l
		}
	}
	noticeMu.Unlock()
	if to != nil {
		to.logf(format, args...)
	}
}

// Addr is the bound address, with the port the kernel picked if the caller gave 0. For an
// AF_IB listener it is the GID with the port of the service ID.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Family implements ib.FamilyListener.
func (l *Listener) Family() ib.Family { return l.fam }

// IBAddr is the bound address of an AF_IB listener (its GID, P_Key and service ID).
func (l *Listener) IBAddr() ib.IBAddr { return l.ibA }

// PD is the protection domain of the device the listener's address belongs to
// (ib.DeviceListener); a listener on a wildcard address has none.
func (l *Listener) PD() (ib.ProtectionDomain, bool) {
	if l.dev == nil {
		return nil, false
	}
	return pdHandle{l.dev}, true
}

func (l *Listener) String() string {
	if l.fam == ib.FamilyIB {
		return "AF_IB listener " + l.ibA.String()
	}
	return "listener " + l.addr.String()
}

// Next implements ib.Listener.
func (l *Listener) Next(ctx context.Context) (ib.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		if l.fam == ib.FamilyIB {
			return ibConnRequest{r}, nil
		}
		return r, nil
	case <-l.done:
	case <-ctx.Done():
		return nil, errorf("%v: %w", l, ctx.Err())
	}
	// Requests queued before the close are rejected by it; prefer reporting the close.
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	return nil, errorf("%v: %w", l, err)
}

// Close implements ib.Listener: it destroys the listening id and rejects the requests that
// Next has not returned yet.
func (l *Listener) Close() error {
	l.shutdown(ib.ErrClosed)
	return nil
}

func (l *Listener) deviceRemoved() { l.shutdown(ib.ErrDeviceRemoved) }

// cmEvent receives the events of the listening id other than connection requests: only
// RDMA_CM_EVENT_DEVICE_REMOVAL concerns it.
func (l *Listener) cmEvent(ev *cmEvent) {
	if ev.typ != C.RDMA_CM_EVENT_DEVICE_REMOVAL {
		return
	}
	if l.dev != nil {
		l.dev.remove()
	} else {
		l.deviceRemoved()
	}
}

func (l *Listener) shutdown(reason error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.err = reason
	close(l.done)
	id := l.id
	l.id = nil
	l.mu.Unlock()
	noticeMu.Lock()
	delete(noticeTo, l)
	noticeMu.Unlock()
	for drained := false; !drained; {
		select {
		case r := <-l.reqs:
			_ = r.Reject(nil) // the initiator may be gone; nothing to do about it
		default:
			drained = true
		}
	}
	l.loop.unregister(l.key)
	C.rdma_destroy_id(id)
	if l.dev != nil {
		l.dev.leave(l)
		l.dev.release()
	}
	l.loop.release()
}

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

var _ ib.IBAddresser = ibConnRequest{}

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

var _ ib.ConnRequest = (*connRequest)(nil)

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
