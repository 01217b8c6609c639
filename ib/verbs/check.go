package verbs

import (
	"fmt"

	"github.com/srptarget/srptarget/ib"
)

// The checks in this file are the post-time rules of package ib's contract that do not depend
// on cgo. They run before anything is written into a work request, so a rejected work request
// costs no C call. Checks that depend on the memory region's implementation (it must be a
// region of this package, of the connection's device) are in the cgo files.

// maxMessage is the largest message of one work request (RC: 2^31 bytes).
const maxMessage = 1 << 31

// checkCaps checks QP caps against the device. The CQ holds one entry per send and receive
// slot (see ring.go), so their sum must fit the device's CQ size too.
func checkCaps(c ib.QPCaps, lim ib.DeviceLimits, maxCQE int) error {
	if c.SendQueueDepth < 1 || c.SendQueueDepth > lim.MaxQueueDepth ||
		c.RecvQueueDepth < 1 || c.RecvQueueDepth > lim.MaxQueueDepth ||
		c.MaxSendSGE < 1 || c.MaxSendSGE > lim.MaxSendSGE ||
		c.MaxRecvSGE < 1 || c.MaxRecvSGE > lim.MaxRecvSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > lim.MaxInlineData {
		return fmt.Errorf("QP caps %+v outside device limits %+v: %w", c, lim, ib.ErrInvalidArgument)
	}
	if maxCQE > 0 && c.SendQueueDepth+c.RecvQueueDepth > maxCQE {
		return fmt.Errorf("send+receive queue depth %d exceeds the device's CQ size %d: %w",
			c.SendQueueDepth+c.RecvQueueDepth, maxCQE, ib.ErrInvalidArgument)
	}
	return nil
}

// checkSGL checks the SGE count, that every SGE names a region and is not empty (some HCAs
// read a zero byte count as 2 GiB; a zero-length transfer uses an empty SGL), and the total.
func checkSGL(sgl []ib.SGE, max int) (uint64, error) {
	if len(sgl) > max {
		return 0, fmt.Errorf("%d SGEs, QP allows %d: %w", len(sgl), max, ib.ErrInvalidArgument)
	}
	var total uint64
	for i := range sgl {
		switch {
		case sgl[i].MR == nil:
			return 0, fmt.Errorf("SGE %d has no memory region: %w", i, ib.ErrInvalidArgument)
		case sgl[i].Length == 0:
			return 0, fmt.Errorf("SGE %d has length 0: %w", i, ib.ErrInvalidArgument)
		}
		total += uint64(sgl[i].Length)
	}
	if total > maxMessage {
		return 0, fmt.Errorf("%d bytes exceed the 2 GiB message limit: %w", total, ib.ErrInvalidArgument)
	}
	return total, nil
}

// sendLimits are what checkSend needs to know about a connection.
type sendLimits struct {
	maxSGE     int   // QPCaps.MaxSendSGE
	maxReadSGE int   // DeviceLimits.MaxReadSGE
	maxInline  int   // QPCaps.MaxInlineData
	rdDepth    uint8 // negotiated initiator depth
}

func checkSend(wr *ib.SendWR, l sendLimits) error {
	maxSGE := l.maxSGE
	switch wr.Op {
	case ib.OpSend, ib.OpRDMAWrite:
	case ib.OpRDMARead:
		if l.rdDepth == 0 {
			return fmt.Errorf("RDMA READ with initiator depth 0: %w", ib.ErrInvalidArgument)
		}
		if wr.Inline {
			return fmt.Errorf("inline RDMA READ: %w", ib.ErrInvalidArgument)
		}
		maxSGE = min(maxSGE, l.maxReadSGE)
	default:
		return fmt.Errorf("opcode %v: %w", wr.Op, ib.ErrInvalidArgument)
	}
	total, err := checkSGL(wr.SGL, maxSGE)
	if err != nil {
		return err
	}
	if wr.Inline {
		if total > uint64(l.maxInline) {
			return fmt.Errorf("%d inline bytes, QP allows %d: %w", total, l.maxInline, ib.ErrInvalidArgument)
		}
		for i := range wr.SGL {
			// The CPU copies inline data from the SGE's address at post time: no lkey check,
			// but the range must be real memory of the region.
			g := &wr.SGL[i]
			if n := uint64(g.MR.Len()); g.Offset > n || uint64(g.Length) > n-g.Offset {
				return fmt.Errorf("inline SGE %d outside its region: %w", i, ib.ErrInvalidArgument)
			}
		}
	}
	return nil
}

func checkRecv(wr *ib.RecvWR, maxSGE int) error {
	_, err := checkSGL(wr.SGL, maxSGE)
	return err
}

// checkAccept checks AcceptParams against the device and the request. reqRR is the
// initiator's responder resources: our initiator depth may not exceed it.
func checkAccept(p *ib.AcceptParams, reqRR uint8, lim ib.DeviceLimits, maxCQE int) error {
	if len(p.PrivateData) > ib.MaxAcceptPrivateData {
		return fmt.Errorf("%d bytes of private data: %w", len(p.PrivateData), ib.ErrPrivateDataTooLong)
	}
	if err := checkCaps(p.QP, lim, maxCQE); err != nil {
		return err
	}
	if p.RNRRetryCount > ib.InfiniteRNRRetry || int(p.ResponderResources) > lim.MaxRDAtomic ||
		int(p.InitiatorDepth) > lim.MaxRDAtomic {
		return fmt.Errorf("rnr retry %d, responder resources %d, initiator depth %d (device max %d): %w",
			p.RNRRetryCount, p.ResponderResources, p.InitiatorDepth, lim.MaxRDAtomic, ib.ErrInvalidArgument)
	}
	if p.InitiatorDepth > reqRR {
		return fmt.Errorf("initiator depth %d exceeds the initiator's responder resources %d: %w",
			p.InitiatorDepth, reqRR, ib.ErrInvalidArgument)
	}
	return checkRecvs(p.Recv, p.QP)
}

// checkConnect checks an initiator's parameters against the device.
func checkConnect(privateData []byte, p *ConnectParams, lim ib.DeviceLimits, maxCQE int) error {
	if len(privateData) > ib.MaxConnRequestPrivateData {
		return fmt.Errorf("%d bytes of private data: %w", len(privateData), ib.ErrPrivateDataTooLong)
	}
	if err := checkCaps(p.QP, lim, maxCQE); err != nil {
		return err
	}
	if p.RNRRetryCount > ib.InfiniteRNRRetry || int(p.ResponderResources) > lim.MaxRDAtomic ||
		int(p.InitiatorDepth) > lim.MaxRDAtomic {
		return fmt.Errorf("rnr retry %d, responder resources %d, initiator depth %d (device max %d): %w",
			p.RNRRetryCount, p.ResponderResources, p.InitiatorDepth, lim.MaxRDAtomic, ib.ErrInvalidArgument)
	}
	return checkRecvs(p.Recv, p.QP)
}

func checkRecvs(wrs []ib.RecvWR, caps ib.QPCaps) error {
	if len(wrs) > caps.RecvQueueDepth {
		return fmt.Errorf("%d receives for a receive queue of %d: %w", len(wrs), caps.RecvQueueDepth, ib.ErrQueueFull)
	}
	for i := range wrs {
		if err := checkRecv(&wrs[i], caps.MaxRecvSGE); err != nil {
			return fmt.Errorf("receive %d: %w", i, err)
		}
	}
	return nil
}
