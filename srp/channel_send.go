package srp

import (
	"errors"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
)

// newSQWork posts c's next batch now, or queues it behind earlier work waiting for send-queue
// slots.
func (ch *channel) newSQWork(c *cmdCtx) {
	if ch.sqQ.empty() && ch.advance(c) {
		return
	}
	ch.sqQ.push(c)
}

// serviceSQ advances queued work as send-queue slots free up.
func (ch *channel) serviceSQ() {
	for c := ch.sqQ.pop(); c != nil; c = ch.sqQ.pop() {
		if !ch.advance(c) {
			ch.sqQ.pushFront(c)
			return
		}
	}
}

// advance posts the work of c's stage. It returns false, changing nothing, when the send queue
// has no room for it.
func (ch *channel) advance(c *cmdCtx) bool {
	if ch.closed() {
		ch.finish(c, false)
		return true
	}
	switch c.stage {
	case stageTableRead:
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			return true
		}
		if ch.sqFree < 1 {
			return false
		}
		t := c.dataBuf().TableDescriptor()
		wrs := append(ch.wrs[:0], ib.SendWR{
			ID:         idCmd | uint64(c.idx) | idLast,
			Op:         ib.OpRDMARead,
			Signaled:   true,
			SGL:        append(ch.sges[:0], ib.SGE{MR: ch.pool.mr, Offset: c.table.offset(), Length: t.Len()}),
			RemoteAddr: t.VA(),
			RKey:       t.Key(),
		})
		ch.post(c, wrs)
		return true
	case stageDataRead:
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			return true
		}
		var table []byte
		if c.table.valid() {
			table = ch.pool.bytes(c.table)
		}
		wrs, _ := appendRDMA(ch.wrs[:0], ch.sges[:0], ib.OpRDMARead, c.out, table, ch.pool.mr,
			c.buf.offset(), c.out.Len(), idCmd|uint64(c.idx))
		if len(wrs) == 0 {
			c.cmd.DataOut = ch.pool.bytes(c.buf)
			ch.dispatch(c)
			return true
		}
		if ch.sqFree < len(wrs) {
			return false
		}
		wrs[len(wrs)-1].ID |= idLast
		wrs[len(wrs)-1].Signaled = true
		ch.post(c, wrs)
		return true
	case stageRespond:
		return ch.respond(c)
	}
	ch.log.Error("internal error: send-queue work in an unexpected stage", zap.Stringer("stage", c.stage))
	ch.finish(c, false)
	return true
}

// respond posts the response of c (with the RDMA WRITEs of its data-in before it, in one chain),
// or returns false when the send queue has no room.
func (ch *channel) respond(c *cmdCtx) bool {
	tmf := c.state() == ctxTMF
	wrs, sges := ch.wrs[:0], ch.sges[:0]
	var written uint32
	if !tmf && c.in.Present() && c.cmd.DataInLength > 0 && !c.xportFail {
		var table []byte
		if c.table.valid() {
			table = ch.pool.bytes(c.table)
		}
		written = uint32(min(c.cmd.DataInLength, len(c.cmd.DataIn)))
		wrs, sges = appendRDMA(wrs, sges, ib.OpRDMAWrite, c.in, table, ch.pool.mr, c.buf.offset(), written, idCmd|uint64(c.idx))
	}
	if ch.sqFree < len(wrs)+1 {
		return false
	}
	if !tmf && !c.transition(ctxCmd, ctxResponded) {
		// Task management claimed the command while it waited: no response, and none of
		// its initiator memory is touched.
		ch.finishAborted(c)
		return true
	}
	// Give the receive buffer back before granting its credit again: credits granted never
	// exceed the receive buffers posted, less the spare one for an SRP_CRED_RSP.
	ch.repost(c.recv)
	c.recv = -1
	delta, ok := ch.ledger.respond(ch.recvPosted - spareRecvs)
	if !ok {
		ch.t.stats.creditViolations.Add(1)
		ch.log.Error("internal error: credits granted exceed receive buffers posted",
			zap.Int64("granted", ch.ledger.granted), zap.Int("posted", ch.recvPosted))
	}
	sb := ch.mem[c.sendOff : c.sendOff+uint64(ch.sendStride)]
	var n int
	var err error
	tag := iu.Tag(c.tag.Load())
	if tmf {
		n = iu.Rsp(sb).EncodeTskMgmt(tag, delta, c.tm.code)
	} else {
		n, err = encodeCmdRsp(sb, int(ch.maxTI), &c.cmd, tag, delta, c.in.Present(), c.out.Present(), c.xportFail)
	}
	if err != nil {
		ch.log.Error("internal error: encoding SRP_RSP", zap.Error(err))
		ch.finish(c, false)
		ch.beginClose("internal error")
		return true
	}
	sges = append(sges, ib.SGE{MR: ch.mr, Offset: c.sendOff, Length: uint32(n)})
	wrs = append(wrs, ib.SendWR{
		ID:       idCmd | uint64(c.idx) | idLast,
		Op:       ib.OpSend,
		Signaled: true,
		SGL:      sges[len(sges)-1:],
	})
	c.setStage(stageSent)
	c.written = written
	ch.post(c, wrs)
	if written > 0 {
		ch.t.stats.bytesIn.Add(uint64(written))
	}
	return true
}

// post queues one batch of c, whose last work request is signaled, for flushSends. Each work
// request has one SGE (appendRDMA, respond, advance).
func (ch *channel) post(c *cmdCtx, wrs []ib.SendWR) {
	if len(ch.batch)+len(wrs) > cap(ch.batch) {
		ch.flushSends()
		if !ch.flushesExpected() {
			ch.finish(c, false)
			return
		}
	}
	for i := range wrs {
		wr := wrs[i]
		k := len(ch.batchSGEs)
		ch.batchSGEs = append(ch.batchSGEs, wr.SGL...)
		wr.SGL = ch.batchSGEs[k:len(ch.batchSGEs):len(ch.batchSGEs)]
		ch.batch = append(ch.batch, wr)
	}
	ch.sqFree -= len(wrs)
	c.batchWRs = len(wrs)
	ch.batchPosted()
}

// flushSends posts the queued receive buffers, then the queued work requests with one PostSend.
func (ch *channel) flushSends() {
	ch.flushRecvs()
	if len(ch.batch) == 0 {
		return
	}
	n, err := ch.conn.PostSend(ch.batch)
	total := len(ch.batch)
	ch.t.stats.sendPosts.Add(1)
	ch.t.stats.sendWRs.Add(uint64(n))
	ch.responsesPosted(ch.batch[:n])
	ch.batch, ch.batchSGEs = ch.batch[:0], ch.batchSGEs[:0]
	if err != nil {
		// Part of the chain may be posted without its signaled ends: completion accounting
		// for this queue pair is no longer reliable. Close without waiting for flushes; the
		// contexts and their memory are released once the queue pair is closed
		// (forceRelease).
		if !errors.Is(err, ib.ErrClosed) && !errors.Is(err, ib.ErrDeviceRemoved) {
			ch.log.Error("posting work requests failed", zap.Int("posted", n), zap.Int("batch", total), zap.Error(err))
		}
		ch.abandon("post failed")
	}
}

// responsesPosted ends, for their logical units, the commands whose responses were just posted: it
// adds them to the statistics (for its latency a command ends when its response is handed to
// the device, with one clock read per post, MeasureLatency) and releases their hold (nothing
// of the logical unit is used once the response is built: data-in goes from the channel's
// buffer). Not at the SEND completion, which an idle channel reaps only on its next wake-up
// (sendsAwaited): a reload that retires the logical unit must not wait for that.
func (ch *channel) responsesPosted(posted []ib.SendWR) {
	var now int64
	for i := range posted {
		id := posted[i].ID
		if id&idKindMask != idCmd || id&idLast == 0 {
			continue
		}
		c := &ch.ctxs[id&idIndexMask]
		if c.stage != stageSent {
			continue
		}
		if c.statLU != nil {
			var latency int64
			if ch.t.cfg.MeasureLatency {
				if now == 0 {
					now = ch.nanos()
				}
				latency = now - c.arrived
			}
			c.statLU.Stats().Complete(c.class, &c.cmd, uint64(c.written), uint64(len(c.cmd.DataOut)), latency)
			c.statLU = nil
			ch.countIO(c, ch.lastClock)
		}
		if c.luHold != nil {
			c.luHold.Release()
			c.luHold = nil
		}
	}
}

// onSendCompletion handles a send-queue completion of context c.
func (ch *channel) onSendCompletion(c *cmdCtx, wc *ib.Completion) {
	if wc.ID&idLast == 0 {
		// An unsignaled work request completes only when it failed or was flushed; the last
		// one of its batch follows.
		if wc.Status != ib.StatusWRFlushError {
			ch.rdmaError(stageWhat(c.stage), c, wc.Status)
		}
		return
	}
	if c.batchWRs == 0 {
		ch.log.Error("internal error: completion for a context without a batch", zap.Uint32("ctx", c.idx))
		return
	}
	ch.sendBatches--
	ch.sqFree += c.batchWRs
	c.batchWRs = 0
	if wc.Status != ib.StatusSuccess {
		if wc.Status != ib.StatusWRFlushError {
			ch.rdmaError(stageWhat(c.stage), c, wc.Status)
		}
		ch.finish(c, false)
		ch.serviceSQ()
		return
	}
	switch c.stage {
	case stageTableRead:
		ch.onTableRead(c)
	case stageDataRead:
		if c.state() != ctxCmd || ch.closed() {
			ch.finishAborted(c)
			break
		}
		c.cmd.DataOut = ch.pool.bytes(c.buf)
		ch.t.stats.bytesOut.Add(uint64(len(c.cmd.DataOut)))
		ch.dispatch(c)
	case stageSent:
		ch.finish(c, false)
	default:
		ch.log.Error("internal error: send completion in an unexpected stage", zap.Stringer("stage", c.stage))
	}
	ch.serviceSQ()
}

func stageWhat(s cmdStage) string {
	switch s {
	case stageTableRead:
		return "RDMA READ of an external descriptor table"
	case stageDataRead:
		return "RDMA READ of data-out"
	case stageSent:
		return "RDMA WRITE of data-in / SRP_RSP SEND"
	}
	return "work request"
}

// rdmaError logs a failed work request and closes the channel.
func (ch *channel) rdmaError(what string, c *cmdCtx, st ib.Status) {
	ch.t.stats.rdmaErrors.Add(1)
	fields := []zap.Field{zap.String("operation", what), zap.Stringer("status", st)}
	if c != nil {
		fields = append(fields, zap.Uint64("tag", c.tag.Load()), zap.Uint64("lun", c.lun.Load()))
	}
	switch st {
	case ib.StatusRemoteAccessError:
		fields = append(fields, zap.String("hint", "the initiator's memory handle (rkey) or address range is wrong, or it invalidated the buffer early"))
	case ib.StatusTransportRetryExceeded:
		fields = append(fields, zap.String("hint", "the initiator stopped answering (crashed, cable, or it closed its queue pair)"))
	case ib.StatusRNRRetryExceeded:
		fields = append(fields, zap.String("hint", "the initiator had no receive buffer posted"))
	}
	if !ch.closed() {
		ch.log.Error("work request failed: closing the channel", fields...)
	}
	ch.beginClose("work request failed: " + st.String())
}

// ctlBuf returns the send buffer of target-initiated IU slot.
func (ch *channel) ctlBuf(slot int) (off uint64, b []byte) {
	off = ch.ctlOff + uint64(slot*ch.sendStride)
	return off, ch.mem[off : off+uint64(ch.sendStride)]
}

// postCtl sends the n-byte IU in control slot slot; false if it could not be posted.
func (ch *channel) postCtl(slot int, n int) bool {
	ch.flushSends() // in order after the responses already queued
	if !ch.flushesExpected() {
		return false
	}
	off, _ := ch.ctlBuf(slot)
	sges := append(ch.sges[:0], ib.SGE{MR: ch.mr, Offset: off, Length: uint32(n)})
	wrs := append(ch.wrs[:0], ib.SendWR{ID: idCtl | idLast | uint64(slot), Op: ib.OpSend, Signaled: true, SGL: sges})
	if _, err := ch.conn.PostSend(wrs); err != nil {
		ch.log.Debug("posting a target request failed", zap.Int("slot", slot), zap.Error(err))
		return false
	}
	ch.ctlBusy[slot] = true
	ch.sqFree--
	ch.batchPosted()
	return true
}

// sendTLogout sends SRP_T_LOGOUT (best effort: ib_srp only logs it).
func (ch *channel) sendTLogout(reason iu.TLogoutReason) {
	if ch.ctlBusy[ctlTLogout] || ch.sqFree < 1 || ch.closed() {
		return
	}
	_, b := ch.ctlBuf(ctlTLogout)
	n := iu.TLogout(b).Encode(&iu.TLogoutFields{Reason: reason})
	ch.postCtl(ctlTLogout, n)
}
