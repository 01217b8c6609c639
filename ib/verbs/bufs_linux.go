//go:build linux && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/srptarget/srptarget/ib"
)

// wcBatch is how many completions one ibv_poll_cq call returns at most.
const wcBatch = 32

// wrBufs is a connection's preallocated C memory for the data path, one calloc block: an
// ibv_send_wr per send-queue slot with MaxSendSGE ibv_sge each, an ibv_recv_wr per
// receive-queue slot with MaxRecvSGE ibv_sge each, wcBatch ibv_wc, and the "bad work request"
// index. Work requests are written field by field from Go straight into this memory (no Go
// pointer ever reaches C, as cgo requires) and posted as one linked chain with one C call.
// Each work request's sg_list points at its own SGEs once and for all.
type wrBufs struct {
	mem     unsafe.Pointer
	swr     []C.struct_ibv_send_wr
	ssge    []C.struct_ibv_sge
	rwr     []C.struct_ibv_recv_wr
	rsge    []C.struct_ibv_sge
	wcs     []C.struct_ibv_wc
	bad     *C.int
	sendSGE int
	recvSGE int
}

// Offsets inside struct ibv_send_wr of the wr.rdma union member (cgo shows unions as bytes).
var (
	offRemoteAddr = uintptr(C.srpt_off_rdma_remote_addr)
	offRKey       = uintptr(C.srpt_off_rdma_rkey)
)

func newWRBufs(caps ib.QPCaps) (*wrBufs, error) {
	sq, rq := caps.SendQueueDepth, caps.RecvQueueDepth
	ss, rs := caps.MaxSendSGE, caps.MaxRecvSGE
	swrSize := uintptr(sq) * unsafe.Sizeof(C.struct_ibv_send_wr{})
	ssgeSize := uintptr(sq*ss) * unsafe.Sizeof(C.struct_ibv_sge{})
	rwrSize := uintptr(rq) * unsafe.Sizeof(C.struct_ibv_recv_wr{})
	rsgeSize := uintptr(rq*rs) * unsafe.Sizeof(C.struct_ibv_sge{})
	wcSize := uintptr(wcBatch) * unsafe.Sizeof(C.struct_ibv_wc{})
	total := swrSize + ssgeSize + rwrSize + rsgeSize + wcSize + 8
	mem := C.calloc(1, C.size_t(total))
	if mem == nil {
		return nil, fmt.Errorf("allocate %d bytes of work request memory: %w", total, errnoENOMEM)
	}
	b := &wrBufs{mem: mem, sendSGE: ss, recvSGE: rs}
	p := mem
	b.swr = unsafe.Slice((*C.struct_ibv_send_wr)(p), sq)
	p = unsafe.Add(p, swrSize)
	b.ssge = unsafe.Slice((*C.struct_ibv_sge)(p), sq*ss)
	p = unsafe.Add(p, ssgeSize)
	b.rwr = unsafe.Slice((*C.struct_ibv_recv_wr)(p), rq)
	p = unsafe.Add(p, rwrSize)
	b.rsge = unsafe.Slice((*C.struct_ibv_sge)(p), rq*rs)
	p = unsafe.Add(p, rsgeSize)
	b.wcs = unsafe.Slice((*C.struct_ibv_wc)(p), wcBatch)
	p = unsafe.Add(p, wcSize)
	b.bad = (*C.int)(p)
	for i := range b.swr {
		b.swr[i].sg_list = &b.ssge[i*ss]
	}
	for i := range b.rwr {
		b.rwr[i].sg_list = &b.rsge[i*rs]
	}
	return b, nil
}

func (b *wrBufs) free() {
	if b != nil && b.mem != nil {
		C.free(b.mem)
		b.mem = nil
	}
}

// regionOf returns the verbs region of an SGE, which must belong to dev: a region of another
// implementation has no lkey that means anything here, and one of another device's PD has an
// lkey that might even be valid on this device, for other memory.
func regionOf(g *ib.SGE, dev *devCtx) (*mr, error) {
	m, ok := g.MR.(*mr)
	switch {
	case !ok:
		return nil, fmt.Errorf("region %T is not a verbs region: %w", g.MR, ib.ErrInvalidArgument)
	case m.dev != dev:
		return nil, fmt.Errorf("region of device %s used on device %s: %w", m.dev, dev, ib.ErrInvalidArgument)
	}
	return m, nil
}

// fillSend writes wr, already checked by ib.CheckSendWR, into send slot i with the given wr_id.
func (b *wrBufs) fillSend(i int, wr *ib.SendWR, wrID uint64, dev *devCtx) error {
	w := &b.swr[i]
	if err := fillSGEs(b.ssge[i*b.sendSGE:], wr.SGL, dev, wr.Inline); err != nil {
		return err
	}
	w.wr_id = C.uint64_t(wrID)
	w.num_sge = C.int(len(wr.SGL))
	switch wr.Op {
	case ib.OpSend:
		w.opcode = C.IBV_WR_SEND
	case ib.OpRDMAWrite:
		w.opcode = C.IBV_WR_RDMA_WRITE
	case ib.OpRDMARead:
		w.opcode = C.IBV_WR_RDMA_READ
	}
	var flags C.uint
	if wr.Signaled {
		flags |= C.IBV_SEND_SIGNALED
	}
	if wr.Inline {
		flags |= C.IBV_SEND_INLINE
	}
	w.send_flags = flags
	*(*uint64)(unsafe.Add(unsafe.Pointer(w), offRemoteAddr)) = wr.RemoteAddr
	*(*uint32)(unsafe.Add(unsafe.Pointer(w), offRKey)) = wr.RKey
	return nil
}

// fillRecv writes wr, already checked by ib.CheckRecvWR, into receive slot i.
func (b *wrBufs) fillRecv(i int, wr *ib.RecvWR, wrID uint64, dev *devCtx) error {
	w := &b.rwr[i]
	if err := fillSGEs(b.rsge[i*b.recvSGE:], wr.SGL, dev, false); err != nil {
		return err
	}
	w.wr_id = C.uint64_t(wrID)
	w.num_sge = C.int(len(wr.SGL))
	return nil
}

// fillSGEs writes sgl, already checked, into the slot's sges. The data of an inline send is
// read by the CPU at post time, when the memory of a deregistered region may be unmapped
// already, so inline refuses one.
func fillSGEs(sges []C.struct_ibv_sge, sgl []ib.SGE, dev *devCtx, inline bool) error {
	sges = sges[:len(sgl)]
	for j := range sgl {
		g := &sgl[j]
		m, err := regionOf(g, dev)
		if err != nil {
			return fmt.Errorf("SGE %d: %w", j, err)
		}
		if inline && m.dead.Load() {
			return fmt.Errorf("inline SGE %d names a deregistered region: %w", j, ib.ErrInvalidArgument)
		}
		sges[j].addr = C.uint64_t(m.Addr() + g.Offset)
		sges[j].length = C.uint32_t(g.Length)
		sges[j].lkey = C.uint32_t(m.LKey())
	}
	return nil
}

// The views below read the C work requests back, for tests of the chain building.

type sgeView struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

type sendWRView struct {
	WRID       uint64
	Opcode     uint32
	Flags      uint32
	RemoteAddr uint64
	RKey       uint32
	SGL        []sgeView
	Next       int // index of the next work request in the chain, -1 for none
}

func (b *wrBufs) sendView(i int) sendWRView {
	w := &b.swr[i]
	v := sendWRView{
		WRID:       uint64(w.wr_id),
		Opcode:     uint32(w.opcode),
		Flags:      uint32(w.send_flags),
		RemoteAddr: *(*uint64)(unsafe.Add(unsafe.Pointer(w), offRemoteAddr)),
		RKey:       *(*uint32)(unsafe.Add(unsafe.Pointer(w), offRKey)),
		Next:       -1,
	}
	sg := unsafe.Slice(w.sg_list, int(w.num_sge))
	for _, s := range sg {
		v.SGL = append(v.SGL, sgeView{uint64(s.addr), uint32(s.length), uint32(s.lkey)})
	}
	if w.next != nil {
		v.Next = int((uintptr(unsafe.Pointer(w.next)) - uintptr(unsafe.Pointer(&b.swr[0]))) / unsafe.Sizeof(*w))
	}
	return v
}

type recvWRView struct {
	WRID uint64
	SGL  []sgeView
	Next int
}

func (b *wrBufs) recvView(i int) recvWRView {
	w := &b.rwr[i]
	v := recvWRView{WRID: uint64(w.wr_id), Next: -1}
	for _, s := range unsafe.Slice(w.sg_list, int(w.num_sge)) {
		v.SGL = append(v.SGL, sgeView{uint64(s.addr), uint32(s.length), uint32(s.lkey)})
	}
	if w.next != nil {
		v.Next = int((uintptr(unsafe.Pointer(w.next)) - uintptr(unsafe.Pointer(&b.rwr[0]))) / unsafe.Sizeof(*w))
	}
	return v
}

// linkSend and linkRecv link the first n work requests as the post helpers do.
func (b *wrBufs) linkSend(n int) { C.srpt_link_send(&b.swr[0], C.int(n)) }
func (b *wrBufs) linkRecv(n int) { C.srpt_link_recv(&b.rwr[0], C.int(n)) }

// C constants the tests compare with the Go side's copies.
var cWC = struct{ send, rdmaWrite, rdmaRead, recv uint32 }{
	C.IBV_WC_SEND, C.IBV_WC_RDMA_WRITE, C.IBV_WC_RDMA_READ, C.IBV_WC_RECV,
}

var cWR = struct{ send, rdmaWrite, rdmaRead, signaled, inline uint32 }{
	C.IBV_WR_SEND, C.IBV_WR_RDMA_WRITE, C.IBV_WR_RDMA_READ, C.IBV_SEND_SIGNALED, C.IBV_SEND_INLINE,
}

var cAccess = struct{ localWrite, remoteWrite, remoteRead uint32 }{
	C.IBV_ACCESS_LOCAL_WRITE, C.IBV_ACCESS_REMOTE_WRITE, C.IBV_ACCESS_REMOTE_READ,
}
