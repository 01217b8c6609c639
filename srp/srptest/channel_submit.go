package srptest

import (
	"context"
	"fmt"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/srp/iu"
)

// Pending is a command in flight, returned by Submit.
type Pending struct {
	c *Channel
	r *request
}

// Tag returns the command's TAG.
func (p *Pending) Tag() iu.Tag { return p.r.tag }

// Done is closed when the response arrived or the request ended otherwise.
func (p *Pending) Done() <-chan struct{} { return p.r.done }

// Wait waits for the response. If ctx ends first it returns ctx's error and the command stays
// in flight (Wait again, or Forget it).
func (p *Pending) Wait(ctx context.Context) (*Response, error) {
	select {
	case <-p.r.done:
		return p.r.rsp, p.r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("srptest: waiting for tag %#x: %w", p.r.tag, ctx.Err())
	}
}

// Forget gives the command up as ib_srp does once the SCSI layer aborted it: its buffers are
// deregistered (a later RDMA from the target fails), its tag is free again, a later response
// counts as an unknown tag, and its credit is not returned until the target does so in some
// REQUEST LIMIT DELTA. Wait then returns ErrForgotten. Forget after completion does nothing.
func (p *Pending) Forget() {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[p.r.tag] == p.r {
		delete(c.pending, p.r.tag)
		c.stats.Forgotten++
		c.finishLocked(p.r, nil, fmt.Errorf("srptest: tag %#x: %w", p.r.tag, ErrForgotten))
	}
}

// Do sends req and waits for its response. It blocks while the channel is out of credits (one
// is always kept for task management) or can_queue commands are in flight. If ctx ends while
// the command is in flight the command is forgotten (see Pending.Forget).
func (c *Channel) Do(ctx context.Context, req *Request) (*Response, error) {
	p, err := c.Submit(ctx, req)
	if err != nil {
		return nil, err
	}
	rsp, err := p.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		p.Forget()
	}
	return rsp, err
}

// Submit sends req as an SRP_CMD and returns without waiting for the response. Like ib_srp
// it waits for a free tag (at most CanQueue commands in flight) and for more than one credit
// (one stays for task management), consumes one credit, registers the data buffers and posts
// the SEND. A zero req.Tag gets ib_srp's tag: LinuxTag(channel index << 16 | slot), slot in
// 0..CanQueue-1, allocated round robin.
func (c *Channel) Submit(ctx context.Context, req *Request) (*Pending, error) {
	if req == nil {
		return nil, fmt.Errorf("srptest: nil request: %w", ErrConfig)
	}
	c.mu.Lock()
	waited := false
	tagIdx := -1
	for {
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return nil, err
		}
		tagIdx = c.freeTagLocked()
		if tagIdx >= 0 && c.credits > 1 && len(c.txFree) > 0 {
			break
		}
		if tagIdx >= 0 && c.credits <= 1 && !waited {
			c.stats.ZeroReqLim++
			waited = true
		}
		w := c.wake
		c.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, fmt.Errorf("srptest: waiting for a free tag and a credit (credits %d): %w", c.Credits(), ctx.Err())
		}
		c.mu.Lock()
	}
	tag := req.Tag
	if tag == 0 {
		tag = LinuxTag(uint64(c.cfg.ChannelIndex)<<16 | uint64(tagIdx))
	}
	if _, dup := c.pending[tag]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("srptest: tag %#x: %w", tag, ErrTagInUse)
	}
	c.tagBusy[tagIdx] = true
	c.tagNext = (tagIdx + 1) % len(c.tagBusy)
	c.credits--
	slot := c.txFree[len(c.txFree)-1]
	c.txFree = c.txFree[:len(c.txFree)-1]
	r := &request{tag: tag, lun: req.lun(), tagIdx: tagIdx, done: make(chan struct{})}
	c.pending[tag] = r
	c.mu.Unlock()

	undo := func(err error) (*Pending, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.txFree = append(c.txFree, slot)
		if c.pending[tag] == r {
			// ib_srp's srp_put_tx_iu gives the credit back when nothing was sent.
			delete(c.pending, tag)
			c.credits++
			c.finishLocked(r, nil, err)
		}
		return nil, err
	}
	b, err := prepareCmd(c.pd, &c.neg, req, tag)
	if err != nil {
		return undo(err)
	}
	n, err := iu.Cmd(c.txSlot(slot)).Encode(&b.fields)
	if err != nil {
		b.release()
		return undo(fmt.Errorf("srptest: SRP_CMD does not fit the %d-byte send buffer: %w: %w", c.txSize, ErrConfig, err))
	}
	c.mu.Lock()
	if c.pending[tag] != r {
		// The channel failed meanwhile.
		c.mu.Unlock()
		b.release()
		return undo(r.errOr(c))
	}
	r.build = b
	r.posted = true
	c.stats.Commands++
	c.mu.Unlock()
	if _, err := c.conn.PostSend([]ib.SendWR{c.sendWR(uint64(slot), c.txMR, uint64(slot*c.txSize), n)}); err != nil {
		return undo(fmt.Errorf("srptest: posting SRP_CMD: %w: %w", ErrTransport, err))
	}
	return &Pending{c: c, r: r}, nil
}

// errOr returns the request's error once done, else the channel's.
func (r *request) errOr(c *Channel) error {
	select {
	case <-r.done:
		if r.err != nil {
			return r.err
		}
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return fmt.Errorf("srptest: tag %#x: %w", r.tag, ErrForgotten)
}

// freeTagLocked returns a free can_queue slot, searching round robin from the one after the
// last allocated (blk-mq does not hand the same tag out again at once either), or -1.
func (c *Channel) freeTagLocked() int {
	n := len(c.tagBusy)
	for i := range n {
		if j := (c.tagNext + i) % n; !c.tagBusy[j] {
			return j
		}
	}
	return -1
}

// TaskMgmt sends SRP_TSK_MGMT as ib_srp's srp_send_tsk_mgmt does and returns the response
// code (byte 3 of the response data): one request at a time per channel; it needs one credit,
// and fails at once with ErrNoCredits without one; TAG = LinuxTag of an incrementing value with
// bit 31 set. A response with less than 4 bytes of response data is an ErrProtocol error
// (ib_srp treats it as a failed function). If ctx ends first the request is forgotten, and a
// late response counts as an unknown tag ("too late").
func (c *Channel) TaskMgmt(ctx context.Context, fn iu.TskMgmtFunc, lun uint16, taskTag iu.Tag) (uint8, error) {
	return c.taskMgmt(ctx, fn, encodeLUN(lun), taskTag)
}

func (c *Channel) taskMgmt(ctx context.Context, fn iu.TskMgmtFunc, lun uint64, taskTag iu.Tag) (uint8, error) {
	c.tmMu.Lock()
	defer c.tmMu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	if c.credits <= 0 {
		c.stats.ZeroReqLim++
		c.mu.Unlock()
		return 0, fmt.Errorf("srptest: %v: %w", fn, ErrNoCredits)
	}
	if len(c.txFree) == 0 {
		c.mu.Unlock()
		return 0, fmt.Errorf("srptest: %v: %w", fn, ErrNoIU)
	}
	c.tmSeq = (c.tmSeq + 1) | tagTskMgmt
	tag := LinuxTag(c.tmSeq)
	if _, dup := c.pending[tag]; dup {
		c.mu.Unlock()
		return 0, fmt.Errorf("srptest: %v tag %#x: %w", fn, tag, ErrTagInUse)
	}
	c.credits--
	slot := c.txFree[len(c.txFree)-1]
	c.txFree = c.txFree[:len(c.txFree)-1]
	r := &request{tag: tag, lun: lun, tagIdx: -1, tm: true, posted: true, done: make(chan struct{})}
	c.pending[tag] = r
	c.stats.TaskMgmts++
	n := iu.TskMgmt(c.txSlot(slot)).Encode(&iu.TskMgmtFields{Tag: tag, LUN: lun, Func: fn, TaskTag: taskTag})
	c.mu.Unlock()
	if _, err := c.conn.PostSend([]ib.SendWR{c.sendWR(uint64(slot), c.txMR, uint64(slot*c.txSize), n)}); err != nil {
		c.mu.Lock()
		c.txFree = append(c.txFree, slot)
		if c.pending[tag] == r {
			delete(c.pending, tag)
			c.credits++
			c.finishLocked(r, nil, err)
		}
		c.mu.Unlock()
		return 0, fmt.Errorf("srptest: posting %v: %w: %w", fn, ErrTransport, err)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		(&Pending{c: c, r: r}).Forget()
		<-r.done
		if r.err == nil {
			break // the response won the race
		}
		return 0, fmt.Errorf("srptest: waiting for %v response: %w", fn, ctx.Err())
	}
	if r.err != nil {
		return 0, r.err
	}
	if len(r.rsp.RespData) < iu.TskMgmtRspDataSize {
		c.mu.Lock()
		c.protoErrorLocked(fmt.Errorf("%v response tag %#x with %d bytes of response data", fn, tag, len(r.rsp.RespData)))
		c.mu.Unlock()
		return 0, fmt.Errorf("srptest: %v response with %d bytes of response data: %w", fn, len(r.rsp.RespData), ErrProtocol)
	}
	return r.rsp.RespData[3], nil
}

// Abort is ib_srp's srp_abort: the command is forgotten first (a response racing with the
// abort counts as an unknown tag), then ABORT TASK goes out with the command's tag on this
// channel. The returned code is the TM response code; ib_srp treats any response as success.
func (c *Channel) Abort(ctx context.Context, p *Pending) (uint8, error) {
	p.Forget()
	return c.taskMgmt(ctx, iu.TskAbortTask, p.r.lun, p.r.tag)
}

// ResetLUN is ib_srp's srp_reset_device: LOGICAL UNIT RESET with task tag SRP_TAG_NO_REQ.
// ib_srp sends it on channel 0 only and counts only response code 0 as success.
func (c *Channel) ResetLUN(ctx context.Context, lun uint16) (uint8, error) {
	return c.TaskMgmt(ctx, iu.TskLUNReset, lun, LUNResetTaskTag)
}

// EncodeCmd is f as an SRP_CMD IU of its own length, for SendRaw.
func EncodeCmd(f *iu.CmdFields) ([]byte, error) {
	n, err := iu.CmdLen(f)
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := iu.Cmd(b).Encode(f); err != nil {
		return nil, err
	}
	return b, nil
}

// SendRaw sends iu as it is in one SEND, for robustness tests (malformed IUs, unknown opcodes,
// IUs the target did not grant room for). Any response is left to NextUnsolicited. The IU
// consumes a credit unless it is an initiator response (opcode 0x40-0x7F, like SRP_CRED_RSP
// and SRP_AER_RSP): SendRaw never waits for a credit, so the count can go negative, as a
// misbehaving initiator's would.
func (c *Channel) SendRaw(msg []byte) error {
	_, err := c.sendRaw(msg, false)
	return err
}

func (c *Channel) sendRaw(msg []byte, wait bool) (<-chan ib.Status, error) {
	if len(msg) == 0 {
		return nil, fmt.Errorf("srptest: empty raw IU: %w", ErrConfig)
	}
	buf := append([]byte(nil), msg...)
	mr, err := c.pd.RegisterMemory(buf, 0)
	if err != nil {
		return nil, fmt.Errorf("srptest: registering raw IU: %w", err)
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		_ = mr.Deregister()
		return nil, err
	}
	c.rawSeq++
	id := wrRaw | c.rawSeq
	c.raw[id] = mr
	var w chan ib.Status
	if wait {
		w = make(chan ib.Status, 1)
		c.sendWait[id] = w
	}
	if msg[0]>>6 != 1 {
		c.credits--
	}
	c.stats.RawIUs++
	c.mu.Unlock()
	if _, err := c.conn.PostSend([]ib.SendWR{c.sendWR(id, mr, 0, len(buf))}); err != nil {
		c.mu.Lock()
		delete(c.raw, id)
		delete(c.sendWait, id)
		if msg[0]>>6 != 1 {
			c.credits++
		}
		c.mu.Unlock()
		_ = mr.Deregister()
		return nil, fmt.Errorf("srptest: posting raw IU: %w: %w", ErrTransport, err)
	}
	return w, nil
}

// Logout sends SRP_I_LOGOUT (which ib_srp never does: it only disconnects), waits for its
// SEND to complete (at most Config.Timeout), then disconnects and releases the channel as
// Close does. It returns the SEND's failure, if any, or Close's error.
func (c *Channel) Logout() error {
	msg := make([]byte, iu.ILogoutSize)
	iu.ILogout(msg).Encode(&iu.ILogoutFields{})
	w, err := c.sendRaw(msg, true)
	if err == nil {
		timer := time.NewTimer(c.cfg.Timeout)
		defer timer.Stop()
		var st ib.Status
		select {
		case st = <-w:
		case <-timer.C:
			err = fmt.Errorf("srptest: SRP_I_LOGOUT SEND not completed after %v: %w", c.cfg.Timeout, ErrTransport)
		case <-c.down:
			// A target may disconnect as soon as it has the SRP_I_LOGOUT: the SEND's
			// completion, polled before the DREQ, decides.
			select {
			case st = <-w:
			default:
				err = c.Err()
			}
		}
		if err == nil && st != ib.StatusSuccess {
			err = fmt.Errorf("srptest: SRP_I_LOGOUT SEND completed with %v: %w", st, ErrTransport)
		}
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close disconnects the channel as ib_srp does (a DREQ, no SRP_I_LOGOUT) and releases
// everything: requests in flight fail with ErrClosed and their buffers are deregistered.
// A second call does nothing.
func (c *Channel) Close() error { return c.shutdown(false) }

// Vanish makes the channel disappear as if the initiator host crashed: no DREQ, the QP and all
// registrations are gone, and the target's next work requests towards it fail after the
// fabric's retry timeout.
func (c *Channel) Vanish() { _ = c.shutdown(true) }

func (c *Channel) shutdown(vanish bool) error {
	c.shutdownMu.Lock()
	defer c.shutdownMu.Unlock()
	if c.isShutdown {
		return nil
	}
	c.isShutdown = true
	close(c.stop)
	<-c.pollDone
	if vanish {
		c.conn.Vanish()
	} else {
		c.shutdownErr = c.conn.Close()
	}
	c.mu.Lock()
	how := "closed"
	if vanish {
		how = "vanished"
	}
	c.failLocked(fmt.Errorf("srptest: channel %s: %w", how, ErrClosed))
	for id, mr := range c.raw {
		delete(c.raw, id)
		_ = mr.Deregister()
	}
	c.mu.Unlock()
	_ = c.rxMR.Deregister()
	_ = c.txMR.Deregister()
	return c.shutdownErr
}
