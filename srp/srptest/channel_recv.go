package srptest

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
)

// broadcastLocked wakes every goroutine waiting for a state change.
func (c *Channel) broadcastLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

func (c *Channel) protoErrorLocked(err error) {
	c.stats.ProtocolErrors++
	if len(c.protoErrs) < maxProtocolErrors {
		c.protoErrs = append(c.protoErrs, fmt.Errorf("%w: %w", ErrProtocol, err))
	}
}

// failLocked stops the channel with err: every request in flight completes with it.
func (c *Channel) failLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	close(c.down)
	for tag, r := range c.pending {
		delete(c.pending, tag)
		c.finishLocked(r, nil, err)
	}
	c.broadcastLocked()
	close(c.unsolWake)
	c.unsolWake = make(chan struct{})
}

// finishLocked completes r (already out of the pending map): buffers deregistered, can_queue
// slot freed.
func (c *Channel) finishLocked(r *request, rsp *Response, err error) {
	if r.build != nil {
		r.build.release()
	}
	if r.tagIdx >= 0 {
		c.tagBusy[r.tagIdx] = false
	}
	r.rsp, r.err = rsp, err
	close(r.done)
	c.broadcastLocked()
}

// poll is the channel's completion handler goroutine (ib_srp's recv_done / send_done and CM
// event handler).
func (c *Channel) poll() {
	defer close(c.pollDone)
	wcs := make([]ib.Completion, 32)
	for {
		select {
		case <-c.stop:
			return
		case <-c.conn.Ready():
		}
		if !c.drainCompletions(wcs) {
			return
		}
		for {
			ev, ok := c.conn.PollEvent()
			if !ok {
				break
			}
			if ev == ib.EventDisconnected && !c.drainCompletions(wcs) {
				// Responses the target sent before its DREQ may have been queued while this
				// goroutine was past the completion drain above: take them before failing
				// what is still pending (a target that answers, then disconnects, must not
				// look as if it had not answered).
				return
			}
			c.event(ev)
		}
	}
}

// drainCompletions polls the completion queue empty; false when the connection is gone.
func (c *Channel) drainCompletions(wcs []ib.Completion) bool {
	for {
		n, err := c.conn.PollCompletions(wcs)
		c.mu.Lock()
		if err != nil {
			// The connection was closed underneath (Fabric.Close): nothing will complete
			// any more, and this goroutine must not outlive the fabric.
			c.failLocked(fmt.Errorf("srptest: polling: %w: %w", ErrDisconnected, err))
			c.mu.Unlock()
			return false
		}
		for i := range wcs[:n] {
			c.completionLocked(&wcs[i])
		}
		c.mu.Unlock()
		if n < len(wcs) {
			return true
		}
	}
}

func (c *Channel) event(ev ib.Event) {
	switch ev {
	case ib.EventDisconnected:
		c.mu.Lock()
		c.failLocked(fmt.Errorf("srptest: DREQ received: %w", ErrDisconnected))
		c.mu.Unlock()
		// ib_srp answers with rdma_disconnect (DREP) and starts its transport timers.
		_ = c.conn.Disconnect()
	case ib.EventDeviceRemoved:
		c.mu.Lock()
		c.failLocked(fmt.Errorf("srptest: device removed: %w", ErrDisconnected))
		c.mu.Unlock()
	}
}

func (c *Channel) completionLocked(wc *ib.Completion) {
	if wc.ID&wrRecv != 0 {
		c.recvLocked(wc)
		return
	}
	if wc.ID&wrRaw != 0 {
		if mr := c.raw[wc.ID]; mr != nil {
			delete(c.raw, wc.ID)
			_ = mr.Deregister()
		}
	} else {
		c.txFree = append(c.txFree, int(wc.ID))
		c.broadcastLocked()
	}
	if w, ok := c.sendWait[wc.ID]; ok {
		delete(c.sendWait, wc.ID)
		w <- wc.Status
	}
	if wc.Status != ib.StatusSuccess {
		c.failLocked(fmt.Errorf("srptest: SEND completed with %v (%d): %w", wc.Status, wc.Status, ErrTransport))
	}
}

func (c *Channel) recvLocked(wc *ib.Completion) {
	i := int(wc.ID &^ wrRecv)
	if wc.Status != ib.StatusSuccess {
		if wc.Status == ib.StatusLocalLengthError {
			c.protoErrorLocked(fmt.Errorf("target sent an IU longer than the MAXIMUM TI IU LENGTH %d it granted", c.rxSize))
		}
		c.failLocked(fmt.Errorf("srptest: receive completed with %v (%d): %w", wc.Status, wc.Status, ErrTransport))
		return
	}
	off := i * c.rxSize
	msg := append([]byte(nil), c.rxBuf[off:off+int(wc.ByteLen)]...)
	if c.err == nil {
		if _, err := c.conn.PostRecv([]ib.RecvWR{c.recvWR(i)}); err != nil {
			c.failLocked(fmt.Errorf("srptest: re-posting receive %d: %w: %w", i, ErrTransport, err))
		}
	}
	c.handleIULocked(msg)
}

// handleIULocked is ib_srp's srp_recv_done dispatch.
func (c *Channel) handleIULocked(msg []byte) {
	if len(msg) == 0 {
		c.protoErrorLocked(fmt.Errorf("empty IU"))
		c.unsolicitedLocked(msg)
		return
	}
	switch op := iu.Opcode(msg[0]); op {
	case iu.OpRsp:
		c.rspLocked(msg)
	case iu.OpCredReq:
		c.stats.CredReqs++
		c.targetReqLocked(msg, iu.CredReq(msg), iu.OpCredRsp)
	case iu.OpAerReq:
		c.stats.AerReqs++
		c.targetReqLocked(msg, iu.AerReq(msg), iu.OpAerRsp)
	case iu.OpTLogout:
		c.stats.TLogouts++
		f, err := iu.Parse[iu.TLogout](msg)
		if err != nil {
			c.protoErrorLocked(err)
		} else {
			select {
			case <-c.tlogout:
			default:
				c.tlogoutF = f
				close(c.tlogout)
			}
		}
		c.unsolicitedLocked(msg)
	default:
		c.protoErrorLocked(fmt.Errorf("unexpected %v from the target", op))
		c.unsolicitedLocked(msg)
	}
}

// targetReqLocked handles a target's SRP_CRED_REQ or SRP_AER_REQ (req, the view of msg): its
// REQUEST LIMIT DELTA counts, and a valid one is answered with rspOp under its tag, as ib_srp's
// srp_process_cred_req and srp_process_aer_req both do through srp_response_common.
func (c *Channel) targetReqLocked(msg []byte, req interface {
	Validate() error
	Tag() iu.Tag
}, rspOp iu.Opcode) {
	c.addDeltaLocked(msg)
	if err := req.Validate(); err != nil {
		c.protoErrorLocked(err)
	} else {
		c.answerLocked(rspOp, req.Tag())
	}
	c.unsolicitedLocked(msg)
}

// addDeltaLocked adds the REQUEST LIMIT DELTA (bytes 4-7 of SRP_RSP, SRP_CRED_REQ and
// SRP_AER_REQ) when the IU is long enough to hold it.
func (c *Channel) addDeltaLocked(msg []byte) {
	if len(msg) >= 8 {
		c.credits += int64(binary.BigEndian.Uint32(msg[4:8]))
		c.broadcastLocked()
	}
}

// answerLocked sends SRP_CRED_RSP / SRP_AER_RSP, which take no credit (srp_response_common).
func (c *Channel) answerLocked(op iu.Opcode, tag iu.Tag) {
	if c.err != nil {
		return
	}
	if len(c.txFree) == 0 {
		// A conforming target has at most one request outstanding.
		c.protoErrorLocked(fmt.Errorf("no send buffer left to answer with %v: %w", op, ErrNoIU))
		return
	}
	slot := c.txFree[len(c.txFree)-1]
	c.txFree = c.txFree[:len(c.txFree)-1]
	buf := c.txSlot(slot)
	var n int
	if op == iu.OpCredRsp {
		n = iu.CredRsp(buf).Encode(&iu.CredRspFields{Tag: tag})
	} else {
		n = iu.AerRsp(buf).Encode(&iu.AerRspFields{Tag: tag})
	}
	if _, err := c.conn.PostSend([]ib.SendWR{c.sendWR(uint64(slot), c.txMR, uint64(slot*c.txSize), n)}); err != nil {
		c.txFree = append(c.txFree, slot)
		c.failLocked(fmt.Errorf("srptest: sending %v: %w: %w", op, ErrTransport, err))
	}
}

func (c *Channel) sendWR(id uint64, mr ib.MR, off uint64, n int) ib.SendWR {
	return ib.SendWR{ID: id, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: mr, Offset: off, Length: uint32(n)}}}
}

// rspLocked is ib_srp's srp_process_rsp.
func (c *Channel) rspLocked(msg []byte) {
	c.stats.Responses++
	c.addDeltaLocked(msg)
	if len(msg) < 16 {
		c.protoErrorLocked(fmt.Errorf("SRP_RSP of %d bytes has no TAG", len(msg)))
		c.unsolicitedLocked(msg)
		return
	}
	v := iu.Rsp(msg)
	r := c.pending[v.Tag()]
	verr := v.Validate()
	if verr != nil {
		c.protoErrorLocked(fmt.Errorf("SRP_RSP tag %#x: %w", v.Tag(), verr))
	}
	if r == nil || !r.posted {
		c.stats.UnknownTags++
		c.unsolicitedLocked(msg)
		return
	}
	delete(c.pending, r.tag)
	if verr != nil {
		c.finishLocked(r, nil, fmt.Errorf("srptest: SRP_RSP tag %#x: %w: %w", r.tag, ErrProtocol, verr))
		return
	}
	rsp := &Response{
		Tag:             v.Tag(),
		Status:          v.Status(),
		Flags:           v.Flags(),
		DataInResidual:  v.DataInResCnt(),
		DataOutResidual: v.DataOutResCnt(),
		ReqLimDelta:     v.ReqLimDelta(),
		IU:              msg,
	}
	if n := v.RespDataLen(); n > 0 {
		rsp.RespData = v.RespData()
	}
	if n := v.SenseDataLen(); n > 0 {
		rsp.Sense = v.SenseData()
	}
	if r.build != nil && r.build.inBuf != nil {
		valid := len(r.build.inBuf)
		if rsp.Flags&iu.DIUNDER != 0 {
			if uint64(rsp.DataInResidual) > uint64(valid) {
				c.protoErrorLocked(fmt.Errorf("SRP_RSP tag %#x: DIUNDER residual %d exceeds the %d-byte data-in buffer",
					r.tag, rsp.DataInResidual, valid))
				valid = 0
			} else {
				valid -= int(rsp.DataInResidual)
			}
		}
		rsp.DataIn = r.build.inBuf[:valid]
	}
	c.finishLocked(r, rsp, nil)
}

// unsolicitedLocked queues a copy of an IU that answered no request in flight.
func (c *Channel) unsolicitedLocked(msg []byte) {
	if len(c.unsol) >= maxUnsolicited {
		c.unsol = c.unsol[1:]
		c.stats.UnsolicitedDropped++
	}
	c.unsol = append(c.unsol, msg)
	close(c.unsolWake)
	c.unsolWake = make(chan struct{})
}

// NextUnsolicited waits for the next IU the target sent that answered no request in flight:
// SRP_T_LOGOUT, SRP_CRED_REQ and SRP_AER_REQ (already answered), SRP_RSP with an unknown tag
// (e.g. the answer to an IU sent with SendRaw), IUs with an unknown opcode and malformed IUs.
// It returns IUs received before the channel went down before returning its error.
func (c *Channel) NextUnsolicited(ctx context.Context) ([]byte, error) {
	c.mu.Lock()
	for len(c.unsol) == 0 {
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return nil, err
		}
		w := c.unsolWake
		c.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, fmt.Errorf("srptest: waiting for an unsolicited IU: %w", ctx.Err())
		}
		c.mu.Lock()
	}
	msg := c.unsol[0]
	c.unsol = c.unsol[1:]
	c.mu.Unlock()
	return msg, nil
}
