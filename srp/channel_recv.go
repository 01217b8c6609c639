package srp

import (
	"fmt"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
	"go.uber.org/zap"
)

// onCompletion dispatches one completion.
func (ch *channel) onCompletion(wc *ib.Completion) {
	switch wc.ID & idKindMask {
	case idRecv:
		ch.onRecv(int32(wc.ID&idIndexMask), wc)
	case idCmd:
		idx := wc.ID & idIndexMask
		if !ch.ctxs.made(idx) {
			ch.log.Error("completion for an unknown work request", zap.Uint64("wr_id", wc.ID))
			return
		}
		ch.onSendCompletion(ch.ctxs.at(uint32(idx)), wc)
	case idCtl:
		slot := wc.ID & idIndexMask
		if slot >= ctlSendSlots {
			ch.log.Error("completion for an unknown work request", zap.Uint64("wr_id", wc.ID))
			return
		}
		ch.sendBatches--
		ch.sqFree++
		ch.ctlBusy[slot] = false
		if wc.Status != ib.StatusSuccess && wc.Status != ib.StatusWRFlushError {
			what := "SRP_T_LOGOUT SEND"
			if slot == ctlCredReq {
				what = "SRP_CRED_REQ SEND"
			}
			ch.rdmaError(what, nil, wc.Status)
		}
		ch.serviceSQ()
	default:
		ch.log.Error("completion for an unknown work request", zap.Uint64("wr_id", wc.ID))
	}
}

// onRecv handles a receive completion: an IU arrived in buffer i (or the receive was flushed).
func (ch *channel) onRecv(i int32, wc *ib.Completion) {
	if !ch.rq.shared() {
		ch.recvPosted--
	}
	if i < 0 || int(i) >= ch.rq.depth {
		ch.log.Error("receive completion for an unknown buffer", zap.Uint64("wr_id", wc.ID))
		return
	}
	if wc.Status != ib.StatusSuccess {
		ch.dropIU(i)
		if wc.Status == ib.StatusWRFlushError && ch.closed() {
			return
		}
		ch.t.stats.rdmaErrors.Add(1)
		hint := ""
		if wc.Status == ib.StatusLocalLengthError {
			hint = fmt.Sprintf("the initiator sent an IU longer than max_it_iu_len %d: it must not exceed the length granted at login", ch.maxIT)
		}
		ch.log.Error("receive failed", zap.Stringer("status", wc.Status), zap.String("hint", hint))
		ch.beginClose("receive failed: " + wc.Status.String())
		return
	}
	if ch.closed() {
		ch.dropIU(i)
		return
	}
	if ch.rq.shared() && ch.rqHeld > ch.credits+spareRecvs {
		// More IUs than its credits and the SRP_CRED_RSP: on a shared receive queue they
		// take the buffers of the group's other channels.
		ch.dropIU(i)
		ch.protocolError(iu.TLogoutNoReason, fmt.Sprintf("%d IUs held, more than the %d credits granted", ch.rqHeld, ch.credits))
		return
	}
	ch.handleIU(i, int(wc.ByteLen))
}

// dropIU gives back receive buffer i without handling its IU: a shared one goes back to the
// group, one of the channel's own stays with the closing queue pair.
func (ch *channel) dropIU(i int32) {
	if ch.rq.shared() {
		ch.repost(i)
	}
}

// handleIU dispatches the IU in receive buffer i.
func (ch *channel) handleIU(i int32, n int) {
	if n == 0 || n > int(ch.maxIT) {
		ch.dropIU(i)
		ch.protocolError(iu.TLogoutInvalidIULength, fmt.Sprintf("IU of %d bytes", n))
		return
	}
	ch.idle.iusIn++
	b := ch.recvBuf(i)[:n]
	switch op := iu.Opcode(b[0]); op {
	case iu.OpCmd, iu.OpTskMgmt:
		if ch.ledger.consume() && !ch.creditWarn {
			ch.creditWarn = true
			ch.log.Warn("initiator sent more IUs than it had credits (REQUEST LIMIT exceeded)")
		}
		c := ch.allocCtx()
		if c == nil {
			c = ch.allocNewCtx()
		}
		if c == nil {
			// Every context is busy, some of them only waiting for their SEND completion
			// (the initiator may send as soon as it sees a response). Park the IU; it
			// starts when a context is freed. Room for every receive buffer of its own is
			// made the first time: few channels ever park one.
			if ch.waitRecv == nil {
				ch.waitRecv = make([]parkedIU, 0, ch.credits+spareRecvs)
			}
			ch.waitRecv = append(ch.waitRecv, parkedIU{i, int32(n), ch.pollNow})
			return
		}
		ch.startIU(c, i, n, ch.pollNow)
	case iu.OpILogout:
		ch.log.Info("initiator logged out (SRP_I_LOGOUT)")
		ch.repost(i)
		ch.beginClose("SRP_I_LOGOUT")
	case iu.OpCredRsp:
		ch.onCredRsp(b)
		ch.repost(i)
	case iu.OpAerRsp:
		// The target never sends SRP_AER_REQ; an answer to one is ignored (LIO and SCST only
		// log such responses).
		ch.log.Debug("ignoring unsolicited initiator response", zap.Stringer("opcode", op))
		ch.repost(i)
	default:
		ch.dropIU(i)
		ch.protocolError(iu.TLogoutInvalidIUType, fmt.Sprintf("invalid IU type %v", op))
	}
}

// onCredRsp handles the initiator's SRP_CRED_RSP (it takes no credit).
func (ch *channel) onCredRsp(b []byte) {
	if err := iu.CredRsp(b).Validate(); err != nil {
		ch.log.Warn("malformed SRP_CRED_RSP ignored", zap.Error(err))
		return
	}
	tag := iu.CredRsp(b).Tag()
	if !ch.credReqOut || tag != ch.credReqTag {
		ch.log.Warn("SRP_CRED_RSP answers no outstanding SRP_CRED_REQ: ignored",
			zap.Uint64("tag", uint64(tag)), zap.Bool("outstanding", ch.credReqOut), zap.Uint64("expected", uint64(ch.credReqTag)))
		return
	}
	ch.credReqOut = false
}

// allocCtx takes a free context, nil when every context made is busy (allocNewCtx makes more).
// It stays small enough to be inlined on the data path.
func (ch *channel) allocCtx() *cmdCtx {
	if len(ch.free) == 0 {
		return nil
	}
	c := ch.free[len(ch.free)-1]
	ch.free = ch.free[:len(ch.free)-1]
	return c
}

// allocNewCtx makes the next chunk of contexts and takes one of them, nil when all nctx are
// busy: allocCtx once every context made is busy, apart so that allocCtx is inlined.
func (ch *channel) allocNewCtx() *cmdCtx {
	if !ch.growCtxs() {
		return nil
	}
	return ch.allocCtx()
}

// startIU starts an SRP_CMD or SRP_TSK_MGMT held in receive buffer i with context c; it
// arrived at nanotime at.
func (ch *channel) startIU(c *cmdCtx, i int32, n int, at int64) {
	c.recv = i
	c.arrived = at
	c.real, c.xportFail = false, false
	c.buf, c.table = noBuf, noBuf
	c.batchWRs = 0
	c.lunMap, c.mapping = nil, nil
	c.discardAbortSignal()
	b := ch.recvBuf(i)[:n]
	if n < 16 {
		// Not even a tag to answer with.
		ch.finish(c, false)
		ch.protocolError(iu.TLogoutInvalidIULength, fmt.Sprintf("%v of %d bytes", iu.Opcode(b[0]), n))
		return
	}
	if iu.Opcode(b[0]) == iu.OpTskMgmt {
		ch.startTMF(c, b)
		return
	}
	ch.startCmd(c, b)
}

// startCmd parses an SRP_CMD and starts moving its data.
func (ch *channel) startCmd(c *cmdCtx, b []byte) {
	ch.t.stats.commands.Add(1)
	req := iu.Cmd(b)
	tag := req.Tag()
	var lun uint64
	if len(b) >= iu.CmdMinSize {
		lun = req.LUN()
	}
	c.cmd.Reset()
	c.cmd.Nexus = ch.sess.nexus
	c.cmd.Tag = uint64(tag)
	c.cmd.LUN = lun
	c.cmd.DataIn, c.cmd.DataOut = nil, nil
	m, mp, ok := ch.holdLU(lun)
	var lu *scsi.LogicalUnit
	if mp != nil {
		lu = mp.LU
	}
	c.lunMap, c.mapping = m, mp
	if ok {
		c.luHold = lu
	}
	c.activate(ctxCmd, ch.t.seq.Add(1), tag, lun, lu)
	if lu != nil {
		c.statLU = lu
		c.class = scsi.OpOther
		if len(b) >= iu.CmdMinSize {
			// The operation code only: the CDB's additional length is not validated yet.
			c.class = scsi.ClassOf(b[iu.CmdCDBOffset : iu.CmdCDBOffset+1])
		}
	}

	if ch.phase == phaseDraining {
		ch.answerTransport(c, scsi.StatusBusy, scsi.ReasonNone, "")
		return
	}
	// In place: a DataBuf is large enough that copies of it show in the instructions per
	// command.
	if err := req.ParseDataBuffers(ch.immOff, &c.out, &c.in); err != nil {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU, err.Error())
		return
	}
	out, in := &c.out, &c.in
	if out.Present() && in.Present() {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			"bidirectional commands are not supported")
		return
	}
	attr, ok := scsiAttr(req.TaskAttr())
	if !ok {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("reserved task attribute %d", req.TaskAttr()))
		return
	}
	d := c.dataBuf()
	if d.Len() > ch.t.lim.MaxTransferLen {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("transfer of %d bytes exceeds max_transfer_len %d", d.Len(), ch.t.lim.MaxTransferLen))
		return
	}
	if d.TableLen() > ch.maxDesc {
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("%d descriptors exceed the limit of %d", d.TableLen(), ch.maxDesc))
		return
	}
	c.cmd.Attr = attr
	c.cmd.CDB = req.CDB()
	c.real = true
	ch.commands++
	switch {
	case out.Format() == iu.DescImm:
		c.cmd.DataOut = out.ImmediateData()
		ch.t.stats.bytesOut.Add(uint64(len(c.cmd.DataOut)))
		ch.dispatch(c)
	case d.Len() == 0:
		ch.dispatch(c)
	default:
		ch.getBuffers(c)
	}
}

// holdLU looks lun up in the session's LUN map and holds the logical unit it names, so that a
// reload that removes or replaces the unit closes its backstore only after this command
// (scsi.LogicalUnit.Retire). A unit that is retiring is no longer in the session's current map
// (SetAuthorizer publishes the new maps before the daemon retires the old units): the lookup
// is made again in that map. Only a map that still hands out a retiring unit (a login that
// raced the reload) gives it without a hold; the command then fails on the closed backstore with
// LOGICAL UNIT COMMUNICATION FAILURE.
func (ch *channel) holdLU(lun uint64) (m *scsi.LUNMap, mp *scsi.Mapping, ok bool) {
	var tried *scsi.LUNMap
	for {
		m = ch.sess.lunMap.Load()
		mp = m.Lookup(lun)
		if mp == nil {
			return m, nil, false
		}
		if mp.LU.Hold() {
			return m, mp, true
		}
		if m == tried {
			return m, mp, false
		}
		tried = m
	}
}

// refusalLogAllowed rate-limits the log lines of refused commands per channel, as
// rejectLogBurst per rejectLogEvery (a broken or hostile initiator may send nothing else), and
// says how many were left out since the last line.
func (ch *channel) refusalLogAllowed() (ok bool, suppressed int) {
	return ch.logs.refused.Allow(time.Duration(ch.nanos()))
}

// answerTransport answers a command without running it: BUSY, or CHECK CONDITION with reason.
func (ch *channel) answerTransport(c *cmdCtx, status scsi.Status, reason scsi.Reason, why string) {
	c.xportFail = true
	c.out, c.in = iu.DataBuf{}, iu.DataBuf{}
	c.cmd.Status = status
	c.cmd.SenseLength = 0
	if reason != scsi.ReasonNone {
		c.cmd.SenseLength = scsi.BuildSense(c.cmd.Sense[:], false, reason, scsi.SenseInfo{})
		ch.t.stats.transportErrors.Add(1)
		if ok, suppressed := ch.refusalLogAllowed(); ok {
			fields := []zap.Field{zap.Uint64("tag", c.tag.Load()), zap.Stringer("reason", reason), zap.String("why", why)}
			if suppressed > 0 {
				fields = append(fields, zap.Int("similar_lines_suppressed", suppressed))
			}
			ch.log.Warn("SRP_CMD refused", fields...)
		}
	}
	c.setStage(stageRespond)
	ch.newSQWork(c)
}

// protocolError closes the channel after an initiator violated the protocol.
func (ch *channel) protocolError(reason iu.TLogoutReason, what string) {
	ch.t.stats.protocolErrors.Add(1)
	ch.log.Warn("protocol violation: logging the initiator out and closing the channel",
		zap.String("what", what), zap.Stringer("t_logout_reason", reason))
	ch.sendTLogout(reason)
	ch.beginClose("protocol violation: " + what)
}

// getBuffers gets the data buffer (and the scratch buffer of an external table), waiting in
// the channel's FIFO when the pool is exhausted.
func (ch *channel) getBuffers(c *cmdCtx) {
	c.setStage(stageNeedBuf)
	if ch.bufQ.empty() && ch.allocBuffers(c) {
		ch.startData(c)
		return
	}
	ch.t.stats.bufferWaits.Add(1)
	c.waitSince = ch.nanos()
	ch.bufQ.push(c)
	ch.noteBufQueue()
	ch.armTimer(ch.now().Add(ch.t.lim.BufferWait))
	// A buffer freed between the failed attempt and waiting.Add went unnoticed: retry once.
	ch.retryBufWaiters()
}

// startData moves a command that has its buffers on to its first data stage.
func (ch *channel) startData(c *cmdCtx) {
	d := c.dataBuf()
	switch {
	case d.External():
		// The rest of the descriptors are in initiator memory: fetch them first, for
		// data-out to read the data, for data-in to know where to write it.
		c.setStage(stageTableRead)
		ch.newSQWork(c)
	case c.in.Present():
		c.cmd.DataIn = ch.pool.bytes(c.buf)
		ch.dispatch(c)
	default:
		c.setStage(stageDataRead)
		ch.newSQWork(c)
	}
}

// onTableRead checks a fetched external descriptor table and fetches the data.
func (ch *channel) onTableRead(c *cmdCtx) {
	if c.state() != ctxCmd || ch.closed() {
		ch.finishAborted(c)
		return
	}
	table := ch.pool.bytes(c.table)
	d := c.dataBuf()
	if sum := tableTotal(table); sum != uint64(d.Len()) {
		ch.releaseBuffers(c)
		ch.uncount(c)
		ch.answerTransport(c, scsi.StatusCheckCondition, scsi.ReasonInvalidFieldInCommandIU,
			fmt.Sprintf("external descriptor table adds up to %d bytes, TOTAL LENGTH is %d", sum, d.Len()))
		return
	}
	if c.in.Present() {
		c.cmd.DataIn = ch.pool.bytes(c.buf)
		ch.dispatch(c)
		return
	}
	c.setStage(stageDataRead)
	ch.newSQWork(c)
}

// retryBufWaiters gives freed buffers to waiting commands, in order.
//
// A command leaves the wait list only once its buffers are allocated: popping the last waiter
// withdraws the channel from the pool's waiting count, and a buffer another channel freed
// after a failed attempt then would signal no one, leaving the command to sleep until
// BufferWait answers it BUSY.
func (ch *channel) retryBufWaiters() {
	for c := ch.bufQ.front(); c != nil; c = ch.bufQ.front() {
		if c.state() != ctxCmd {
			ch.popBuf()
			ch.finishAborted(c)
			continue
		}
		if !ch.allocBuffers(c) {
			return
		}
		ch.popBuf()
		ch.startData(c)
	}
}

// dispatch hands c to a worker of the group (or runs it here: see below). While a task management function of this channel is in
// progress, commands that arrived after it wait: they must not be caught by it in the logical
// unit (the initiator sent them later, on the same channel).
func (ch *channel) dispatch(c *cmdCtx) {
	if ch.tmf.active > 0 {
		c.setStage(stageWaitTMF)
		ch.tmfWaitQ.push(c)
		return
	}
	c.setStage(stageExec)
	if mp := c.mapping; mp == nil || mp.LU.NonBlockingFor(c.cmd.CDB) {
		// RAM and null logical units never wait for I/O: running the command here saves two
		// goroutine hand-offs. A command can still wait in the logical unit (for an older
		// ORDERED command, or the LBA range of a COMPARE AND WRITE), but only for commands
		// already executing on other goroutines, which finish without this one.
		if c.state() == ctxCmd && !ch.closed() {
			if mp != nil {
				c.lunMap.ExecuteMapped(mp, &c.cmd)
			} else {
				c.lunMap.Execute(&c.cmd)
			}
		}
		ch.executed(c)
		return
	}
	if ch.g.io.start(c) {
		return // on the group's io_uring, or done
	}
	ch.handedOff++
	ch.g.execute(c)
}

// executed moves on a command that has run in its logical unit, or a task management
// function that has run: to its response, or to its end without one (aborted).
func (ch *channel) executed(c *cmdCtx) {
	if c.stage == stageTMF {
		ch.tmf.active--
	}
	if ch.closed() {
		ch.finish(c, false)
		return
	}
	if c.stage == stageTMF {
		c.setStage(stageRespond)
		ch.newSQWork(c)
		ch.releaseTMFWaiters()
		return
	}
	if c.cmd.Aborted() {
		c.transition(ctxCmd, ctxAbortedLocal)
	}
	if c.state() != ctxCmd {
		ch.finishAborted(c)
		return
	}
	c.setStage(stageRespond)
	ch.newSQWork(c)
}

// onDone takes back a context from a worker or a task management goroutine.
func (ch *channel) onDone(c *cmdCtx) {
	ch.handedOff--
	tmf := c.stage == stageTMF
	ch.executed(c)
	if tmf {
		ch.tmf.busy = false
		ch.runNextTMF()
	}
}

// scanAborted finds commands claimed by task management while they waited in a queue and ends
// them.
func (ch *channel) scanAborted() {
	notCmd := func(c *cmdCtx) bool { return c.state() != ctxCmd }
	ch.bufQ.removeIf(notCmd, ch.finishAborted)
	ch.noteBufQueue()
	// A command waiting to post its response (ctxResponded comes only after) or its RDMA:
	// claimed by task management, or aborted by the logical unit.
	ch.sqQ.removeIf(func(c *cmdCtx) bool {
		st := c.state()
		return st == ctxAbortedTMF || st == ctxAbortedLocal
	}, ch.finishAborted)
	ch.tmfWaitQ.removeIf(notCmd, ch.finishAborted)
	ch.serviceSQ()
}

// releaseTMFWaiters dispatches the commands held while task management ran.
func (ch *channel) releaseTMFWaiters() {
	for !ch.tmfWaitQ.empty() && ch.tmf.active == 0 {
		c := ch.tmfWaitQ.pop()
		if c.state() != ctxCmd {
			ch.finishAborted(c)
			continue
		}
		ch.dispatch(c)
	}
}

// startTMF queues an SRP_TSK_MGMT for the task management goroutine.
func (ch *channel) startTMF(c *cmdCtx, b []byte) {
	ch.t.stats.taskMgmt.Add(1)
	req := iu.TskMgmt(b)
	tag := iu.Tag(0)
	if len(b) >= 16 {
		tag = req.Tag()
	}
	seq := ch.t.seq.Add(1)
	c.activate(ctxTMF, seq, tag, 0, nil)
	c.tm = tmReq{seq: seq}
	if err := req.Validate(); err != nil {
		ch.t.stats.taskMgmtByFunc[len(TaskMgmtFuncs)].Add(1)
		ch.log.Warn("malformed SRP_TSK_MGMT", zap.Uint64("tag", uint64(tag)), zap.Error(err))
		c.tm.code = iu.TskMgmtReqInvalid
		c.setStage(stageRespond)
		ch.newSQWork(c)
		return
	}
	c.tm.fn, c.tm.lun, c.tm.taskTag = req.Func(), req.LUN(), req.TaskTag()
	ch.t.stats.taskMgmtByFunc[taskMgmtIndex(c.tm.fn)].Add(1)
	c.setStage(stageTMF)
	ch.handedOff++
	ch.tmf.active++
	ch.tmf.queue.push(c)
	ch.runNextTMF()
}
