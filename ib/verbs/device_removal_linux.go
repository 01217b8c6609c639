//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

// A device's removal: how it is noticed (its sentinel CM id, its async events), what each
// member of the device releases, and when both verbs contexts may close.

// removalCounts is what a device's removal released on its own, for the log.
type removalCounts struct {
	conns, listeners, requests, routes, mrs int
}

func (n *removalCounts) count(m devMember) {
	switch m.(type) {
	case *Conn:
		n.conns++
	case *Listener:
		n.listeners++
	case *connRequest:
		n.requests++
	case *Route:
		n.routes++
	}
}

// devMember is something that must react to the device's removal.
type devMember interface{ deviceRemoved() }

// How long closeRemoved waits for libibverbs to stop listing a removed device before it leaves
// librdmacm's context alone (a fatal error of a device that stays registered).
const (
	unlistPoll    = 50 * time.Millisecond
	unlistTimeout = 30 * time.Second
)

// closeRemoved closes both verbs contexts of a removed device, librdmacm's and ours, once
// libibverbs no longer lists the device (it stops as soon as the kernel starts unregistering
// it, before it waits for the files to close). Ours stays open until then so that the device
// pointer srpt_release_cma compares cannot name a new device. Then it tells the listeners'
// Logf what was released.
func (d *devCtx) closeRemoved() {
	d.mu.Lock()
	ref := d.cma
	freed := d.freed
	d.mu.Unlock()
	how := C.int(C.SRPT_CMA_NONE)
	for deadline := time.Now().Add(unlistTimeout); ; {
		cmaMu.Lock()
		how = C.srpt_release_cma(d.device, &ref)
		cmaMu.Unlock()
		if how != C.SRPT_CMA_LISTED || time.Now().After(deadline) {
			break
		}
		time.Sleep(unlistPoll)
	}
	d.closeVerbs()
	var cma string
	switch how {
	case C.SRPT_CMA_CLOSED:
		cma = "closed by librdmacm"
	case C.SRPT_CMA_DETACHED:
		cma = "closed here (librdmacm would keep it open until it next re-reads the device list, " +
			"or for ever when no device is left)"
	case C.SRPT_CMA_LISTED:
		cma = fmt.Sprintf("left open: the device is still listed after %v", unlistTimeout)
	default:
		cma = "none"
	}
	notice("verbs: RDMA device removed: %s; released %d connections, %d listeners, %d connection requests, "+
		"%d routes and %d memory regions still registered, closed this package's verbs context; "+
		"librdmacm's context of the device: %s",
		d.name, freed.conns, freed.listeners, freed.requests, freed.routes, freed.mrs, cma)
}

// remove handles the device's removal, reported by RDMA/CM (RDMA_CM_EVENT_DEVICE_REMOVAL on
// any id of the device, the sentinel's included) or by the device itself
// (IBV_EVENT_DEVICE_FATAL). It does not wait for the engine: a driver that cannot disassociate
// user contexts (rxe) finishes unregistering only once every file of the device is closed, and
// an engine may keep memory registered for as long as the device lives (a buffer pool). So
// every member releases what it holds (connections their QP, CQ, completion channel and CM id;
// listeners, requests and routes their CM id), then every memory region still registered is
// deregistered here, and the last reference closes the PD and both verbs contexts.
func (d *devCtx) remove() {
	d.mu.Lock()
	if d.removed || d.closed {
		d.mu.Unlock()
		return
	}
	d.removed = true
	// Hold a reference while the members release theirs, so that the context does not close
	// before they are all done.
	d.refs++
	members := make([]devMember, 0, len(d.members))
	for m := range d.members {
		members = append(members, m)
	}
	mrs := make([]*mr, 0, len(d.mrs))
	for m := range d.mrs {
		mrs = append(mrs, m)
	}
	clear(d.mrs)
	s := d.sentinel
	d.sentinel = nil
	d.mu.Unlock()
	close(d.gone)
	d.forget(s)
	var freed removalCounts
	for _, m := range members {
		freed.count(m)
		m.deviceRemoved()
	}
	// After the QPs: no work request can name a region any more.
	for _, m := range mrs {
		if m.deviceRemoved() {
			freed.mrs++
			d.release()
		}
	}
	d.mu.Lock()
	d.freed = freed
	d.mu.Unlock()
	d.release()
}

// watchAsync reads the device's asynchronous events. IBV_EVENT_COMM_EST (the first packet of
// a connection arrived before the CM's RTU) is passed to the CM with rdma_notify, as the
// verbs documentation requires of QPs the CM does not own.
func (d *devCtx) watchAsync(rc syscall.RawConn) {
	defer close(d.asyncDone)
	ev := (*C.struct_srpt_async_event)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_srpt_async_event{}))))
	defer C.free(unsafe.Pointer(ev))
	var e C.int
	read := func(uintptr) bool {
		e = C.srpt_get_async_event(d.ctx, ev)
		return e != C.EAGAIN
	}
	for {
		if err := rc.Read(read); err != nil {
			return
		}
		if e != 0 {
			continue
		}
		switch ev._type {
		case C.IBV_EVENT_COMM_EST:
			d.mu.Lock()
			c := d.qps[uint32(ev.qp_num)]
			d.mu.Unlock()
			if c != nil {
				c.commEstablished()
			}
		case C.IBV_EVENT_DEVICE_FATAL:
			// Not on this goroutine: removal may release the last reference, and closing the
			// context waits for this goroutine.
			go d.remove()
		}
	}
}

// sentinel is an RDMA/CM id bound to an address of the device (port 0) for as long as the
// devCtx is open, so that the device's removal is reported (RDMA_CM_EVENT_DEVICE_REMOVAL)
// even when no listener, request, route or connection is on it and only memory regions hold
// the context: a buffer pool outlives the connections, and rxe reports nothing on the
// context's async event file (the kernel sends IBV_EVENT_DEVICE_FATAL only to devices that
// disassociate their user contexts).
type sentinel struct {
	d    *devCtx
	loop *cmLoop
	key  uint64
	id   *C.struct_rdma_cm_id
}

func (s *sentinel) cmEvent(ev *cmEvent) {
	if ev.typ == C.RDMA_CM_EVENT_DEVICE_REMOVAL {
		s.d.remove()
	}
}

func (s *sentinel) destroy() {
	s.loop.unregister(s.key)
	C.rdma_destroy_id(s.id)
	s.loop.release()
}

// watch gives the device its sentinel, bound to addr (an IP address of the device, with its
// zone if link-local, or for fam ib.FamilyIB one of its GIDs), unless it has one. A failure is
// not the caller's: the next user of the device tries again, and meanwhile the removal is
// still reported on the ids of the device.
func (d *devCtx) watch(loop *cmLoop, addr netip.Addr, fam ib.Family) {
	d.mu.Lock()
	skip := d.sentinel != nil || d.removed || d.closed
	d.mu.Unlock()
	if skip {
		return
	}
	s, err := newSentinel(d, loop, addr, fam)
	if err != nil {
		return
	}
	d.mu.Lock()
	if d.sentinel == nil && !d.removed && !d.closed {
		d.sentinel, s = s, nil
	}
	d.mu.Unlock()
	if s != nil {
		s.destroy()
	}
}

func newSentinel(d *devCtx, loop *cmLoop, addr netip.Addr, fam ib.Family) (*sentinel, error) {
	sa, err := encodeSockaddr(netip.AddrPortFrom(addr, 0))
	ps := psTCP
	if fam == ib.FamilyIB {
		// A zero service ID with a zero mask: any free port of the IB port space.
		sa, err = encodeSockaddrIB(ib.IBAddr{GID: addr})
		ps = psIB
	}
	if err != nil {
		return nil, err
	}
	if !loop.tryAcquire() {
		return nil, ib.ErrClosed
	}
	s := &sentinel{d: d, loop: loop, key: newKey()}
	id, err := loop.createID(s.key, ps)
	if err != nil {
		loop.release()
		return nil, err
	}
	s.id = id
	loop.register(s.key, s)
	cmaMu.RLock()
	e := C.srpt_bind(id, (*C.uint8_t)(unsafe.Pointer(&sa[0])))
	cmaMu.RUnlock()
	if e != 0 {
		s.destroy()
		return nil, syscall.Errno(e)
	}
	if C.srpt_id_device(id) != d.device {
		s.destroy()
		return nil, fmt.Errorf("%v is not an address of %s", addr, d)
	}
	return s, nil
}
