package srp

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
