package srptest

import (
	"fmt"
	"sync"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/memfabric"
	"github.com/srptarget/srptarget/srp/iu"
)

// The channel: its state, its setting up once the login is accepted, and its send and receive
// rings. What a test reads of it is in channel_info.go, receiving in channel_recv.go, sending
// in channel_submit.go.

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
