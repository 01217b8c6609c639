package srp

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
)

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

// flushRecvs posts the receive buffers repost queued, with one PostRecv. A failure to post to
// the channel's own queue abandons the channel; the group's SRQ logs and carries on.
func (ch *channel) flushRecvs() {
	lost, err := ch.rq.flush(ch.conn)
	if err == nil {
		return
	}
	quiet := errors.Is(err, ib.ErrClosed) || errors.Is(err, ib.ErrDeviceRemoved)
	if ch.rq.shared() {
		if !quiet {
			ch.log.Error("posting shared receive buffers failed", zap.Int("lost", lost), zap.Error(err))
		}
		return
	}
	// The ones not posted will not complete, flushed or otherwise.
	ch.recvPosted -= lost
	if !quiet {
		ch.log.Error("posting receive buffers failed", zap.Int("lost", lost), zap.Error(err))
	}
	ch.abandon("post receive failed")
}

// dropRecvs forgets the receives queued and not posted on the channel's own queue, when no
// flush completion will come.
func (ch *channel) dropRecvs() {
	if ch.rq.shared() {
		return
	}
	ch.recvPosted -= len(ch.rq.q)
	ch.rq.q = ch.rq.q[:0]
}

// repost queues receive buffer i to be posted again with the pass's others (flushRecvs). A
// buffer of the channel's own counts as posted at once: the credit it backs goes out in a
// response or an SRP_CRED_REQ, and flushSends posts the queued receives before those, so on
// the wire the buffer is always posted before its credit is granted. A closing channel's own
// buffers are not posted again (they would only be flushed); a shared one always goes back to
// the group.
func (ch *channel) repost(i int32) {
	if i < 0 {
		return
	}
	if ch.rq.shared() {
		ch.rqHeld--
		ch.rq.queue(i)
		return
	}
	if ch.closed() {
		return
	}
	ch.rq.queue(i)
	ch.recvPosted++
}

// recvLimit is what the credits the initiator holds may not exceed: the receive buffers it can
// consume, less the one kept for an SRP_CRED_RSP. On its own queue those are the buffers posted
// now. On a shared receive queue every channel of the group may consume all of its buffers:
// the bound is its depth, and when the group's channels together hold more credits than it
// has buffers, an initiator's SEND that finds it empty waits in RNR retry (ib_srp retries for
// ever) until a buffer is posted again, as with the kernel's ib_srpt and SCST's srpt on an SRQ.
func (ch *channel) recvLimit() int {
	if ch.rq.shared() {
		return ch.rq.depth - spareRecvs
	}
	return ch.recvPosted - spareRecvs
}
