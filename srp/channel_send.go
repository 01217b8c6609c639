package srp

import (
	"errors"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
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
		if c.out.Format() == iu.DescDirect {
			return ch.readDirect(c)
		}
		var table []byte
		if c.table.valid() {
			table = ch.pool.bytes(c.table)
		}
		wrs, _ := appendRDMA(ch.wrs[:0], ch.sges[:0], ib.OpRDMARead, &c.out, table, ch.pool.mr,
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

// readDirect is advance's stageDataRead for data-out in one direct descriptor (most
// commands): the RDMA READ is built in the batch itself, not by appendRDMA and copied by post.
func (ch *channel) readDirect(c *cmdCtx) bool {
	desc := iu.DirectBuf(c.out.Descriptor())
	if desc.Len() == 0 {
		c.cmd.DataOut = ch.pool.bytes(c.buf)
		ch.dispatch(c)
		return true
	}
	if ch.sqFree < 1 {
		return false
	}
	if !ch.batchRoom(1) {
		ch.finish(c, false)
		return true
	}
	ch.batchSGEs = append(ch.batchSGEs, ib.SGE{MR: ch.pool.mr, Offset: c.buf.offset(), Length: desc.Len()})
	ch.batch = append(ch.batch, ib.SendWR{ID: idCmd | uint64(c.idx) | idLast, Op: ib.OpRDMARead, Signaled: true,
		SGL: ch.batchSGEs[len(ch.batchSGEs)-1:], RemoteAddr: desc.VA(), RKey: desc.Key()})
	ch.sqFree--
	c.batchWRs = 1
	ch.batchPosted()
	return true
}

// respond posts the response of c (with the RDMA WRITEs of its data-in before it, in one chain),
// or returns false when the send queue has no room. The chain is built in place at the end of
// the batch (batchRoom), not built apart and copied in as post does.
func (ch *channel) respond(c *cmdCtx) bool {
	tmf := c.state() == ctxTMF
	rdma := !tmf && c.in.Present() && c.cmd.DataInLength > 0 && !c.xportFail
	need := 1 // the SEND, after at most one RDMA WRITE per descriptor
	if rdma {
		need += c.in.TableLen()
	}
	if !ch.batchRoom(need) {
		ch.finish(c, false)
		return true
	}
	k, ks := len(ch.batch), len(ch.batchSGEs)
	var written uint32
	if rdma {
		written = uint32(min(c.cmd.DataInLength, len(c.cmd.DataIn)))
		if c.in.Format() == iu.DescDirect {
			// appendRDMA's first case, without its call (most commands).
			desc := iu.DirectBuf(c.in.Descriptor())
			if l := min(desc.Len(), written); l > 0 {
				ch.batchSGEs = append(ch.batchSGEs, ib.SGE{MR: ch.pool.mr, Offset: c.buf.offset(), Length: l})
				ch.batch = append(ch.batch, ib.SendWR{ID: idCmd | uint64(c.idx), Op: ib.OpRDMAWrite,
					SGL: ch.batchSGEs[len(ch.batchSGEs)-1:], RemoteAddr: desc.VA(), RKey: desc.Key()})
			}
		} else {
			var table []byte
			if c.table.valid() {
				table = ch.pool.bytes(c.table)
			}
			ch.batch, ch.batchSGEs = appendRDMA(ch.batch, ch.batchSGEs, ib.OpRDMAWrite, &c.in, table, ch.pool.mr, c.buf.offset(), written, idCmd|uint64(c.idx))
		}
	}
	n := len(ch.batch) - k + 1
	if ch.sqFree < n {
		ch.batch, ch.batchSGEs = ch.batch[:k], ch.batchSGEs[:ks]
		return false
	}
	if !tmf && !c.transition(ctxCmd, ctxResponded) {
		// Task management claimed the command while it waited: no response, and none of
		// its initiator memory is touched.
		ch.batch, ch.batchSGEs = ch.batch[:k], ch.batchSGEs[:ks]
		ch.finishAborted(c)
		return true
	}
	// Give the receive buffer back before granting its credit again: credits granted never
	// exceed the receive buffers posted, less the spare one for an SRP_CRED_RSP.
	ch.repost(c.recv)
	c.recv = -1
	delta, ok := ch.ledger.respond(ch.recvLimit())
	if !ok {
		ch.t.stats.creditViolations.Add(1)
		ch.log.Error("internal error: credits granted exceed receive buffers posted",
			zap.Int64("granted", ch.ledger.granted), zap.Int("posted", ch.recvPosted))
	}
	sb := ch.mem[c.sendOff : c.sendOff+uint64(ch.sendStride)]
	var size int
	var err error
	tag := iu.Tag(c.tag.Load())
	if tmf {
		size = iu.Rsp(sb).EncodeTskMgmt(tag, delta, c.tm.code)
	} else {
		size, err = encodeCmdRsp(sb, int(ch.maxTI), &c.cmd, tag, delta, c.in.Present(), c.out.Present(), c.xportFail)
	}
	if err != nil {
		ch.batch, ch.batchSGEs = ch.batch[:k], ch.batchSGEs[:ks]
		ch.log.Error("internal error: encoding SRP_RSP", zap.Error(err))
		ch.finish(c, false)
		ch.beginClose("internal error")
		return true
	}
	ch.batchSGEs = append(ch.batchSGEs, ib.SGE{MR: ch.mr, Offset: c.sendOff, Length: uint32(size)})
	ch.batch = append(ch.batch, ib.SendWR{
		ID:       idCmd | uint64(c.idx) | idLast,
		Op:       ib.OpSend,
		Signaled: true,
		// Inline where the QP allows: the HCA takes the response from the work request
		// instead of reading it from memory (one PCIe read less per command).
		Inline: size <= ch.inline,
		SGL:    ch.batchSGEs[len(ch.batchSGEs)-1:],
	})
	c.setStageSent()
	c.written = written
	ch.sqFree -= n
	c.batchWRs = n
	ch.batchPosted()
	if written > 0 {
		ch.t.stats.bytesIn.Add(uint64(written))
	}
	return true
}

// appendRDMA appends to wrs one RDMA work request (op: RDMA READ for data-out, RDMA WRITE for
// data-in) per non-empty remote descriptor of d, moving n bytes between the local buffer at
// base in mr and the descriptors in order; the last descriptors get less (or nothing) when n is
// less than their total. Descriptors come from the IU, or from table (the fetched external
// descriptor table) when d is external. Each work request has one local SGE, appended to sges:
// the local buffer is contiguous, so one SGE always suffices whatever DeviceLimits.MaxReadSGE
// is. No work request is signaled; the caller signals the last one of the batch. Nothing is
// allocated when wrs and sges have room for every descriptor; when sges grows, the SGLs
// appended before keep pointing into the array they were appended to, whose elements do not
// change.
func appendRDMA(wrs []ib.SendWR, sges []ib.SGE, op ib.Opcode, d *iu.DataBuf, table []byte, mr ib.MR, base uint64, n uint32, id uint64) ([]ib.SendWR, []ib.SGE) {
	if d.Format() == iu.DescDirect {
		// One descriptor, in the IU: what ib_srp sends for a buffer that one memory
		// registration covers, most commands.
		desc := iu.DirectBuf(d.Descriptor())
		if l := min(desc.Len(), n); l > 0 {
			sges = append(sges, ib.SGE{MR: mr, Offset: base, Length: l})
			wrs = append(wrs, ib.SendWR{ID: id, Op: op, SGL: sges[len(sges)-1:], RemoteAddr: desc.VA(), RKey: desc.Key()})
		}
		return wrs, sges
	}
	cnt := d.TableLen()
	if table == nil {
		cnt = d.NumDescriptors()
	}
	var off uint64
	for i := 0; i < cnt && n > 0; i++ {
		var desc iu.DirectBuf
		if table != nil {
			desc = iu.DirectBuf(table[i*iu.DirectBufSize : (i+1)*iu.DirectBufSize])
		} else {
			desc = d.DescriptorAt(i)
		}
		l := min(desc.Len(), n)
		if l == 0 {
			continue
		}
		sges = append(sges, ib.SGE{MR: mr, Offset: base + off, Length: l})
		wrs = append(wrs, ib.SendWR{
			ID:         id,
			Op:         op,
			SGL:        sges[len(sges)-1:],
			RemoteAddr: desc.VA(),
			RKey:       desc.Key(),
		})
		off += uint64(l)
		n -= l
	}
	return wrs, sges
}

// encodeCmdRsp writes the SRP_RSP of a finished command into b (at most maxTI bytes) and
// returns its length. Sense data is truncated to what fits in maxTI. Residuals: for the
// direction the command moved data in (in or out present), the SCSI layer's TransferLength is
// compared with the buffer the descriptors gave (scsi.Command.DataInResidual/DataOutResidual):
// more asked than the buffer holds is an overflow (DIOVER/DOOVER), less is an underflow
// (DIUNDER/DOUNDER). Commands answered by the transport itself (xportFail) report none.
func encodeCmdRsp(b []byte, maxTI int, c *scsi.Command, tag iu.Tag, delta uint32, in, out, xportFail bool) (int, error) {
	var flags iu.RspFlags
	var doRes, diRes uint32
	if !xportFail {
		if in {
			over, n := c.DataInResidual()
			flags, diRes = residual(flags, over, n, iu.DIOVER, iu.DIUNDER)
		}
		if out {
			over, n := c.DataOutResidual()
			flags, doRes = residual(flags, over, n, iu.DOOVER, iu.DOUNDER)
		}
	}
	sense := c.SenseData()
	if len(sense) == 0 && maxTI >= iu.RspMinSize && len(b) >= iu.RspMinSize {
		// Nearly every response: no sense data, nothing to check.
		return iu.Rsp(b).EncodeStatus(tag, delta, uint8(c.Status), flags, doRes, diRes), nil
	}
	if room := maxTI - iu.RspMinSize; len(sense) > room {
		sense = sense[:max(room, 0)]
	}
	f := iu.RspFields{
		ReqLimDelta:   delta,
		Tag:           tag,
		Status:        uint8(c.Status),
		Flags:         flags,
		DataOutResCnt: doRes,
		DataInResCnt:  diRes,
		SenseData:     sense,
	}
	return iu.Rsp(b[:min(len(b), maxTI)]).Encode(&f)
}

// residual adds to flags the OVER flag of a transfer larger than the initiator's buffer, or
// the UNDER flag of a shorter one, and returns the residual count n that goes with it (0 and
// no flag when the transfer filled the buffer).
func residual(flags iu.RspFlags, over bool, n int, overFlag, underFlag iu.RspFlags) (iu.RspFlags, uint32) {
	switch {
	case over:
		return flags | overFlag, uint32(n)
	case n > 0:
		return flags | underFlag, uint32(n)
	}
	return flags, 0
}

// finishAborted ends a command that gets no response: its credit is owed to the initiator
// and returned with the next response (LIO's srpt_aborted_task).
func (ch *channel) finishAborted(c *cmdCtx) {
	ch.t.stats.aborted.Add(1)
	ch.finish(c, true)
}

// finish releases c: buffers back to the pool, its receive buffer re-posted (unless closing),
// and the context back on the free list, then starts an IU parked for want of a context.
func (ch *channel) finish(c *cmdCtx, owed bool) {
	ch.releaseBuffers(c)
	if c.recv >= 0 {
		ch.repost(c.recv) // a closing channel's own buffers stay unposted (repost)
		if owed && !ch.closed() {
			ch.ledger.owe()
		}
		c.recv = -1
	}
	ch.uncount(c)
	c.cmd.DataIn, c.cmd.DataOut, c.cmd.CDB = nil, nil, nil
	c.lunMap, c.mapping = nil, nil
	if c.luHold != nil {
		c.luHold.Release()
		c.luHold = nil
	}
	c.statLU = nil
	c.setStageNone()
	c.free()
	ch.free = append(ch.free, c)
	if len(ch.waitRecv) > 0 && !ch.closed() {
		p := ch.waitRecv[0]
		copy(ch.waitRecv, ch.waitRecv[1:])
		ch.waitRecv = ch.waitRecv[:len(ch.waitRecv)-1]
		ch.startIU(ch.allocCtx(), p.recv, int(p.n), p.at)
	}
}

// uncount ends c's count in ch.commands, if it was counted.
func (ch *channel) uncount(c *cmdCtx) {
	if c.real {
		c.real = false
		ch.commands--
		if c.stage == stageSent {
			ch.answered--
		}
	}
}

// batchRoom makes sure n more work requests fit in the batch (batchMax), posting it first when
// they would not. False when that post failed and the channel no longer posts.
func (ch *channel) batchRoom(n int) bool {
	if len(ch.batch)+n <= ch.batchMax {
		return true
	}
	ch.flushSends()
	return ch.flushesExpected()
}

// post queues one batch of c, whose last work request is signaled, for flushSends. Each work
// request has one SGE (appendRDMA, advance).
func (ch *channel) post(c *cmdCtx, wrs []ib.SendWR) {
	if !ch.batchRoom(len(wrs)) {
		ch.finish(c, false)
		return
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
		c := ch.ctxs.at(uint32(id & idIndexMask))
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
			ch.countIO(c, ch.pub.lastClock)
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

// beginClose disconnects the channel; run then drains it (every posted work request comes
// back, flushed) and tears it down.
func (ch *channel) beginClose(why string) { ch.close(why, true) }

// abandon closes the channel knowing that no flush completion will come (the device was
// removed, a post or the completion queue failed): the queue pair is closed at once
// (forceRelease) and the contexts released without waiting for their work requests. A
// closing channel becomes abandoned.
func (ch *channel) abandon(why string) { ch.close(why, false) }

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

// countIO adds a command whose response was just posted to its session's counters of its LUN.
// now is the channel's latest clock reading (Unix nanoseconds; 0: none yet), so that no
// clock is read per command.
func (ch *channel) countIO(c *cmdCtx, now int64) {
	io := ch.sess.io.Load()
	if io == nil {
		return
	}
	n, ok := scsi.DecodeLUN(c.cmd.LUN)
	if !ok {
		return
	}
	ctr := io.lookup(n)
	if ctr == nil {
		return
	}
	ctr.commands.Add(1)
	if c.cmd.Status == scsi.StatusCheckCondition {
		ctr.errors.Add(1)
	}
	if c.written > 0 {
		ctr.readBytes.Add(uint64(c.written))
	}
	if n := len(c.cmd.DataOut); n > 0 {
		ctr.writtenBytes.Add(uint64(n))
	}
	// Written only when it moves: the channels of a busy session do not all write one word
	// per command.
	if now != 0 && ctr.lastActive.Load() < now {
		ctr.lastActive.Store(now)
	}
}
