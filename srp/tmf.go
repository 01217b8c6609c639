package srp

import (
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

// Which task management functions exist, and their codes. Sourced: SRP defines ABORT TASK
// (01h), ABORT TASK SET (02h), CLEAR TASK SET (04h), LOGICAL UNIT RESET (08h) and CLEAR ACA
// (40h), and for "all other values" the task manager answers TASK MANAGEMENT FUNCTION NOT
// SUPPORTED (SRP revision 4 table 16 as quoted on the T10 reflector, "SRP task management
// function codes", May 2001; the same five codes in r16a-based include/scsi/srp.h, LIO and
// SCST srpt, illumos srpt and QEMU's srp.h; LIO answers any other code with 04h). The response
// codes 00h, 02h, 04h and 05h are SRP r16a table 24 (cited by SCST's srpt; illumos and QEMU
// define the same four).
//
// Not sourced, so not implemented: I_T NEXUS RESET and QUERY TASK (and QUERY TASK SET, QUERY
// ASYNCHRONOUS EVENT). SAM-5 defines them, but each transport assigns their codes, and the
// SRP-2 drafts (T10 srp2r00a and later), which would assign SRP's, could not be read: the
// search tools found no copy, and the Linux header, updated for SRP-2's immediate data, adds
// no task management code. 10h and 80h (with responses 08h FUNCTION SUCCEEDED and 09h INVALID
// LOGICAL UNIT NUMBER) are SAS SSP's values; they cannot be carried over, since the transports
// already disagree on these bits (FCP-2 uses 10h for LOGICAL UNIT RESET, SPI and SRP 08h).
// Performing a guessed I_T NEXUS RESET on a code SRP-2 may define otherwise would abort every
// command of the nexus; answering NOT SUPPORTED is what SRP prescribes for codes it does not
// define. ib_srp never sends these functions.

// tmfRetry is how often a task management function re-issues its abort to the logical unit
// while it waits for a claimed command: a command that was handed to a worker just before the
// claim can enter the logical unit after the first abort looked for it.
const tmfRetry = 20 * time.Millisecond

// runNextTMF starts the oldest queued function unless one runs.
func (ch *channel) runNextTMF() {
	if ch.tmf.busy || ch.tmf.queue.empty() {
		return
	}
	c := ch.tmf.queue.pop()
	ch.tmf.busy = true
	if ch.g.script {
		ch.g.scriptTMF = append(ch.g.scriptTMF, c)
		return
	}
	go ch.tmfRun(c)
}

// tmfRun performs one task management function and gives it back to the group.
func (ch *channel) tmfRun(c *cmdCtx) {
	if !ch.closing.Load() {
		c.tm.code = ch.runTMF(&c.tm)
		ch.log.Info("task management function done", zap.Stringer("function", c.tm.fn),
			zap.Uint64("lun", c.tm.lun), zap.Uint64("task_tag", uint64(c.tm.taskTag)),
			zap.Uint8("response", uint8(c.tm.code)))
	}
	ch.g.handBack(c)
}

// runTMF performs one task management function and returns the SRP response code. It returns
// only when every command it aborted has stopped and released its buffers, so that the
// response, which makes the initiator invalidate those commands' memory, cannot be followed by
// RDMA to it.
//
// Commands are aborted in two places: in the transport (fetching data-out, waiting for a
// buffer or a send-queue slot, queued for a worker, or finished but not yet answered: claimed
// here with one compare-and-swap on their context, they end without a response), and in the
// logical unit (scsi.LUNMap's functions, which return when the aborted commands have left the
// logical unit). Response codes follow LIO (drivers/infiniband/ulp/srpt/ib_srpt.c,
// tcm_to_srp_tsk_mgmt_status): FUNCTION COMPLETE → 0x00, rejected → 0x04, anything else
// (unknown LUN) → 0x05. Codes SRP r16a does not define are
// answered 0x04 without touching any command (see the comment at the top of this file).
func (ch *channel) runTMF(tm *tmReq) iu.TskMgmtRspCode {
	claimed, code := ch.beginTMF(tm)
	waitClaimed(claimed)
	return code
}

// beginTMF claims the transport's commands tm covers and performs it in the logical unit; it
// returns the claimed commands, which the function must wait for (waitClaimed) before its
// response, and the response code.
func (ch *channel) beginTMF(tm *tmReq) (claimed []claimedCmd, code iu.TskMgmtRspCode) {
	s := ch.sess
	n := s.nexus
	m := s.lunMap.Load()
	lun := tm.lun
	switch tm.fn {
	case iu.TskAbortTask:
		tag := uint64(tm.taskTag)
		claimed = claim(s.channelList(), tm.seq, func(c *cmdCtx) bool { return c.tag.Load() == tag && c.lun.Load() == lun })
		r := m.AbortTask(n, lun, tag)
		if len(claimed) > 0 {
			return claimed, iu.TskMgmtSuccess
		}
		return nil, tmfCode(r)
	case iu.TskAbortTaskSet:
		claimed = claim(s.channelList(), tm.seq, func(c *cmdCtx) bool { return c.lun.Load() == lun })
		return claimed, tmfCode(m.AbortTaskSet(n, lun))
	case iu.TskClearTaskSet:
		// Commands of other nexuses in their transport phase are left alone: the logical
		// unit tells those nexuses with a unit attention only about commands it held. From a
		// write-protected mapping the logical unit leaves other nexuses' commands alone too
		// (scsi.LUNMap.ClearTaskSet acts as ABORT TASK SET).
		claimed = claim(s.channelList(), tm.seq, func(c *cmdCtx) bool { return c.lun.Load() == lun })
		return claimed, tmfCode(m.ClearTaskSet(n, lun))
	case iu.TskLUNReset:
		// A LUN reset covers the logical unit's commands from every channel and every
		// nexus (ib_srp sends it on channel 0 only: drivers/infiniband/ulp/srp/ib_srp.c,
		// srp_reset_device); other nexuses may map the logical unit at another LUN, so
		// commands are matched by logical unit. From a
		// write-protected mapping it covers only this nexus's channels, as in the logical
		// unit (scsi.LUNMap.LogicalUnitReset): an initiator that may not write may not make
		// other initiators' commands fail either.
		mp := m.Lookup(lun)
		if mp == nil {
			return nil, tmfCode(m.LogicalUnitReset(n, lun))
		}
		lu := mp.LU
		var chs []*channel
		if mp.WriteProtected() {
			chs = s.channelList()
		} else {
			for _, other := range ch.t.reg.sessionList() {
				chs = append(chs, other.channelList()...)
			}
		}
		claimed = claim(chs, tm.seq, func(c *cmdCtx) bool { return c.lu.Load() == lu })
		return claimed, tmfCode(m.LogicalUnitReset(n, lun))
	case iu.TskClearACA:
		// NORMACA is 0 in the INQUIRY data: ACA is never established.
		return nil, iu.TskMgmtFuncNotSupp
	}
	return nil, iu.TskMgmtFuncNotSupp
}

// tmfCode maps a SAM service response to the SRP response code (LIO's mapping).
func tmfCode(r scsi.TMFResponse) iu.TskMgmtRspCode {
	switch r {
	case scsi.TMFComplete, scsi.TMFSucceeded:
		return iu.TskMgmtSuccess
	case scsi.TMFRejected:
		return iu.TskMgmtFuncNotSupp
	}
	return iu.TskMgmtFailed
}

// claim marks every in-progress command of chs that arrived before the task management
// function (arrival number before) and that match selects as aborted by task management,
// wakes its channel so that commands waiting in a list end at once, and returns them. A
// claimed command gets no response.
func claim(chs []*channel, before uint64, match func(*cmdCtx) bool) []claimedCmd {
	var claimed []claimedCmd
	for _, ch := range chs {
		n := 0
		ch.ctxs.forPublished(func(c *cmdCtx) {
			v := c.sg.Load()
			if sgState(v) != ctxCmd || c.seq.Load() >= before || !match(c) {
				return
			}
			// The generation in v makes the swap fail if the context moved on to another
			// command after match looked at it.
			lun, tag := c.lun.Load(), c.tag.Load()
			if nv := sgNext(v, ctxAbortedTMF); c.sg.CompareAndSwap(v, nv) {
				claimed = append(claimed, claimedCmd{c: c, sg: nv, lun: lun, tag: tag})
				n++
			}
		})
		if n > 0 {
			ch.abortScan.Store(true)
			ch.signal()
		}
	}
	return claimed
}

// claimedCmd is a command claimed by task management, with its LUN and tag as they were.
type claimedCmd struct {
	c        *cmdCtx
	sg       uint64 // the context's generation and state right after the claim
	lun, tag uint64
}

// released reports whether the channel has released the claimed command: its context left
// the state the claim put it in (finish frees it; only a new generation can follow).
func (cl *claimedCmd) released() bool { return cl.c.sg.Load() != cl.sg }

// waitClaimed waits until every claimed command has been released by its channel. While it
// waits it re-issues ABORT TASK to the logical unit for each command still there (see
// tmfRetry): one handed to a worker just before the claim can enter the logical unit after the
// first abort looked for it. Only that command is aborted again, never the whole task set.
//
// Release is judged by the context's state word, not by the abortDone signal alone: while this
// waits for one command, another claimed command's context may be released and already reused
// for a new IU, whose start discards the signal as stale. The signal only wakes the wait early.
//
// The wait is bounded by Limits.RDMATimeout: a claimed command whose RDMA is stuck behind a
// response its initiator never takes (no receive buffer posted) would otherwise hold this
// function, and every command behind it on the requesting channel, as long as that other
// initiator likes. When the time is up, the channels that still hold claimed commands are
// closed: their queue pairs flush and release the commands, and the function completes. The
// stuck channel is closed first, as SCST's srpt aborts commands whose RDMA does not complete.
func waitClaimed(claimed []claimedCmd) {
	if len(claimed) == 0 {
		return
	}
	timeout := claimed[0].c.ch.t.lim.RDMATimeout
	deadline := time.Now().Add(timeout)
	closed := false
	t := time.NewTimer(tmfRetry)
	defer t.Stop()
	for i := range claimed {
		cl := &claimed[i]
		for !cl.released() {
			select {
			case <-cl.c.abortDone:
			case <-t.C:
				// The tag stays the aborted command's until the initiator gets this
				// function's response, so re-aborting it cannot hit another command.
				s := cl.c.ch.sess
				if m := s.lunMap.Load(); m != nil {
					m.AbortTask(s.nexus, cl.lun, cl.tag)
				}
				if !closed && !time.Now().Before(deadline) {
					closed = true
					closeHolders(claimed[i:], timeout)
				}
				t.Reset(tmfRetry)
			}
		}
	}
}

// closeHolders closes the channels of the claimed commands not yet released, once each.
func closeHolders(claimed []claimedCmd, waited time.Duration) {
	var done []*channel
	for i := range claimed {
		cl := &claimed[i]
		ch := cl.c.ch
		if cl.released() || slices.Contains(done, ch) {
			continue
		}
		done = append(done, ch)
		ch.t.stats.rdmaStalls.Add(1)
		ch.log.Warn("task management waited rdma_timeout for a command of this channel to stop: closing the channel",
			zap.Duration("rdma_timeout", waited), zap.Uint64("tag", cl.tag), zap.Uint64("lun", cl.lun),
			zap.String("hint", "the initiator stopped taking responses (no receive buffers posted, or hung)"))
		ch.requestStop(stopHard, "task management timed out waiting for its commands", iu.TLogoutNoReason)
	}
}
