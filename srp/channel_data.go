package srp

import (
	"encoding/binary"

	"github.com/srptarget/srptarget/srp/iu"
)

// allocBuffers allocates c's buffers, all or none, within the initiator's shares of the
// buffers (Limits.MaxInitiatorBuffer), its session's and its source address's, whatever the
// number of its channels: an initiator that stops taking its responses holds at most that
// until the stall watchdog closes its channels, and the others keep the rest. An initiator
// that holds nothing may take one command's buffers whatever their size, so that no command
// waits for ever.
func (ch *channel) allocBuffers(c *cmdCtx) bool {
	d := c.dataBuf()
	need := ch.pool.blockBytes(d.Len())
	if d.External() {
		need += ch.pool.blockBytes(uint32(d.TableLen() * iu.DirectBufSize))
	}
	if !ch.takeShares(need) {
		return false
	}
	buf, ok := ch.allocBuf(d.Len())
	if !ok {
		ch.giveShares(need)
		return false
	}
	if d.External() {
		tbl, ok := ch.allocBuf(uint32(d.TableLen() * iu.DirectBufSize))
		if !ok {
			ch.freeBuf(buf)
			ch.giveShares(need)
			return false
		}
		c.table = tbl
	}
	c.buf = buf
	ch.bufHeld += need
	return true
}

// takeShares takes n bytes from the session's and the source address's buffer shares, both or
// neither.
func (ch *channel) takeShares(n int64) bool {
	limit := ch.t.lim.MaxInitiatorBuffer
	if !ch.sess.buf.take(n, limit) {
		return false
	}
	if !ch.src.buf.take(n, limit) {
		ch.sess.buf.give(n)
		return false
	}
	return true
}

func (ch *channel) giveShares(n int64) {
	ch.sess.buf.give(n)
	ch.src.buf.give(n)
}

// releaseBuffers gives c's buffers back to the pool.
func (ch *channel) releaseBuffers(c *cmdCtx) {
	n := c.buf.bytes() + c.table.bytes()
	ch.bufHeld -= n
	ch.giveShares(n)
	ch.freeBuf(c.buf)
	if c.table.valid() { // an external descriptor table: rare
		ch.freeBuf(c.table)
	}
	c.buf, c.table = noBuf, noBuf
}

func (ch *channel) popBuf() {
	ch.bufQ.pop()
	ch.noteBufQueue()
}

// noteBufQueue keeps the pool's count of channels waiting for buffers in step with bufQ: a
// channel is counted while commands wait in it (and signalled when buffers are freed).
func (ch *channel) noteBufQueue() {
	switch waiting := !ch.bufQ.empty(); {
	case waiting && !ch.bufWaiting:
		ch.bufWaiting = true
		if ch.pool.waiting.Add(1) == 1 {
			// Idle channels may sit on responses whose buffers they have not reaped
			// (sendsAwaited): wake them to give the buffers back.
			ch.pool.wakeAll()
		}
	case !waiting && ch.bufWaiting:
		ch.bufWaiting = false
		ch.pool.waiting.Add(-1)
	}
}

// tableTotal sums the lengths of an external descriptor table.
func tableTotal(table []byte) uint64 {
	var sum uint64
	for i := 0; i+iu.DirectBufSize <= len(table); i += iu.DirectBufSize {
		sum += uint64(binary.BigEndian.Uint32(table[i+12:]))
	}
	return sum
}

// allocBuf allocates a data buffer, through the group's cache when the channel has one.
func (ch *channel) allocBuf(n uint32) (poolBuf, bool) {
	if ch.dev != nil && ch.dev.cache != nil {
		return ch.dev.cache.alloc(n)
	}
	return ch.pool.alloc(n)
}

// freeBuf gives a data buffer back, through the group's cache when the channel has one.
func (ch *channel) freeBuf(b poolBuf) {
	if ch.dev != nil && ch.dev.cache != nil {
		ch.dev.cache.release(b)
		return
	}
	ch.pool.release(b)
}
