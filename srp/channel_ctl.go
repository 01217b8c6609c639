package srp

import (
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
	"go.uber.org/zap"
)

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

// maybeCredReq returns owed credits to an idle channel. Credits of requests that ended
// without a response (commands aborted by task management, possibly sent on another channel)
// normally ride on the channel's next SRP_RSP; a channel with nothing outstanding sends no
// response, and an initiator left with one credit (kept for task management) could send no
// command to get one. So when no request of the channel is in progress and credits are owed,
// they go back in an SRP_CRED_REQ. One is outstanding at a time (ib_srp has one send buffer
// for its answer); the next waits for the SRP_CRED_RSP, meanwhile owed credits ride on
// responses again. Credits granted stay within the receive buffers posted less the spare one
// that takes the SRP_CRED_RSP.
func (ch *channel) maybeCredReq() {
	if ch.ledger.pending == 0 || ch.ctxInUse() > 0 || ch.phase != phaseLive ||
		ch.credReqOut || ch.ctlBusy[ctlCredReq] || ch.sqFree < 1 {
		return
	}
	delta := ch.ledger.credit(ch.recvLimit())
	if delta == 0 {
		return
	}
	ch.credReqTag++
	_, b := ch.ctlBuf(ctlCredReq)
	n := iu.CredReq(b).Encode(&iu.CredReqFields{ReqLimDelta: delta, Tag: ch.credReqTag})
	// Counted before the SEND: the initiator may see it before PostSend returns.
	ch.t.stats.credReqs.Add(1)
	ch.credReqOut = true
	if !ch.postCtl(ctlCredReq, n) {
		ch.abandon("post failed")
		return
	}
	ch.log.Debug("returned owed credits with SRP_CRED_REQ", zap.Uint32("delta", delta), zap.Uint64("tag", uint64(ch.credReqTag)))
}
