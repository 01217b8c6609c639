//go:build linux && cgo

package verbs

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/srptarget/srptarget/ib"
)

// cqAckBatch is how many completion events are acknowledged with one ibv_ack_cq_events
// (it takes a mutex; ibv_destroy_cq waits for all events to be acknowledged).
const cqAckBatch = 64

// Conn is an ib.Conn: an RC QP on this package's context of the device, with its own two CQs
// (send and receive queue, ib.NotifyArmer) on one completion channel, driven through an
// RDMA/CM id. Target-side connections come from
// ConnRequest.Accept, initiator-side ones from Route.Connect.
type Conn struct {
	dev    *devCtx
	loop   *cmLoop
	key    uint64
	id     *C.struct_rdma_cm_id
	ownsID bool
	caps   ib.QPCaps
	local  netip.AddrPort
	remote netip.AddrPort
	ready  chan struct{}

	// Set before the Conn is returned to the caller.
	rdDepth     uint8  // negotiated initiator depth: RDMA READs allowed if > 0
	privateData []byte // the REP's private data (initiator side)

	qp  *C.struct_ibv_qp
	qpn uint32
	rcq cq // the receive queue's
	scq cq // the send queue's
	ch  *C.struct_ibv_comp_channel

	cqFile   *os.File
	cqRC     syscall.RawConn
	waitDone chan struct{}
	// Who reads the completion channel: the waitCQ goroutine, started by the first Ready
	// (readyMode, set under mu), or the consumer's goroutine in Serve (waitMode, set under mu
	// while Serve runs).
	readyMode atomic.Bool
	waitMode  atomic.Bool
	// intr: Interrupt was called and Serve has not started the round that answers it.
	intr atomic.Bool
	// serving: Serve runs (under mu); fileToServe: teardown left closing cqFile to it.
	serving     bool
	fileToServe bool
	// Owned by the goroutine in Serve: whether the file's read deadline may be in the past
	// (an Interrupt's), the consumer's step, whether the Read of this round has called the
	// step yet, and how it ended; serveFn is serveRead, made once so that Serve's rounds
	// allocate nothing.
	waitDirty  bool
	serveStep  func(bool) bool
	serveFresh bool
	serveDone  bool
	serveOver  bool
	serveFn    func(uintptr) bool
	// consumerArms is set by the first ArmNotify: waitCQ then leaves re-arming to the
	// consumer. wantSends is the last ArmNotify's sends: without it an event of the send CQ
	// (armed before) signals nothing.
	consumerArms atomic.Bool
	wantSends    atomic.Bool

	// mu serialises the data path and teardown: every use of qp, cq and bufs holds it.
	mu    sync.Mutex
	phase connPhase // lifecycle.go
	bufs  *wrBufs
	q     queues

	evMu   sync.Mutex
	events [4]ib.Event
	evHead int
	evTail int
	queued eventPhase   // the last connection event queued (lifecycle.go)
	connEv chan cmEvent // while Route.Connect waits for the answer

	// Shared queues (ib.AcceptParams): set before the Conn is returned. With shq the QP has
	// no CQ or completion channel of its own, and Ready signals connection events only.
	shq     *sharedCQ // receives, and sends unless sendq
	sendq   *sharedCQ
	srq     *sharedRQ
	onEvent func()
}

var (
	_ ib.Conn        = (*Conn)(nil)
	_ ib.NotifyArmer = (*Conn)(nil)
	_ ib.Waiter      = (*Conn)(nil)
)

// newConn builds the verbs side of a connection on dev for the CM id: completion channel and
// CQs (armed, with the goroutine that waits on the channel), the RC QP in INIT, and the C
// memory for posting. It takes its own references on dev and loop. On failure it releases
// what it made; the id stays the caller's.
func newConn(dev *devCtx, loop *cmLoop, id *C.struct_rdma_cm_id, key uint64, caps ib.QPCaps,
	local, remote netip.AddrPort, sh sharedQueues) (*Conn, error) {
	if err := dev.acquire(); err != nil {
		return nil, err
	}
	if !loop.tryAcquire() {
		dev.release()
		return nil, fmt.Errorf("RDMA/CM event loop: %w", ib.ErrClosed)
	}
	c := &Conn{
		dev:    dev,
		loop:   loop,
		key:    key,
		id:     id,
		caps:   caps,
		local:  local,
		remote: remote,
		ready:  make(chan struct{}, 1),
		q:      newQueues(caps),
		shq:    sh.cq,
		sendq:  sh.sendCQ,
		srq:    sh.srq,
	}
	var err error
	if c.bufs, err = newWRBufs(caps); err != nil {
		c.teardown(false)
		return nil, err
	}
	if sh.cq != nil {
		return c.newSharedQP(id)
	}
	ch, cerr := C.ibv_create_comp_channel(dev.ctx)
	if ch == nil {
		c.teardown(false)
		return nil, fmt.Errorf("ibv_create_comp_channel: %w", errnoOr(cerr, errnoENOMEM))
	}
	c.ch = ch
	// Armed before anything can complete; from then on waitCQ re-arms after every event, or
	// the consumer does (ArmNotify).
	if err := c.rcq.create(dev.ctx, caps.RecvQueueDepth, ch, "receive"); err != nil {
		c.teardown(false)
		return nil, err
	}
	if err := c.scq.create(dev.ctx, caps.SendQueueDepth, ch, "send"); err != nil {
		c.teardown(false)
		return nil, err
	}
	f, rc, perr := pollable(int(ch.fd), "completion channel")
	if perr != nil {
		c.teardown(false)
		return nil, perr
	}
	c.cqFile, c.cqRC = f, rc
	c.waitDone = make(chan struct{})
	c.serveFn = c.serveRead
	if err := c.createQP(id, c.scq.cq, c.rcq.cq, nil); err != nil {
		return nil, err
	}
	return c, nil
}

// createQP creates the RC QP on the given CQs (and SRQ, or nil), moves it to INIT and joins the
// device. On failure it tears the connection down.
func (c *Conn) createQP(id *C.struct_rdma_cm_id, scq, rcq *C.struct_ibv_cq, srq *C.struct_ibv_srq) error {
	dev, caps := c.dev, c.caps
	qp, cerr := C.srpt_create_qp(dev.pd, scq, rcq, srq, C.uint32_t(caps.SendQueueDepth), C.uint32_t(caps.RecvQueueDepth),
		C.uint32_t(caps.MaxSendSGE), C.uint32_t(caps.MaxRecvSGE), C.uint32_t(caps.MaxInlineData))
	if qp == nil {
		c.teardown(false)
		return fmt.Errorf("ibv_create_qp(%+v): %w", caps, errnoOr(cerr, errnoEINVAL))
	}
	c.qp = qp
	c.qpn = uint32(C.srpt_qp_num(qp))
	dev.addQP(c.qpn, c)
	if e := C.srpt_qp_init(id, qp); e != 0 {
		c.teardown(false)
		return fmt.Errorf("QP to INIT: %w", syscall.Errno(e))
	}
	if err := dev.join(c); err != nil {
		c.teardown(false)
		return err
	}
	c.ownsID = true
	return nil
}

func (c *Conn) String() string { return fmt.Sprintf("conn %v -> %v", c.local, c.remote) }

// LocalAddr implements ib.Conn.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr implements ib.Conn.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// PrivateData is the private data of the REP that accepted this initiator-side connection
// (the SRP_LOGIN_RSP), nil on the target side. Over InfiniBand and RoCE the CM pads it with
// zeros to 196 bytes. The slice must not be modified.
func (c *Conn) PrivateData() []byte { return c.privateData }

var _ ib.QPNumberer = (*Conn)(nil)

// QPNum is the queue pair number (struct ibv_qp's qp_num, libibverbs/verbs.h).
func (c *Conn) QPNum() uint32 { return c.qpn }
