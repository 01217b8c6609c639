package srp

import (
	"encoding/binary"
	"fmt"

	"github.com/srptarget/srptarget/scsi"
	"github.com/srptarget/srptarget/srp/iu"
)

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

// tableTotal sums the lengths of an external descriptor table.
func tableTotal(table []byte) uint64 {
	var sum uint64
	for i := 0; i+iu.DirectBufSize <= len(table); i += iu.DirectBufSize {
		sum += uint64(binary.BigEndian.Uint32(table[i+12:]))
	}
	return sum
}
