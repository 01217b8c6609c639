//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
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

// pdHandle is the ib.ProtectionDomain of a devCtx.
type pdHandle struct{ d *devCtx }

var (
	_ ib.ProtectionDomain = pdHandle{}
	_ ib.RemovalNotifier  = pdHandle{}
)

// Removed is closed when the device is gone: its regions are deregistered already, and the
// protection domain takes no new one. An engine that keeps memory registered while no
// connection is open (a buffer pool per device) learns from it that it can unmap the memory:
// its connections may all have ended before the removal (the initiator disconnected first),
// so none reported EventDeviceRemoved. A device added back is a new protection domain.
func (p pdHandle) Removed() <-chan struct{} { return p.d.gone }

// RegisterMemory implements ib.ProtectionDomain with ibv_reg_mr. buf must not be Go heap
// memory: the HCA keeps using it after the call, which Go forbids (use an ib.Slab). The region
// holds a reference on the device until Deregister.
func (p pdHandle) RegisterMemory(buf []byte, access ib.Access) (ib.MR, error) {
	d := p.d
	if len(buf) == 0 || uint64(len(buf)) >= 1<<40 {
		return nil, errorf("register %d bytes on %s: %w", len(buf), d, ib.ErrInvalidArgument)
	}
	if err := ib.CheckAccess(access); err != nil {
		return nil, errorf("register on %s: %w", d, err)
	}
	if err := d.acquire(); err != nil {
		return nil, errorf("register: %w", err)
	}
	var flags C.int
	if access&ib.AccessLocalWrite != 0 {
		flags |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if access&ib.AccessRemoteWrite != 0 {
		flags |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if access&ib.AccessRemoteRead != 0 {
		flags |= C.IBV_ACCESS_REMOTE_READ
	}
	base := unsafe.Pointer(unsafe.SliceData(buf))
	vm, err := C.srpt_reg_mr(d.pd, base, C.size_t(len(buf)), flags)
	if vm == nil {
		d.release()
		return nil, errorf("register %d bytes on %s: ibv_reg_mr: %w", len(buf), d, errnoOr(err, errnoEINVAL))
	}
	m := &mr{
		dev:    d,
		mr:     vm,
		buf:    buf,
		addr:   uint64(uintptr(base)),
		lkey:   uint32(vm.lkey),
		rkey:   uint32(vm.rkey),
		access: access,
	}
	d.mu.Lock()
	if d.removed {
		// The removal swept the regions before this one was in the set.
		d.mu.Unlock()
		C.ibv_dereg_mr(vm)
		d.release()
		return nil, errorf("register %d bytes on %s: %w", len(buf), d, ib.ErrDeviceRemoved)
	}
	d.mrs[m] = struct{}{}
	d.mu.Unlock()
	return m, nil
}

// mr is an ib.MR registered with ibv_reg_mr. Its fields are immutable; dead is set once by
// Deregister, gone (under mu) when the device's removal deregistered it.
type mr struct {
	dev    *devCtx
	mr     *C.struct_ibv_mr
	buf    []byte
	addr   uint64
	lkey   uint32
	rkey   uint32
	access ib.Access

	mu   sync.Mutex
	dead atomic.Bool
	gone bool
}

var _ ib.MR = (*mr)(nil)

func (m *mr) Bytes() []byte     { return m.buf }
func (m *mr) Addr() uint64      { return m.addr }
func (m *mr) Len() int          { return len(m.buf) }
func (m *mr) LKey() uint32      { return m.lkey }
func (m *mr) RKey() uint32      { return m.rkey }
func (m *mr) Access() ib.Access { return m.access }
func (m *mr) String() string {
	return fmt.Sprintf("mr(%s addr=%#x len=%d lkey=%#x rkey=%#x)", m.dev, m.addr, len(m.buf), m.lkey, m.rkey)
}

// Deregister implements ib.MR with ibv_dereg_mr and releases the region's reference on the
// device. After the device's removal it still succeeds: the removal deregistered the region
// already, or the context is being torn down.
func (m *mr) Deregister() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Load() {
		return errorf("deregister %v: %w", m, ib.ErrClosed)
	}
	if m.gone {
		m.dead.Store(true)
		return nil
	}
	if e := C.ibv_dereg_mr(m.mr); e != 0 && !m.dev.isRemoved() {
		return errorf("deregister %v: %w", m, syscall.Errno(e))
	}
	m.dead.Store(true)
	m.dev.mu.Lock()
	delete(m.dev.mrs, m)
	m.dev.mu.Unlock()
	m.dev.release()
	return nil
}

// deviceRemoved deregisters the region for the device's removal unless Deregister did; true
// means the caller releases the region's reference.
func (m *mr) deviceRemoved() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead.Load() || m.gone {
		return false
	}
	C.ibv_dereg_mr(m.mr) // an error changes nothing: the device is gone either way
	m.gone = true
	return true
}

// Devices lists the RDMA devices with their ports and GIDs. An empty list and no error mean
// the kernel supports RDMA but has no device; an error wrapping ErrNoDevice means it has no
// RDMA support at all (libibverbs reports ENOSYS).
func Devices() ([]DeviceInfo, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		e := errnoOr(err, errnoENOSYS)
		return nil, errorf("list devices: %w", multi(ErrNoDevice, e))
	}
	defer C.ibv_free_device_list(list)
	devices := unsafe.Slice(list, int(n))
	out := make([]DeviceInfo, 0, len(devices))
	for _, dev := range devices {
		info, err := describe(dev)
		if err != nil {
			return out, err
		}
		out = append(out, info)
	}
	return out, nil
}

func describe(dev *C.struct_ibv_device) (DeviceInfo, error) {
	info := DeviceInfo{
		Name:     C.GoString(C.ibv_get_device_name(dev)),
		NodeGUID: uint64(C.srpt_device_guid(dev)),
	}
	ctx, err := C.ibv_open_device(dev)
	if ctx == nil {
		return info, errorf("open device %s: %w", info.Name, errnoOr(err, errnoENODEV))
	}
	defer C.ibv_close_device(ctx)
	var attr C.struct_srpt_device_attr
	if e := C.srpt_query_device(ctx, &attr); e != 0 {
		return info, errorf("query device %s: %w", info.Name, syscall.Errno(e))
	}
	total := 0
	for p := 1; p <= int(attr.phys_port_cnt); p++ {
		var pa C.struct_srpt_port_attr
		if e := C.srpt_query_port(ctx, C.uint8_t(p), &pa); e != 0 {
			return info, errorf("query port %s/%d: %w", info.Name, p, syscall.Errno(e))
		}
		info.Ports = append(info.Ports, PortInfo{
			Num:       p,
			State:     PortState(pa.state),
			LinkLayer: LinkLayer(pa.link_layer),
			ActiveMTU: mtuBytes(int(pa.active_mtu)),
		})
		total += int(pa.gid_tbl_len)
	}
	if total == 0 {
		return info, nil
	}
	entries := make([]C.struct_ibv_gid_entry, total)
	got := C.srpt_query_gids(ctx, &entries[0], C.long(total))
	if got < 0 {
		// Old kernels lack the GID table query; the device is still worth listing.
		return info, nil
	}
	for _, e := range entries[:got] {
		p := int(e.port_num)
		if p < 1 || p > len(info.Ports) {
			continue
		}
		g := GIDInfo{
			Index: int(e.gid_index),
			GID:   netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(&e.gid))),
			Type:  GIDType(e.gid_type),
		}
		if e.ndev_ifindex != 0 {
			if ifi, err := net.InterfaceByIndex(int(e.ndev_ifindex)); err == nil {
				g.Netdev = ifi.Name
			}
		}
		info.Ports[p-1].GIDs = append(info.Ports[p-1].GIDs, g)
	}
	return info, nil
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

// watch gives the device its sentinel, bound to addr (an address of the device, with its
// zone if link-local), unless it has one. A failure is not the caller's: the next user of the
// device tries again, and meanwhile the removal is still reported on the ids of the device.
func (d *devCtx) watch(loop *cmLoop, addr netip.Addr) {
	d.mu.Lock()
	skip := d.sentinel != nil || d.removed || d.closed
	d.mu.Unlock()
	if skip {
		return
	}
	s, err := newSentinel(d, loop, addr)
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

func newSentinel(d *devCtx, loop *cmLoop, addr netip.Addr) (*sentinel, error) {
	sa, err := encodeSockaddr(netip.AddrPortFrom(addr, 0))
	if err != nil {
		return nil, err
	}
	if !loop.tryAcquire() {
		return nil, ib.ErrClosed
	}
	s := &sentinel{d: d, loop: loop, key: newKey()}
	id, err := loop.createID(s.key)
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
