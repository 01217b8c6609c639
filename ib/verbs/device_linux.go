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
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

// A devCtx is this package's own verbs context on one RDMA device, with the protection domain
// all connections on the device share. It is separate from the context librdmacm opens for its
// ids (rdma_cm_id.verbs): QPs are created here and driven through the CM with
// rdma_init_qp_attr, the way librdmacm supports for QPs it does not own. That puts the
// lifetime of everything the engine holds (PD, MRs, QPs, CQs) in this package's hands, which
// matters on device removal: a driver that cannot disassociate user contexts (rxe) finishes
// unregistering only once every process has closed its contexts on the device.
//
// A devCtx lives while something holds a reference: a listener bound to the device, an
// unanswered connection request, a Route, a connection, a memory region. The last release
// deallocates the PD and closes the context.
//
// When the device goes away, the devCtx does not wait for its users: remove destroys every
// QP, CQ, completion channel and CM id on it, deregisters every memory region still
// registered, and closes the PD and the context; and it closes the files of librdmacm's own
// context of the device too, which librdmacm would keep open (srpt_release_cma). The users
// find their objects dead (ErrDeviceRemoved) and their Close and Deregister succeed without
// doing anything more.
type devCtx struct {
	device *C.struct_ibv_device // identity while open (libibverbs keeps it alive for the context)
	name   string
	ctx    *C.struct_ibv_context
	pd     *C.struct_ibv_pd
	limits ib.DeviceLimits
	maxCQE int
	shared ib.SharedLimits

	async     *os.File
	asyncDone chan struct{}
	gone      chan struct{} // closed by remove

	mu       sync.Mutex
	refs     int
	removed  bool
	closed   bool
	members  map[devMember]struct{}
	mrs      map[*mr]struct{}      // registered and not yet deregistered
	qps      map[uint32]*Conn      // by QP number, for IBV_EVENT_COMM_EST
	sentinel *sentinel             // nil until an address of the device is known
	cma      C.struct_srpt_cma_ref // librdmacm's own context of the device
	freed    removalCounts         // what remove released, for the notice
}

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

var (
	devMu sync.Mutex
	devs  = map[*C.struct_ibv_device]*devCtx{}
	// openContexts counts the verbs contexts this package has open, for tests.
	openContexts atomic.Int32
)

// maxInlineProbe is where the probe for the largest inline size starts.
const maxInlineProbe = 1024

// openDev returns the devCtx of device with a reference for the caller, opening it if needed.
// id is an RDMA/CM id on the device: its verbs context is librdmacm's, which the devCtx
// records to have it closed when the device goes away.
func openDev(device *C.struct_ibv_device, id *C.struct_rdma_cm_id) (*devCtx, error) {
	if device == nil {
		return nil, errorf("no device behind the RDMA/CM id: %w", ErrNoDevice)
	}
	devMu.Lock()
	defer devMu.Unlock()
	if d := devs[device]; d != nil {
		if err := d.acquire(); err == nil {
			d.mu.Lock()
			if d.cma.ctx == nil {
				C.srpt_cma_ref(id, &d.cma)
			}
			d.mu.Unlock()
			return d, nil
		}
	}
	d := &devCtx{
		device:  device,
		name:    C.GoString(C.ibv_get_device_name(device)),
		refs:    1,
		members: map[devMember]struct{}{},
		mrs:     map[*mr]struct{}{},
		qps:     map[uint32]*Conn{},
		gone:    make(chan struct{}),
	}
	C.srpt_cma_ref(id, &d.cma) // best effort: without it, librdmacm's context is left to librdmacm
	ctx, err := C.ibv_open_device(device)
	if ctx == nil {
		return nil, errorf("open device %s: %w", d.name, errnoOr(err, errnoENODEV))
	}
	d.ctx = ctx
	openContexts.Add(1)
	var attr C.struct_srpt_device_attr
	if e := C.srpt_query_device(ctx, &attr); e != 0 {
		openContexts.Add(-1)
		C.ibv_close_device(ctx)
		return nil, errorf("query device %s: %w", d.name, syscall.Errno(e))
	}
	pd, err := C.ibv_alloc_pd(ctx)
	if pd == nil {
		openContexts.Add(-1)
		C.ibv_close_device(ctx)
		return nil, errorf("allocate PD on %s: %w", d.name, errnoOr(err, errnoENOMEM))
	}
	d.pd = pd
	readSGE := int(attr.max_sge_rd)
	if readSGE == 0 {
		readSGE = int(attr.max_sge)
	}
	d.limits = ib.DeviceLimits{
		MaxQueueDepth: int(attr.max_qp_wr),
		MaxSendSGE:    int(attr.max_sge),
		MaxRecvSGE:    int(attr.max_sge),
		MaxReadSGE:    readSGE,
		MaxInlineData: int(C.srpt_probe_inline(ctx, pd, maxInlineProbe)),
		MaxRDAtomic:   int(min(attr.max_qp_rd_atom, attr.max_qp_init_rd_atom)),
	}
	d.maxCQE = int(attr.max_cqe)
	d.shared = ib.SharedLimits{MaxCQE: d.maxCQE, CompVectors: max(int(attr.num_comp_vectors), 1),
		MaxSRQWR: int(attr.max_srq_wr), MaxSRQSGE: int(attr.max_srq_sge)}
	f, rc, perr := pollable(int(ctx.async_fd), d.name+" async events")
	if perr != nil {
		C.ibv_dealloc_pd(pd)
		openContexts.Add(-1)
		C.ibv_close_device(ctx)
		return nil, errorf("%w", perr)
	}
	d.async = f
	d.asyncDone = make(chan struct{})
	go d.watchAsync(rc)
	devs[device] = d
	return d, nil
}

func errnoOr(err error, fallback syscall.Errno) error {
	if e, ok := err.(syscall.Errno); ok && e != 0 {
		return e
	}
	return fallback
}

func (d *devCtx) String() string { return d.name }

// acquire takes a reference for a new user of the device.
func (d *devCtx) acquire() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.removed:
		return fmt.Errorf("device %s: %w", d.name, ib.ErrDeviceRemoved)
	case d.closed:
		return fmt.Errorf("device %s: %w", d.name, ib.ErrClosed)
	}
	d.refs++
	return nil
}

// release drops a reference; the last one closes the context (after a removal, on another
// goroutine: see closeRemoved).
func (d *devCtx) release() {
	d.mu.Lock()
	d.refs--
	if d.refs > 0 {
		d.mu.Unlock()
		return
	}
	d.closed = true
	s := d.sentinel
	d.sentinel = nil
	removed := d.removed
	d.mu.Unlock()
	d.forget(s)
	if removed {
		go d.closeRemoved()
		return
	}
	d.closeVerbs()
}

// closeVerbs stops the async event goroutine and closes the PD and the context.
func (d *devCtx) closeVerbs() {
	d.async.Close()
	<-d.asyncDone
	C.ibv_dealloc_pd(d.pd)
	C.ibv_close_device(d.ctx)
	openContexts.Add(-1)
}

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

func (d *devCtx) isRemoved() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.removed
}

// join registers m for removal notices; it fails once the device is gone.
func (d *devCtx) join(m devMember) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.removed {
		return fmt.Errorf("device %s: %w", d.name, ib.ErrDeviceRemoved)
	}
	d.members[m] = struct{}{}
	return nil
}

func (d *devCtx) leave(m devMember) {
	d.mu.Lock()
	delete(d.members, m)
	d.mu.Unlock()
}

func (d *devCtx) addQP(qpn uint32, c *Conn) {
	d.mu.Lock()
	d.qps[qpn] = c
	d.mu.Unlock()
}

func (d *devCtx) delQP(qpn uint32) {
	d.mu.Lock()
	delete(d.qps, qpn)
	d.mu.Unlock()
}

// forget drops the closed d from the device table, unless a new context has taken its place,
// and destroys its sentinel id s (taken from d under d.mu; nil if there was none). Called
// without d.mu: rdma_destroy_id waits until the id's events are acknowledged.
func (d *devCtx) forget(s *sentinel) {
	devMu.Lock()
	if devs[d.device] == d {
		delete(devs, d.device)
	}
	devMu.Unlock()
	if s != nil {
		s.destroy()
	}
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

// zoneOf finds the interface of a link-local address from the device's GID table (RoCE GIDs
// are the netdev's addresses), for connections whose addresses the kernel reports without a
// scope: a request to a wildcard listener.
func (d *devCtx) zoneOf(a netip.Addr) string {
	if !a.Is6() || !a.IsLinkLocalUnicast() || a.Zone() != "" {
		return a.Zone()
	}
	gid := a.As16()
	idx := C.srpt_gid_ifindex(d.ctx, (*C.uint8_t)(unsafe.Pointer(&gid[0])))
	if idx == 0 {
		return ""
	}
	return zoneName(int(idx))
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
