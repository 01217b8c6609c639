package srp

// dropRecvs forgets the receives queued and not posted on the channel's own queue, when no
// flush completion will come.
func (ch *channel) dropRecvs() {
	if ch.rq.shared() {
		return
	}
	ch.recvPosted -= len(ch.rq.q)
	ch.rq.q = ch.rq.q[:0]
}

// repost queues receive buffer i to be posted again with the pass's others (flushRecvs). A
// buffer of the channel's own counts as posted at once: the credit it backs goes out in a
// response or an SRP_CRED_REQ, and flushSends posts the queued receives before those, so on
// the wire the buffer is always posted before its credit is granted. A closing channel's own
// buffers are not posted again (they would only be flushed); a shared one always goes back to
// the group.
func (ch *channel) repost(i int32) {
	if i < 0 {
		return
	}
	if ch.rq.shared() {
		ch.rqHeld--
		ch.rq.queue(i)
		return
	}
	if ch.closed() {
		return
	}
	ch.rq.queue(i)
	ch.recvPosted++
}

// recvLimit is what the credits the initiator holds may not exceed: the receive buffers it can
// consume, less the one kept for an SRP_CRED_RSP. On its own queue those are the buffers posted
// now. On a shared receive queue every channel of the group may consume all of its buffers:
// the bound is its depth, and when the group's channels together hold more credits than it
// has buffers, an initiator's SEND that finds it empty waits in RNR retry (ib_srp retries for
// ever) until a buffer is posted again, as with the kernel's ib_srpt and SCST's srpt on an SRQ.
func (ch *channel) recvLimit() int {
	if ch.rq.shared() {
		return ch.rq.depth - spareRecvs
	}
	return ch.recvPosted - spareRecvs
}
