package srp

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
	"go.uber.org/zap"
)

// Work request IDs: the kind in the top two bits; for commands the context index in the low 32
// bits and idLast on the last work request of a batch (the one that always completes: signaled
// on success, flushed or failed otherwise); for receives the buffer index, and idShared on a
// buffer of the poll group's shared receive queue.
const (
	idKindMask  uint64 = 3 << 62
	idRecv      uint64 = 0 << 62
	idCmd       uint64 = 1 << 62
	idCtl       uint64 = 2 << 62
	idLast      uint64 = 1 << 40
	idShared    uint64 = 1 << 41
	idIndexMask uint64 = 1<<32 - 1
)

// Sizes of the channel's registered region.
const (
	recvAlign = 512 // immediate data lands 512-byte aligned for O_DIRECT, as LIO pads
	sendAlign = 64
	pollBatch = 64
	// spareRecvs is the receive buffer posted beyond the credits granted: the initiator
	// answers an SRP_CRED_REQ with an SRP_CRED_RSP that consumes no credit, so a target that
	// sends SRP_CRED_REQ needs one receive more than it grants (SRP r16a: SRP_CRED_RSP carries no
	// REQUEST LIMIT DELTA of its own; ib_srp, drivers/infiniband/ulp/srp/ib_srp.c
	// srp_process_cred_req, assumes at most one such request outstanding).
	spareRecvs = 1
)

func roundUp(n, a int) int { return (n + a - 1) / a * a }

// recvRing is where IUs land: receive buffers of maxIT bytes in one registered region, posted
// to a channel's own receive queue or to its poll group's shared receive queue (srq set). The
// buffers given back during a pass are queued and posted together (flush): one PostRecv per
// pass, before anything that grants their credits is posted.
type recvRing struct {
	mem    []byte
	mr     ib.MR
	stride int
	pad    int
	maxIT  uint32
	depth  int
	wrs    []ib.RecvWR
	sges   []ib.SGE
	q      []ib.RecvWR
	srq    ib.SRQ // nil: a channel's own
	// Of a shared ring: its memory, and the receives posted (the group's accounting).
	slab   *ib.Slab
	posted int
}

// immAlign is the alignment immediate data lands on, for O_DIRECT (as LIO pads).
const immAlign = recvAlign

// linuxImmOffset is the IMMEDIATE DATA OFFSET the Linux initiator uses (include/scsi/srp.h
// SRP_IMM_DATA_OFFSET: struct srp_cmd, 16 bytes of additional CDB and one struct srp_imm_buf),
// which a shared ring's buffers are padded for. A channel granted another offset gets a ring of
// its own.
const linuxImmOffset = 68

// immPad is the padding before an IU that puts immediate data at offset immOff on the
// alignment.
func immPad(immOff uint16) int {
	if immOff == 0 {
		return 0
	}
	return (immAlign - int(immOff)%immAlign) % immAlign
}

// initRing lays out n buffers of maxIT bytes after pad, stride bytes apart, in mr's memory
// from offset 0.
func (r *recvRing) init(mr ib.MR, mem []byte, n, pad, stride int, maxIT uint32) {
	r.mr, r.mem, r.depth, r.pad, r.stride, r.maxIT = mr, mem, n, pad, stride, maxIT
	r.wrs = make([]ib.RecvWR, n)
	r.sges = make([]ib.SGE, n)
	for i := range r.wrs {
		r.sges[i] = ib.SGE{MR: mr, Offset: uint64(i*stride + pad), Length: maxIT}
		r.wrs[i] = ib.RecvWR{ID: idRecv | uint64(i), SGL: r.sges[i : i+1]}
	}
	r.q = make([]ib.RecvWR, 0, n)
}

// newSharedRing registers the buffers of a shared receive queue in pd and posts them all.
func newSharedRing(pd ib.ProtectionDomain, srq ib.SRQ, depth int, maxIT uint32) (*recvRing, error) {
	pad := immPad(linuxImmOffset)
	stride := roundUp(pad+int(maxIT), recvAlign)
	size := depth * stride
	slab, err := ib.NewSlab(size)
	if err != nil {
		return nil, fmt.Errorf("srp: shared receive buffers of %d bytes: %w", size, err)
	}
	mem := slab.Bytes()[:size]
	mr, err := pd.RegisterMemory(mem, ib.AccessLocalWrite)
	if err != nil {
		_ = slab.Close()
		return nil, fmt.Errorf("srp: registering %d bytes of shared receive buffers: %w", size, err)
	}
	r := &recvRing{srq: srq, slab: slab}
	r.init(mr, mem, depth, pad, stride, maxIT)
	for i := range r.wrs {
		r.wrs[i].ID |= idShared
	}
	if n, err := srq.PostRecv(r.wrs); err != nil {
		_ = mr.Deregister()
		_ = slab.Close()
		return nil, fmt.Errorf("srp: posting %d shared receive buffers (%d posted): %w", depth, n, err)
	}
	r.posted = depth
	return r, nil
}

// release frees a shared ring's memory (its SRQ closed).
func (r *recvRing) release(log *zap.Logger) {
	if err := r.mr.Deregister(); err != nil {
		log.Warn("deregistering shared receive buffers", zap.Error(err))
	}
	if err := r.slab.Close(); err != nil {
		log.Warn("unmapping shared receive buffers", zap.Error(err))
	}
}

// buf returns the bytes of buffer i.
func (r *recvRing) buf(i int32) []byte {
	off := int(i)*r.stride + r.pad
	return r.mem[off : off+int(r.maxIT)]
}

// shared reports whether the ring is a poll group's.
func (r *recvRing) shared() bool { return r.srq != nil }

// queue queues buffer i to be posted again.
func (r *recvRing) queue(i int32) { r.q = append(r.q, r.wrs[i]) }

// flush posts the queued buffers with one PostRecv (conn's, or the SRQ's). It returns how many
// of them are lost: not posted, so never to complete.
func (r *recvRing) flush(conn ib.Conn) (lost int, err error) {
	if len(r.q) == 0 {
		return 0, nil
	}
	var n int
	if r.srq != nil {
		n, err = r.srq.PostRecv(r.q)
		r.posted += n
	} else {
		n, err = conn.PostRecv(r.q)
	}
	lost = len(r.q) - n
	r.q = r.q[:0]
	return lost, err
}
