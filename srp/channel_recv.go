package srp

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// onCompletion dispatches one completion.
func (ch *channel) onCompletion(wc *ib.Completion) {
	switch wc.ID & idKindMask {
	case idRecv:
		ch.onRecv(int32(wc.ID&idIndexMask), wc)
	case idCmd:
		idx := wc.ID & idIndexMask
		if idx >= uint64(len(ch.ctxs)) {
			ch.log.Error("completion for an unknown work request", zap.Uint64("wr_id", wc.ID))
			return
		}
		ch.onSendCompletion(&ch.ctxs[idx], wc)
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
			// Every context is busy, some of them only waiting for their SEND completion
			// (the initiator may send as soon as it sees a response). Park the IU; it
			// starts when a context is freed.
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

func (ch *channel) allocCtx() *cmdCtx {
	if len(ch.free) == 0 {
		return nil
	}
	c := ch.free[len(ch.free)-1]
	ch.free = ch.free[:len(ch.free)-1]
	return c
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

// refusalLogAllowed rate-limits the log lines of refused commands per channel, as
// rejectLogBurst per rejectLogEvery (a broken or hostile initiator may send nothing else), and
// says how many were left out since the last line.
func (ch *channel) refusalLogAllowed() (ok bool, suppressed int) {
	return ch.logs.refused.Allow(time.Duration(ch.nanos()))
}

// parkedIU is an IU that arrived (at nanotime at) while every context was busy.
type parkedIU struct {
	recv, n int32
	at      int64
}
