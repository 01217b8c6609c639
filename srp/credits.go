package srp

import (
	"go.uber.org/zap"

	"github.com/srptarget/srptarget/srp/iu"
)

// creditLedger is the channel's request limit bookkeeping (SRP r16a REQUEST LIMIT DELTA). The
// initiator spends one credit per SRP_CMD and SRP_TSK_MGMT; every SRP_RSP gives back its
// REQUEST LIMIT DELTA. The target answers each request with a delta of 1 plus the credits of
// requests that ended without a response (aborted commands: ib_srp forgets them without
// getting their credit back, LIO's pending delta). The invariant: credits the initiator holds
// never exceed the receive buffers posted, or an IU could arrive with no buffer for it.
type creditLedger struct {
	granted int64  // credits the initiator holds, as far as the target knows
	pending uint32 // owed for requests that ended without a response
}

// consume records a request's arrival; true when the initiator had no credit for it.
func (l *creditLedger) consume() (overdrawn bool) {
	l.granted--
	return l.granted < 0
}

// owe records a request that ends without a response (its receive buffer is posted again).
func (l *creditLedger) owe() { l.pending++ }

// respond returns the REQUEST LIMIT DELTA of the next response and records the grant; ok is
// false when it would leave the initiator more credits than the posted receive buffers. The
// channel passes the receive buffers posted less the spare one kept for an SRP_CRED_RSP.
func (l *creditLedger) respond(posted int) (delta uint32, ok bool) {
	delta = 1 + l.pending
	l.pending = 0
	l.granted += int64(delta)
	return delta, l.granted <= int64(posted)
}

// credit returns the REQUEST LIMIT DELTA of an SRP_CRED_REQ: the owed credits, as many as the
// posted receive buffers (as for respond) can back, and records the grant. Zero means there is
// nothing to send.
func (l *creditLedger) credit(posted int) uint32 {
	room := int64(posted) - l.granted
	if l.pending == 0 || room <= 0 {
		return 0
	}
	d := min(int64(l.pending), room)
	l.pending -= uint32(d)
	l.granted += d
	return uint32(d)
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
