package ib

import "fmt"

// The post-time rules of the contract (doc.go, "Posting" and "Establishment"), written once so
// that every implementation rejects the same work requests and parameters with the same
// errors: a work request the in-memory fabric accepts is one verbs accepts too. They look only
// at the values given, never at the implementation of a region: an implementation adds its own
// checks (the region must be one of its own, of the connection's device) after these.

// MaxMessage is the largest message of one work request (RC: 2^31 bytes, IBA 9.4).
const MaxMessage = 1 << 31

// CheckQPCaps checks QP caps against the device. maxCQE is the device's completion queue size
// (max_cqe), or 0 when unknown: an implementation with one CQ entry per send and receive slot
// needs their sum to fit it.
func CheckQPCaps(c QPCaps, lim DeviceLimits, maxCQE int) error {
	if c.SendQueueDepth < 1 || c.SendQueueDepth > lim.MaxQueueDepth ||
		c.RecvQueueDepth < 1 || c.RecvQueueDepth > lim.MaxQueueDepth ||
		c.MaxSendSGE < 1 || c.MaxSendSGE > lim.MaxSendSGE ||
		c.MaxRecvSGE < 1 || c.MaxRecvSGE > lim.MaxRecvSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > lim.MaxInlineData {
		return fmt.Errorf("QP caps %+v outside device limits %+v: %w", c, lim, ErrInvalidArgument)
	}
	if maxCQE > 0 && c.SendQueueDepth+c.RecvQueueDepth > maxCQE {
		return fmt.Errorf("send+receive queue depth %d exceeds the device's CQ size %d: %w",
			c.SendQueueDepth+c.RecvQueueDepth, maxCQE, ErrInvalidArgument)
	}
	return nil
}

// CheckAccess checks the access flags of a memory registration: only the known bits, and
// AccessRemoteWrite only with AccessLocalWrite (ibv_reg_mr fails with EINVAL otherwise).
func CheckAccess(access Access) error {
	switch {
	case access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead) != 0:
		return fmt.Errorf("unknown access bits %#x: %w", uint32(access), ErrInvalidArgument)
	case access&AccessRemoteWrite != 0 && access&AccessLocalWrite == 0:
		return fmt.Errorf("remote write requires local write: %w", ErrInvalidArgument)
	}
	return nil
}

// CheckSGL checks the SGE count against max, that every SGE names a region and is not empty
// (some HCAs read a zero byte count as 2 GiB; a zero-length transfer uses an empty SGL), and
// that the total fits one message. It returns the total.
func CheckSGL(sgl []SGE, max int) (uint64, error) {
	if len(sgl) > max {
		return 0, fmt.Errorf("%d SGEs, QP allows %d: %w", len(sgl), max, ErrInvalidArgument)
	}
	var total uint64
	for i := range sgl {
		switch {
		case sgl[i].MR == nil:
			return 0, fmt.Errorf("SGE %d has no memory region: %w", i, ErrInvalidArgument)
		case sgl[i].Length == 0:
			return 0, fmt.Errorf("SGE %d has length 0: %w", i, ErrInvalidArgument)
		}
		total += uint64(sgl[i].Length)
	}
	if total > MaxMessage {
		return 0, fmt.Errorf("%d bytes exceed the 2 GiB message limit: %w", total, ErrInvalidArgument)
	}
	return total, nil
}

// SendLimits are what CheckSendWR needs to know about a connection.
type SendLimits struct {
	MaxSGE         int   // QPCaps.MaxSendSGE
	MaxReadSGE     int   // DeviceLimits.MaxReadSGE
	MaxInline      int   // QPCaps.MaxInlineData
	InitiatorDepth uint8 // negotiated: RDMA READs are allowed only if it is at least 1
}

// CheckSendWR checks a send-queue work request: a send opcode, the SGE count (an RDMA READ
// also within MaxReadSGE, and only with a nonzero initiator depth), no inline RDMA READ, inline
// data within MaxInline and inside its regions (the CPU copies it at post time: no lkey check,
// but it must be real memory). Bounds and keys of non-inline SGEs are the HCA's to check at
// execution (a completion with StatusLocalProtectionError), not here.
func CheckSendWR(wr *SendWR, l SendLimits) error {
	maxSGE := l.MaxSGE
	switch wr.Op {
	case OpSend, OpRDMAWrite:
	case OpRDMARead:
		if l.InitiatorDepth == 0 {
			return fmt.Errorf("RDMA READ with initiator depth 0: %w", ErrInvalidArgument)
		}
		if wr.Inline {
			return fmt.Errorf("inline RDMA READ: %w", ErrInvalidArgument)
		}
		maxSGE = min(maxSGE, l.MaxReadSGE)
	default:
		return fmt.Errorf("opcode %v: %w", wr.Op, ErrInvalidArgument)
	}
	total, err := CheckSGL(wr.SGL, maxSGE)
	if err != nil {
		return err
	}
	if wr.Inline {
		if total > uint64(l.MaxInline) {
			return fmt.Errorf("%d inline bytes, QP allows %d: %w", total, l.MaxInline, ErrInvalidArgument)
		}
		for i := range wr.SGL {
			g := &wr.SGL[i]
			if n := uint64(g.MR.Len()); g.Offset > n || uint64(g.Length) > n-g.Offset {
				return fmt.Errorf("inline SGE %d outside its region: %w", i, ErrInvalidArgument)
			}
		}
	}
	return nil
}

// CheckRecvWR checks a receive work request against the QP's MaxRecvSGE.
func CheckRecvWR(wr *RecvWR, maxSGE int) error {
	_, err := CheckSGL(wr.SGL, maxSGE)
	return err
}

// CheckConnParams checks what both sides of a connection give when it is set up (Accept's
// AcceptParams, an initiator's connect parameters) against the device: the QP caps, the RNR
// retry count (0..7), responder resources and initiator depth within max_qp_rd_atom, and the
// receives posted before the connection exists (at most the receive queue depth, each valid).
// Private data is checked by the caller: its limit depends on the CM message and port space.
func CheckConnParams(qp QPCaps, rnrRetry, responderResources, initiatorDepth uint8, recv []RecvWR,
	lim DeviceLimits, maxCQE int) error {
	if err := CheckQPCaps(qp, lim, maxCQE); err != nil {
		return err
	}
	if rnrRetry > InfiniteRNRRetry || int(responderResources) > lim.MaxRDAtomic ||
		int(initiatorDepth) > lim.MaxRDAtomic {
		return fmt.Errorf("rnr retry %d, responder resources %d, initiator depth %d (device max %d): %w",
			rnrRetry, responderResources, initiatorDepth, lim.MaxRDAtomic, ErrInvalidArgument)
	}
	if len(recv) > qp.RecvQueueDepth {
		return fmt.Errorf("%d receives for a receive queue of %d: %w", len(recv), qp.RecvQueueDepth, ErrQueueFull)
	}
	for i := range recv {
		if err := CheckRecvWR(&recv[i], qp.MaxRecvSGE); err != nil {
			return fmt.Errorf("receive %d: %w", i, err)
		}
	}
	return nil
}

// CheckAccept checks AcceptParams against the device and the request: private data within
// MaxAcceptPrivateData, CheckConnParams, and an initiator depth no larger than the initiator's
// responder resources reqRR (verbs would let that through and stall RDMA READs or fail the
// initiator's QP transition later; both implementations refuse it at once). A QP accepted with
// a shared receive queue has none of its own: QP.RecvQueueDepth 0 and no Recv.
func CheckAccept(p *AcceptParams, reqRR uint8, lim DeviceLimits, maxCQE int) error {
	if len(p.PrivateData) > MaxAcceptPrivateData {
		return fmt.Errorf("%d bytes of private data: %w", len(p.PrivateData), ErrPrivateDataTooLong)
	}
	caps := p.QP
	if p.SRQ != nil && p.CQ == nil {
		return fmt.Errorf("a QP with a shared receive queue needs a shared CQ: %w", ErrInvalidArgument)
	}
	if p.SRQ != nil {
		// The QP has no receive queue of its own; it is checked as the smallest one a QP can
		// have, the SRQ's depth was checked when it was made.
		if caps.RecvQueueDepth != 0 || len(p.Recv) != 0 {
			return fmt.Errorf("a QP with a shared receive queue has no receive queue of its own (depth %d, %d receives): %w",
				caps.RecvQueueDepth, len(p.Recv), ErrInvalidArgument)
		}
		caps.RecvQueueDepth = 1
	}
	if p.SendCQ != nil && p.CQ == nil {
		return fmt.Errorf("a send CQ without a CQ for the receives: %w", ErrInvalidArgument)
	}
	if p.CQ != nil {
		maxCQE = 0 // the shared CQ's depth is the consumer's to size
	}
	if err := CheckConnParams(caps, p.RNRRetryCount, p.ResponderResources, p.InitiatorDepth, p.Recv, lim, maxCQE); err != nil {
		return err
	}
	if p.InitiatorDepth > reqRR {
		return fmt.Errorf("initiator depth %d exceeds the initiator's responder resources %d: %w",
			p.InitiatorDepth, reqRR, ErrInvalidArgument)
	}
	return nil
}
