package ib

import (
	"context"
	"net/netip"
)

// Private-data limits of RDMA/CM in the TCP port space (RDMA_PS_TCP) over InfiniBand and RoCE.
// The IB CM REQ carries 92 bytes of private data, of which RDMA/CM takes 36 for its own header
// (version, IP version, port, source and destination IP): 56 remain for the caller, which is why
// Linux defines the compacted 56-byte srp_login_req_rdma. REP and REJ carry no CMA header, so the
// IB CM sizes apply unchanged (kernel include/rdma/ib_cm.h: IB_CM_REP_PRIVATE_DATA_SIZE,
// IB_CM_REJ_PRIVATE_DATA_SIZE; rdma_connect(3) and rdma_accept(3) for the TCP port space).
const (
	// MaxConnRequestPrivateData is what an initiator can put in a connection request.
	MaxConnRequestPrivateData = 56
	// MaxAcceptPrivateData is what Accept can put in the REP (the 52-byte SRP_LOGIN_RSP fits).
	MaxAcceptPrivateData = 196
	// MaxRejectPrivateData is what Reject can put in the REJ (the 32-byte SRP_LOGIN_REJ fits).
	MaxRejectPrivateData = 148
)

// InfiniteRNRRetry as an RNR retry count means "retry for ever" (IB spec: the 3-bit value 7).
const InfiniteRNRRetry = 7

// Access says what a memory region may be used for. The names follow enum ibv_access_flags.
type Access uint32

const (
	// AccessLocalWrite lets the local HCA write the region: required for receive buffers and for
	// the local sink of an RDMA READ.
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteWrite lets the peer RDMA WRITE into the region. Verbs require
	// AccessLocalWrite with it.
	AccessRemoteWrite
	// AccessRemoteRead lets the peer RDMA READ from the region.
	AccessRemoteRead
)

// Opcode is the operation of a send-side work request, and of a successful completion.
// The zero value is invalid so that a forgotten field is caught at post time.
type Opcode uint8

const (
	// OpSend sends the gathered bytes into the next receive buffer posted by the peer.
	OpSend Opcode = iota + 1
	// OpRDMAWrite writes the gathered bytes to RemoteAddr/RKey in the peer's memory.
	OpRDMAWrite
	// OpRDMARead reads len(SGL) bytes from RemoteAddr/RKey in the peer's memory into the SGL.
	OpRDMARead
	// OpRecv appears only in completions: a receive buffer was filled.
	OpRecv
)

// Status is the outcome of a work request. The values are those of enum ibv_wc_status so that
// a verbs implementation converts with a plain cast and log lines match rdma-core's names.
type Status uint8

const (
	StatusSuccess                Status = 0  // IBV_WC_SUCCESS
	StatusLocalLengthError       Status = 1  // IBV_WC_LOC_LEN_ERR: receive buffer too small
	StatusLocalQPOperationError  Status = 2  // IBV_WC_LOC_QP_OP_ERR
	StatusLocalProtectionError   Status = 4  // IBV_WC_LOC_PROT_ERR: bad lkey, bounds or access
	StatusWRFlushError           Status = 5  // IBV_WC_WR_FLUSH_ERR: QP was in the error state
	StatusBadResponseError       Status = 7  // IBV_WC_BAD_RESP_ERR
	StatusLocalAccessError       Status = 8  // IBV_WC_LOC_ACCESS_ERR
	StatusRemoteInvalidRequest   Status = 9  // IBV_WC_REM_INV_REQ_ERR: e.g. peer's buffer too small
	StatusRemoteAccessError      Status = 10 // IBV_WC_REM_ACCESS_ERR: bad rkey, bounds or access
	StatusRemoteOperationError   Status = 11 // IBV_WC_REM_OP_ERR: peer could not complete it
	StatusTransportRetryExceeded Status = 12 // IBV_WC_RETRY_EXC_ERR: peer does not answer
	StatusRNRRetryExceeded       Status = 13 // IBV_WC_RNR_RETRY_EXC_ERR: peer had no receive
	StatusRemoteAbortedError     Status = 16 // IBV_WC_REM_ABORT_ERR
	StatusFatalError             Status = 19 // IBV_WC_FATAL_ERR
	StatusResponseTimeoutError   Status = 20 // IBV_WC_RESP_TIMEOUT_ERR
	StatusGeneralError           Status = 21 // IBV_WC_GENERAL_ERR
)

// Event is a connection event, read with Conn.PollEvent.
type Event uint8

const (
	// EventEstablished: the connection is fully up (RTU received). Delivered at most once, and
	// possibly after the first receive completions (the first SEND can beat the RTU).
	EventEstablished Event = iota + 1
	// EventDisconnected: the peer sent a DREQ, our own Disconnect finished, or the connection
	// failed before it was established. Delivered exactly once per Conn unless the device goes.
	EventDisconnected
	// EventDeviceRemoved: the RDMA device is gone. The Conn is unusable; Close it.
	EventDeviceRemoved
)

// SGE is one local scatter/gather element: Length bytes at Offset inside a registered region.
// It names the region itself rather than an lkey so that the engine cannot mix up keys and
// addresses; an implementation turns it into {addr, length, lkey} at post time.
type SGE struct {
	MR     MR
	Offset uint64
	Length uint32
}

// SendWR is a send-queue work request. Field values are copied at post time: the caller may
// reuse the SendWR and its SGL slice as soon as PostSend returns (not the memory they describe).
type SendWR struct {
	// ID comes back unchanged in the completion (wr_id).
	ID uint64
	Op Opcode
	// Signaled asks for a completion on success. Errors always complete.
	Signaled bool
	// Inline copies the gathered bytes into the work request at post time, so the source
	// memory may be reused at once and its lkey is not checked. OpSend and OpRDMAWrite only,
	// at most QPCaps.MaxInlineData bytes.
	Inline bool
	// SGL is the local side: the source of OpSend/OpRDMAWrite, the sink of OpRDMARead.
	SGL []SGE
	// RemoteAddr and RKey name the peer's memory for OpRDMAWrite and OpRDMARead.
	RemoteAddr uint64
	RKey       uint32
}

// RecvWR is a receive buffer. The SGL is copied at post time like SendWR's.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// Completion reports one finished work request (struct ibv_wc, reduced to what SRP uses).
// Opcode and ByteLen are meaningful only when Status is StatusSuccess, as in verbs: an engine
// must recognise failed work requests by their ID.
type Completion struct {
	ID      uint64
	ByteLen uint32 // bytes received (OpRecv only)
	// QPNum is the queue pair the work request belongs to (wc.qp_num), valid whatever the
	// status, in the completions of a shared CQ (CQ.Poll): what tells its connections apart.
	// Conn.PollCompletions leaves it 0.
	QPNum  uint32
	Status Status
	Opcode Opcode
}

// QPCaps sizes a queue pair. Zero values are invalid; see DeviceLimits for the maxima.
type QPCaps struct {
	// SendQueueDepth bounds outstanding send-queue work requests (see doc.go on when a slot
	// becomes free again: unsignaled work requests hold theirs until a later completion).
	SendQueueDepth int
	// RecvQueueDepth bounds posted receive buffers whose completion has not been polled.
	RecvQueueDepth int
	MaxSendSGE     int
	MaxRecvSGE     int
	MaxInlineData  int
}

// DeviceLimits are the capabilities of the device a connection request arrived on (the subset
// of ibv_device_attr that sizing a channel needs).
type DeviceLimits struct {
	MaxQueueDepth int // max_qp_wr
	MaxSendSGE    int // max_send_sge (max_sge on older devices)
	MaxRecvSGE    int // max_recv_sge
	// MaxReadSGE bounds the SGL of an RDMA READ (max_sge_rd; 1 on iWARP/siw).
	MaxReadSGE    int
	MaxInlineData int
	// MaxRDAtomic bounds initiator depth and responder resources (max_qp_rd_atom).
	MaxRDAtomic int
}

// AcceptParams answers a ConnRequest positively.
type AcceptParams struct {
	// PrivateData goes into the REP (the SRP_LOGIN_RSP), at most MaxAcceptPrivateData bytes.
	PrivateData []byte
	QP          QPCaps
	// RNRRetryCount is how often the peer retries a SEND that found no receive posted here
	// (0..7, 7 = for ever). SRP targets use 7.
	RNRRetryCount uint8
	// ResponderResources: RDMA READs the peer may have outstanding against us.
	ResponderResources uint8
	// InitiatorDepth: RDMA READs we may have outstanding; at most the request's
	// ResponderResources. Must be at least 1 to post OpRDMARead.
	InitiatorDepth uint8
	// Recv is posted to the receive queue before the REP is sent: rdma_accept moves the QP to
	// RTS, and the initiator may send its first IU before Accept has returned.
	Recv []RecvWR
	// CQ, when set, takes the completions of both of the QP's queues instead of a CQ of the
	// connection's own (SharedQueues): the consumer polls and arms the CQ, and the Conn's
	// PollCompletions and ArmNotify fail with ErrInvalidArgument. Its Ready then signals
	// connection events only. SendCQ, when set too, takes the send queue's completions
	// instead (ibv_qp_init_attr's send_cq and recv_cq), so that a consumer can wait for
	// receives without being woken by the completions of its sends.
	CQ     CQ
	SendCQ CQ
	// SRQ, when set, is the QP's receive queue (SharedQueues): QP.RecvQueueDepth must be 0,
	// Recv empty, and CQ set.
	SRQ SRQ
	// OnQP, when set, is called with the QP's number once the QP exists and before it can
	// receive anything, so before any of its completions: a consumer of a shared CQ learns
	// there which QP number is this connection's before Accept returns.
	OnQP func(qpn uint32)
	// OnEvent, when set, is called each time a connection event is queued for PollEvent,
	// besides the signal of Ready: how a consumer that polls a shared CQ for many connections
	// learns which one to look at. It runs on the implementation's goroutine, maybe under
	// its locks: it must not block nor call into the connection.
	OnEvent func()
}

// Listener delivers connection requests for one address (RDMA/CM, TCP port space).
type Listener interface {
	// Next waits for the next connection request. It returns an error wrapping ErrClosed after
	// Close and ErrDeviceRemoved when the device went away.
	Next(ctx context.Context) (ConnRequest, error)
	Addr() netip.AddrPort
	// Close stops listening. Requests already returned by Next stay answerable; connections
	// already accepted are not affected.
	Close() error
}

// ConnRequest is an incoming connection request. It must be answered exactly once, with Accept
// or Reject; a second answer fails with ErrAnswered. A failed Accept (bad parameters) does not
// count as an answer.
type ConnRequest interface {
	// PrivateData is the initiator's private data (the srp_login_req_rdma). Over IB and RoCE
	// the CM delivers the whole field, MaxConnRequestPrivateData bytes zero-padded, whatever
	// the initiator sent; over iWARP exactly what it sent. The slice must not be modified.
	PrivateData() []byte
	RemoteAddr() netip.AddrPort
	LocalAddr() netip.AddrPort
	// ResponderResources and InitiatorDepth are the initiator's offer (rdma_conn_param).
	ResponderResources() uint8
	InitiatorDepth() uint8
	// Limits describes the device the request arrived on.
	Limits() DeviceLimits
	// PD is the protection domain of that device: register the channel's memory here before
	// Accept so the initial receives can be posted.
	PD() ProtectionDomain
	Accept(p AcceptParams) (Conn, error)
	// Reject answers with a REJ carrying privateData (at most MaxRejectPrivateData bytes;
	// the SRP_LOGIN_REJ), reason "consumer defined".
	Reject(privateData []byte) error
}

// Conn is one connected RC queue pair with its completion queue and connection events.
// All methods are safe for concurrent use, but the design point is one goroutine per Conn that
// posts, polls and waits on Ready.
type Conn interface {
	// PostRecv posts receive buffers in order. It returns how many were posted; when that is
	// less than len(wrs) the error is about wrs[n] and nothing after it was posted.
	PostRecv(wrs []RecvWR) (int, error)
	// PostSend posts a chain of send-queue work requests with one call, with the same partial
	// result rule as PostRecv.
	PostSend(wrs []SendWR) (int, error)
	// PollCompletions copies up to len(wcs) completions, oldest first within the send queue's
	// and the receive queue's (no order between the two), and returns how many.
	PollCompletions(wcs []Completion) (int, error)
	// PollEvent returns the next connection event, if any.
	PollEvent() (Event, bool)
	// Ready receives a value when completions or events may be available. The channel has a
	// buffer of one and is never closed. After a receive the consumer polls until
	// PollCompletions returns less than it asked for and PollEvent returns false; anything that
	// arrives after that drain began signals Ready again.
	Ready() <-chan struct{}
	// Disconnect moves the QP to the error state (flushing all outstanding work requests) and
	// sends a DREQ, or answers the peer's. EventDisconnected follows.
	Disconnect() error
	// Close disconnects if needed and releases the QP and CQ. Memory regions are not touched:
	// they belong to the ProtectionDomain.
	Close() error
	LocalAddr() netip.AddrPort
	RemoteAddr() netip.AddrPort
}

// NotifyArmer is implemented by connections that let the consumer decide when completions
// raise Ready, as ibv_req_notify_cq does: an armed completion queue raises one event for the
// next completion added to it, then stays quiet until armed again. A consumer that keeps
// polling while it has work, and arms only before it waits, takes no wake-up per completion.
//
// Receive and send completions go to two completion queues, armed apart: ArmNotify arms the
// receive queue's, and the send queue's only when sends is true; after ArmNotify(false) send
// completions signal nothing until an ArmNotify(true). A consumer whose outstanding sends
// only release memory when they complete (a response on its way) leaves sends false and
// reaps those completions when it polls for another reason, the next request's arrival: one
// wake-up per request instead of two. PollCompletions returns the completions of both
// queues, each queue's oldest first, with no order promised between the two (verbs: the send
// queue's are taken first).
//
// Until the first ArmNotify the connection re-arms both after every event, so consumers
// that never call it lose nothing. After it, the consumer must arm before each wait and poll
// once more after arming before it waits on Ready: a completion that arrived before the arm
// raises no event. Connection events (established, disconnected, device removed) always
// signal Ready.
type NotifyArmer interface {
	ArmNotify(sends bool) error
}

// Waiter is implemented by connections whose consumer can wait for them on its own goroutine
// instead of receiving from Ready. Behind Ready a verbs connection keeps a goroutine parked
// on its completion channel, which reads each event and hands it over: two goroutines run per
// wake-up, with a channel operation between them. Under Serve the consumer's goroutine is
// the one parked, and reads the events itself.
//
// A consumer uses Serve or Ready, not both at once: Serve fails once Ready has been called,
// and what Serve takes does not signal Ready. After Serve returns the consumer may go on
// with Ready.
type Waiter interface {
	// Serve runs the consumer's loop on the calling goroutine. It calls step, and when step
	// returns false it parks until completions or connection events may be available (what
	// would signal Ready, with the same drain rule and NotifyArmer's arming rules) or until
	// Interrupt, then calls step again: ready is true when events were taken, false
	// otherwise (the first call, an Interrupt, or a spurious return: the consumer polls
	// either way). Serve returns nil when step returns true, and an error wrapping ErrClosed
	// or ErrDeviceRemoved once the connection is released (closed, by step too, or its
	// device removed) without step having returned true.
	Serve(step func(ready bool) (done bool)) error
	// Interrupt makes Serve call step again soon: at once if it is parked, after the step in
	// progress otherwise, or at the start of the next Serve. It is for the consumer's other
	// sources of work (timers, other goroutines' hand-backs), and may be called from any
	// goroutine, at any time.
	Interrupt()
}

// QPNumberer is implemented by connections that know their queue pair number (verbs: the
// qp_num of struct ibv_qp, the QPN the peer's CM messages name), so that an operator can
// match a channel with what the initiator side shows (ibv_devinfo, rdma resource show qp).
type QPNumberer interface {
	QPNum() uint32
}

// RemovalNotifier is implemented by protection domains whose device can go away (verbs):
// Removed is closed once the device was removed. The memory registered in the domain is then
// no longer in use by the device, and may be unmapped once no connection uses it either.
type RemovalNotifier interface {
	Removed() <-chan struct{}
}

// DeviceListener is implemented by listeners that know the device their address belongs to:
// PD is that device's protection domain, the one its connection requests will name. ok is
// false for a listener on a wildcard address, which serves every device.
type DeviceListener interface {
	PD() (pd ProtectionDomain, ok bool)
}

// ProtectionDomain registers memory for use by the connections of one device.
type ProtectionDomain interface {
	// RegisterMemory registers buf. For the verbs implementation buf must not be Go heap
	// memory (the HCA keeps using it after the call): use a Slab.
	RegisterMemory(buf []byte, access Access) (MR, error)
}

// MR is a registered memory region.
type MR interface {
	// Bytes is the registered memory.
	Bytes() []byte
	// Addr is the address the peer uses for Bytes()[0] in RemoteAddr.
	Addr() uint64
	Len() int
	LKey() uint32
	RKey() uint32
	Access() Access
	// Deregister invalidates both keys. Only call it when no work request that names the region
	// (locally or, through the rkey, at the peer) can still execute.
	Deregister() error
}
