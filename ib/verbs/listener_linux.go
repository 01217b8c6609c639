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

var _ ib.IBAddresser = ibConnRequest{}

var _ ib.ConnRequest = (*connRequest)(nil)
