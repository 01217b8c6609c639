package srptest

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// Work request IDs: send buffers are numbered 0..ntx-1; raw IUs and receives are marked.
const (
	wrRaw  = uint64(1) << 62
	wrRecv = uint64(1) << 63
)

// maxProtocolErrors bounds the list ProtocolErrors keeps (the count goes on).
const maxProtocolErrors = 256

// maxUnsolicited bounds the queue NextUnsolicited reads (older IUs are dropped and counted).
const maxUnsolicited = 4096

// Stats are the channel's counters.
type Stats struct {
	// Credits is ib_srp's req_lim: credits the initiator holds now. Raw IUs can make it
	// negative.
	Credits int64
	// ZeroReqLim counts commands that had to wait because only the task management credit
	// was left, and task management requests refused for lack of credit (ib_srp's
	// zero_req_lim).
	ZeroReqLim uint64
	// Commands, TaskMgmts and RawIUs count IUs sent.
	Commands, TaskMgmts, RawIUs uint64
	// Responses counts SRP_RSP received; UnknownTags those whose tag matched no request in
	// flight (ib_srp: "Null scmnd for RSP", or a task management response "too late").
	Responses, UnknownTags uint64
	// CredReqs, AerReqs and TLogouts count target requests received.
	CredReqs, AerReqs, TLogouts uint64
	// Forgotten counts requests given up before their response (context ended, Abort).
	Forgotten uint64
	// ProtocolErrors counts violations of SRP by the target (see Channel.ProtocolErrors).
	ProtocolErrors uint64
	// UnsolicitedDropped counts IUs dropped because nobody read NextUnsolicited.
	UnsolicitedDropped uint64
}

// Channel is one logged-in RDMA channel. Its methods are safe for concurrent use.
type Channel struct {
	cfg         Config
	node        *memfabric.Node
	mconn       *memfabric.Conn
	conn        fabricConn
	pd          ib.ProtectionDomain
	loginReq    []byte
	loginRspIU  []byte
	loginRsp    iu.LoginRspFields
	neg         negotiated
	canQueue    int
	rxSize      int
	rxBuf       []byte
	rxMR        ib.MR
	txSize      int
	txBuf       []byte
	txMR        ib.MR
	stop        chan struct{}
	pollDone    chan struct{}
	tmMu        sync.Mutex // one task management request at a time, as ib_srp
	shutdownMu  sync.Mutex
	shutdownErr error
	isShutdown  bool

	mu        sync.Mutex
	credits   int64
	wake      chan struct{} // closed and replaced when a waiter may proceed
	tagBusy   []bool
	tagNext   int
	txFree    []int
	pending   map[iu.Tag]*request
	tmSeq     uint64
	raw       map[uint64]ib.MR
	rawSeq    uint64
	sendWait  map[uint64]chan ib.Status
	err       error
	down      chan struct{}
	tlogout   chan struct{}
	tlogoutF  iu.TLogoutFields
	unsol     [][]byte
	unsolWake chan struct{}
	stats     Stats
	protoErrs []error
}

// fabricConn is what the channel uses of a *memfabric.Conn (an interface so that the IU
// handling can be fuzzed without a fabric).
type fabricConn interface {
	ib.Conn
	Vanish()
}

// request is a command or task management request in flight.
type request struct {
	tag    iu.Tag
	lun    uint64
	tagIdx int // can_queue slot, -1 for task management
	tm     bool
	posted bool
	build  *cmdBuild
	done   chan struct{}
	rsp    *Response
	err    error
}

func newChannel(node *memfabric.Node, conn *memfabric.Conn, cfg Config, loginReq []byte) (*Channel, error) {
	c := &Channel{
		cfg:       cfg,
		node:      node,
		mconn:     conn,
		conn:      conn,
		pd:        node.PD(),
		loginReq:  loginReq,
		stop:      make(chan struct{}),
		pollDone:  make(chan struct{}),
		wake:      make(chan struct{}),
		pending:   make(map[iu.Tag]*request),
		raw:       make(map[uint64]ib.MR),
		sendWait:  make(map[uint64]chan ib.Status),
		down:      make(chan struct{}),
		tlogout:   make(chan struct{}),
		unsolWake: make(chan struct{}),
	}
	c.loginRspIU = append([]byte(nil), conn.PrivateData()...)
	if err := c.setup(); err != nil {
		return nil, err
	}
	go c.poll()
	return c, nil
}

// setup decodes the login response and allocates and posts the rings.
func (c *Channel) setup() error {
	cfg := c.cfg
	rsp, err := iu.Parse[iu.LoginRsp](c.loginRspIU)
	if err != nil {
		return fmt.Errorf("srptest: login to %v: %w: %w", cfg.Addr, ErrLoginResponse, err)
	}
	if rsp.MaxTIIULen < iu.RspMinSize || rsp.MaxTIIULen > maxTIIULen {
		return fmt.Errorf("srptest: login to %v: MAXIMUM TI IU LENGTH %d outside %d..%d: %w",
			cfg.Addr, rsp.MaxTIIULen, iu.RspMinSize, maxTIIULen, ErrLoginResponse)
	}
	c.loginRsp = rsp
	// srp_cm_rep_handler: req_lim = delta, use_imm_data = requested && IMMED_SUPP,
	// max_it_iu_len recomputed with the grant, can_queue = min(req_lim - 1, can_queue).
	c.credits = int64(rsp.ReqLimDelta)
	c.neg = negotiated{
		immGranted:   cfg.immRequested() && rsp.RspFlags&iu.LoginRspImmedSupp != 0,
		immOffset:    cfg.ImmDataOffset,
		cmdSGEntries: cfg.CmdSGEntries,
		allowExtSG:   cfg.AllowExtSG,
	}
	c.neg.maxITIULen = MaxITIULen(cfg.CmdSGEntries, c.neg.immGranted, cfg.MaxImmData, cfg.ITIULen)
	if c.neg.maxITIULen > rsp.MaxITIULen {
		// ib_srp only warns (WARN_ON_ONCE) and sends such IUs anyway; a target should have
		// rejected the login with SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE instead.
		c.protoErrorLocked(fmt.Errorf("login response MAXIMUM IT IU LENGTH %d is below the %d the initiator will send",
			rsp.MaxITIULen, c.neg.maxITIULen))
	}
	c.canQueue = max(1, int(min(c.credits-1, int64(cfg.QueueDepth-2))))
	c.tagBusy = make([]bool, c.canQueue)

	c.rxSize = int(rsp.MaxTIIULen)
	c.rxBuf = make([]byte, cfg.QueueDepth*c.rxSize)
	if c.rxMR, err = c.pd.RegisterMemory(c.rxBuf, ib.AccessLocalWrite); err != nil {
		return fmt.Errorf("srptest: registering receive ring: %w", err)
	}
	c.txSize = cfg.txBufSize()
	c.txBuf = make([]byte, cfg.QueueDepth*c.txSize)
	if c.txMR, err = c.pd.RegisterMemory(c.txBuf, 0); err != nil {
		_ = c.rxMR.Deregister()
		return fmt.Errorf("srptest: registering send ring: %w", err)
	}
	for i := cfg.QueueDepth - 1; i >= 0; i-- {
		c.txFree = append(c.txFree, i)
	}
	recvs := make([]ib.RecvWR, cfg.QueueDepth)
	for i := range recvs {
		recvs[i] = c.recvWR(i)
	}
	if _, err := c.conn.PostRecv(recvs); err != nil {
		_ = c.rxMR.Deregister()
		_ = c.txMR.Deregister()
		return fmt.Errorf("srptest: posting receives: %w", err)
	}
	return nil
}

func (c *Channel) recvWR(i int) ib.RecvWR {
	return ib.RecvWR{ID: wrRecv | uint64(i), SGL: []ib.SGE{{MR: c.rxMR, Offset: uint64(i * c.rxSize), Length: uint32(c.rxSize)}}}
}

func (c *Channel) txSlot(i int) []byte { return c.txBuf[i*c.txSize : (i+1)*c.txSize] }

// LoginResponse returns the decoded SRP_LOGIN_RSP.
func (c *Channel) LoginResponse() iu.LoginRspFields { return c.loginRsp }

// LoginResponseIU returns the CM REP's private data as received.
func (c *Channel) LoginResponseIU() []byte { return append([]byte(nil), c.loginRspIU...) }

// LoginRequestIU returns the SRP_LOGIN_REQ this channel sent.
func (c *Channel) LoginRequestIU() []byte { return append([]byte(nil), c.loginReq...) }

// ImmediateData reports whether the target granted immediate data (and it was requested).
func (c *Channel) ImmediateData() bool { return c.neg.immGranted }

// MaxITIULen is ib_srp's ch->max_it_iu_len after the login: the IU length immediate data
// must fit in.
func (c *Channel) MaxITIULen() uint32 { return c.neg.maxITIULen }

// CanQueue is the number of commands that may be in flight: min(initial credits - 1,
// QueueDepth - 2), at least 1.
func (c *Channel) CanQueue() int { return c.canQueue }

// Index is the channel's tag prefix (Config.ChannelIndex).
func (c *Channel) Index() uint16 { return c.cfg.ChannelIndex }

// Node is the initiator's node; pass it in Config.Node to log in again from the same address.
func (c *Channel) Node() *memfabric.Node { return c.node }

// Conn is the underlying connection, for tests that need to act below SRP.
func (c *Channel) Conn() *memfabric.Conn { return c.mconn }

// Config returns the configuration with its defaults filled in.
func (c *Channel) Config() Config { return c.cfg }

// Credits returns ib_srp's req_lim: the credits the initiator holds now.
func (c *Channel) Credits() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.credits
}

// Stats returns a snapshot of the counters.
func (c *Channel) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Credits = c.credits
	return s
}

// ProtocolErrors returns the SRP violations seen so far (the first 256).
func (c *Channel) ProtocolErrors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.protoErrs...)
}

// Outstanding returns the number of commands and task management requests in flight.
func (c *Channel) Outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Disconnected is closed when the channel stops working: target DREQ, transport error, device
// removal, or Close / Logout / Vanish. Err then says why.
func (c *Channel) Disconnected() <-chan struct{} { return c.down }

// Err returns why the channel stopped working, or nil while it works.
func (c *Channel) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// TargetLogout is closed when the first SRP_T_LOGOUT arrives (ib_srp only logs it; so does this
// channel, which keeps working).
func (c *Channel) TargetLogout() <-chan struct{} { return c.tlogout }

// TargetLogoutReason returns the first SRP_T_LOGOUT's fields, and whether one arrived.
func (c *Channel) TargetLogoutReason() (iu.TLogoutFields, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.tlogout:
		return c.tlogoutF, true
	default:
		return iu.TLogoutFields{}, false
	}
}

// broadcastLocked wakes every goroutine waiting for a state change.
func (c *Channel) broadcastLocked() {
	close(c.wake)
	c.wake = make(chan struct{})
}

func (c *Channel) protoErrorLocked(err error) {
	c.stats.ProtocolErrors++
	if len(c.protoErrs) < maxProtocolErrors {
		c.protoErrs = append(c.protoErrs, fmt.Errorf("%w: %w", ErrProtocol, err))
	}
}

// failLocked stops the channel with err: every request in flight completes with it.
func (c *Channel) failLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	close(c.down)
	for tag, r := range c.pending {
		delete(c.pending, tag)
		c.finishLocked(r, nil, err)
	}
	c.broadcastLocked()
	close(c.unsolWake)
	c.unsolWake = make(chan struct{})
}

// finishLocked completes r (already out of the pending map): buffers deregistered, can_queue
// slot freed.
func (c *Channel) finishLocked(r *request, rsp *Response, err error) {
	if r.build != nil {
		r.build.release()
	}
	if r.tagIdx >= 0 {
		c.tagBusy[r.tagIdx] = false
	}
	r.rsp, r.err = rsp, err
	close(r.done)
	c.broadcastLocked()
}

// poll is the channel's completion handler goroutine (ib_srp's recv_done / send_done and CM
// event handler).
func (c *Channel) poll() {
	defer close(c.pollDone)
	wcs := make([]ib.Completion, 32)
	for {
		select {
		case <-c.stop:
			return
		case <-c.conn.Ready():
		}
		if !c.drainCompletions(wcs) {
			return
		}
		for {
			ev, ok := c.conn.PollEvent()
			if !ok {
				break
			}
			if ev == ib.EventDisconnected && !c.drainCompletions(wcs) {
				// Responses the target sent before its DREQ may have been queued while this
				// goroutine was past the completion drain above: take them before failing
				// what is still pending (a target that answers, then disconnects, must not
				// look as if it had not answered).
				return
			}
			c.event(ev)
		}
	}
}

// drainCompletions polls the completion queue empty; false when the connection is gone.
func (c *Channel) drainCompletions(wcs []ib.Completion) bool {
	for {
		n, err := c.conn.PollCompletions(wcs)
		c.mu.Lock()
		if err != nil {
			// The connection was closed underneath (Fabric.Close): nothing will complete
			// any more, and this goroutine must not outlive the fabric.
			c.failLocked(fmt.Errorf("srptest: polling: %w: %w", ErrDisconnected, err))
			c.mu.Unlock()
			return false
		}
		for i := range wcs[:n] {
			c.completionLocked(&wcs[i])
		}
		c.mu.Unlock()
		if n < len(wcs) {
			return true
		}
	}
}

func (c *Channel) event(ev ib.Event) {
	switch ev {
	case ib.EventDisconnected:
		c.mu.Lock()
		c.failLocked(fmt.Errorf("srptest: DREQ received: %w", ErrDisconnected))
		c.mu.Unlock()
		// ib_srp answers with rdma_disconnect (DREP) and starts its transport timers.
		_ = c.conn.Disconnect()
	case ib.EventDeviceRemoved:
		c.mu.Lock()
		c.failLocked(fmt.Errorf("srptest: device removed: %w", ErrDisconnected))
		c.mu.Unlock()
	}
}

func (c *Channel) completionLocked(wc *ib.Completion) {
	if wc.ID&wrRecv != 0 {
		c.recvLocked(wc)
		return
	}
	if wc.ID&wrRaw != 0 {
		if mr := c.raw[wc.ID]; mr != nil {
			delete(c.raw, wc.ID)
			_ = mr.Deregister()
		}
	} else {
		c.txFree = append(c.txFree, int(wc.ID))
		c.broadcastLocked()
	}
	if w, ok := c.sendWait[wc.ID]; ok {
		delete(c.sendWait, wc.ID)
		w <- wc.Status
	}
	if wc.Status != ib.StatusSuccess {
		c.failLocked(fmt.Errorf("srptest: SEND completed with %v (%d): %w", wc.Status, wc.Status, ErrTransport))
	}
}

func (c *Channel) recvLocked(wc *ib.Completion) {
	i := int(wc.ID &^ wrRecv)
	if wc.Status != ib.StatusSuccess {
		if wc.Status == ib.StatusLocalLengthError {
			c.protoErrorLocked(fmt.Errorf("target sent an IU longer than the MAXIMUM TI IU LENGTH %d it granted", c.rxSize))
		}
		c.failLocked(fmt.Errorf("srptest: receive completed with %v (%d): %w", wc.Status, wc.Status, ErrTransport))
		return
	}
	off := i * c.rxSize
	msg := append([]byte(nil), c.rxBuf[off:off+int(wc.ByteLen)]...)
	if c.err == nil {
		if _, err := c.conn.PostRecv([]ib.RecvWR{c.recvWR(i)}); err != nil {
			c.failLocked(fmt.Errorf("srptest: re-posting receive %d: %w: %w", i, ErrTransport, err))
		}
	}
	c.handleIULocked(msg)
}

// handleIULocked is ib_srp's srp_recv_done dispatch.
func (c *Channel) handleIULocked(msg []byte) {
	if len(msg) == 0 {
		c.protoErrorLocked(fmt.Errorf("empty IU"))
		c.unsolicitedLocked(msg)
		return
	}
	switch op := iu.Opcode(msg[0]); op {
	case iu.OpRsp:
		c.rspLocked(msg)
	case iu.OpCredReq:
		c.stats.CredReqs++
		c.addDeltaLocked(msg)
		if err := iu.CredReq(msg).Validate(); err != nil {
			c.protoErrorLocked(err)
		} else {
			c.answerLocked(iu.OpCredRsp, iu.CredReq(msg).Tag())
		}
		c.unsolicitedLocked(msg)
	case iu.OpAerReq:
		c.stats.AerReqs++
		c.addDeltaLocked(msg)
		if err := iu.AerReq(msg).Validate(); err != nil {
			c.protoErrorLocked(err)
		} else {
			c.answerLocked(iu.OpAerRsp, iu.AerReq(msg).Tag())
		}
		c.unsolicitedLocked(msg)
	case iu.OpTLogout:
		c.stats.TLogouts++
		f, err := iu.Parse[iu.TLogout](msg)
		if err != nil {
			c.protoErrorLocked(err)
		} else {
			select {
			case <-c.tlogout:
			default:
				c.tlogoutF = f
				close(c.tlogout)
			}
		}
		c.unsolicitedLocked(msg)
	default:
		c.protoErrorLocked(fmt.Errorf("unexpected %v from the target", op))
		c.unsolicitedLocked(msg)
	}
}

// addDeltaLocked adds the REQUEST LIMIT DELTA (bytes 4-7 of SRP_RSP, SRP_CRED_REQ and
// SRP_AER_REQ) when the IU is long enough to hold it.
func (c *Channel) addDeltaLocked(msg []byte) {
	if len(msg) >= 8 {
		c.credits += int64(binary.BigEndian.Uint32(msg[4:8]))
		c.broadcastLocked()
	}
}

// answerLocked sends SRP_CRED_RSP / SRP_AER_RSP, which take no credit (srp_response_common).
func (c *Channel) answerLocked(op iu.Opcode, tag iu.Tag) {
	if c.err != nil {
		return
	}
	if len(c.txFree) == 0 {
		// A conforming target has at most one request outstanding.
		c.protoErrorLocked(fmt.Errorf("no send buffer left to answer with %v: %w", op, ErrNoIU))
		return
	}
	slot := c.txFree[len(c.txFree)-1]
	c.txFree = c.txFree[:len(c.txFree)-1]
	buf := c.txSlot(slot)
	var n int
	if op == iu.OpCredRsp {
		n = iu.CredRsp(buf).Encode(&iu.CredRspFields{Tag: tag})
	} else {
		n = iu.AerRsp(buf).Encode(&iu.AerRspFields{Tag: tag})
	}
	if _, err := c.conn.PostSend([]ib.SendWR{c.sendWR(uint64(slot), c.txMR, uint64(slot*c.txSize), n)}); err != nil {
		c.txFree = append(c.txFree, slot)
		c.failLocked(fmt.Errorf("srptest: sending %v: %w: %w", op, ErrTransport, err))
	}
}

func (c *Channel) sendWR(id uint64, mr ib.MR, off uint64, n int) ib.SendWR {
	return ib.SendWR{ID: id, Op: ib.OpSend, Signaled: true, SGL: []ib.SGE{{MR: mr, Offset: off, Length: uint32(n)}}}
}

// rspLocked is ib_srp's srp_process_rsp.
func (c *Channel) rspLocked(msg []byte) {
	c.stats.Responses++
	c.addDeltaLocked(msg)
	if len(msg) < 16 {
		c.protoErrorLocked(fmt.Errorf("SRP_RSP of %d bytes has no TAG", len(msg)))
		c.unsolicitedLocked(msg)
		return
	}
	v := iu.Rsp(msg)
	r := c.pending[v.Tag()]
	verr := v.Validate()
	if verr != nil {
		c.protoErrorLocked(fmt.Errorf("SRP_RSP tag %#x: %w", v.Tag(), verr))
	}
	if r == nil || !r.posted {
		c.stats.UnknownTags++
		c.unsolicitedLocked(msg)
		return
	}
	delete(c.pending, r.tag)
	if verr != nil {
		c.finishLocked(r, nil, fmt.Errorf("srptest: SRP_RSP tag %#x: %w: %w", r.tag, ErrProtocol, verr))
		return
	}
	rsp := &Response{
		Tag:             v.Tag(),
		Status:          v.Status(),
		Flags:           v.Flags(),
		DataInResidual:  v.DataInResCnt(),
		DataOutResidual: v.DataOutResCnt(),
		ReqLimDelta:     v.ReqLimDelta(),
		IU:              msg,
	}
	if n := v.RespDataLen(); n > 0 {
		rsp.RespData = v.RespData()
	}
	if n := v.SenseDataLen(); n > 0 {
		rsp.Sense = v.SenseData()
	}
	if r.build != nil && r.build.inBuf != nil {
		valid := len(r.build.inBuf)
		if rsp.Flags&iu.DIUNDER != 0 {
			if uint64(rsp.DataInResidual) > uint64(valid) {
				c.protoErrorLocked(fmt.Errorf("SRP_RSP tag %#x: DIUNDER residual %d exceeds the %d-byte data-in buffer",
					r.tag, rsp.DataInResidual, valid))
				valid = 0
			} else {
				valid -= int(rsp.DataInResidual)
			}
		}
		rsp.DataIn = r.build.inBuf[:valid]
	}
	c.finishLocked(r, rsp, nil)
}

// unsolicitedLocked queues a copy of an IU that answered no request in flight.
func (c *Channel) unsolicitedLocked(msg []byte) {
	if len(c.unsol) >= maxUnsolicited {
		c.unsol = c.unsol[1:]
		c.stats.UnsolicitedDropped++
	}
	c.unsol = append(c.unsol, msg)
	close(c.unsolWake)
	c.unsolWake = make(chan struct{})
}

// NextUnsolicited waits for the next IU the target sent that answered no request in flight:
// SRP_T_LOGOUT, SRP_CRED_REQ and SRP_AER_REQ (already answered), SRP_RSP with an unknown tag
// (e.g. the answer to an IU sent with SendRaw), IUs with an unknown opcode and malformed IUs.
// It returns IUs received before the channel went down before returning its error.
func (c *Channel) NextUnsolicited(ctx context.Context) ([]byte, error) {
	c.mu.Lock()
	for len(c.unsol) == 0 {
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return nil, err
		}
		w := c.unsolWake
		c.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, fmt.Errorf("srptest: waiting for an unsolicited IU: %w", ctx.Err())
		}
		c.mu.Lock()
	}
	msg := c.unsol[0]
	c.unsol = c.unsol[1:]
	c.mu.Unlock()
	return msg, nil
}

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
