//go:build linux && cgo

package verbs

/*
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
