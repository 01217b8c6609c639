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

// usableLocked reports why the data path cannot be used, under c.mu.
func (c *Conn) usableLocked(what string) error {
	switch {
	case c.phase.closed():
		return errorf("%s on %v: %w", what, c, ib.ErrClosed)
	case c.phase.released():
		return errorf("%s on %v: %w", what, c, ib.ErrDeviceRemoved)
	}
	return nil
}

// PostSend implements ib.Conn: the work requests are written into the connection's C work
// request array and posted as one linked chain with one ibv_post_send (more than the send
// queue depth only if the queue has room, in chunks of that depth).
func (c *Conn) PostSend(wrs []ib.SendWR) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("post send"); err != nil {
		return 0, err
	}
	lim := ib.SendLimits{
		MaxSGE:         c.caps.MaxSendSGE,
		MaxReadSGE:     c.dev.limits.MaxReadSGE,
		MaxInline:      c.caps.MaxInlineData,
		InitiatorDepth: c.rdDepth,
	}
	n, err := c.postChains(&sendChain, len(wrs),
		func(i int) uint64 { return wrs[i].ID },
		func(i int) error { return ib.CheckSendWR(&wrs[i], lim) },
		func(i, k int, wrid uint64) error { return c.bufs.fillSend(k, &wrs[i], wrid, c.dev) },
		func(k int) C.int { return C.srpt_post_send(c.qp, &c.bufs.swr[0], C.int(k), c.bufs.bad) })
	if s := c.sendShared(); s != nil && n > 0 {
		s.sendOut.Add(int64(n)) // before the unlock: its completions are retired under mu
	}
	return n, err
}

// PostRecv implements ib.Conn like PostSend, with one ibv_post_recv per chain.
func (c *Conn) PostRecv(wrs []ib.RecvWR) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("post receive"); err != nil {
		return 0, err
	}
	if c.srq != nil {
		return 0, errorf("post receive on %v: its receive queue is an SRQ: %w", c, ib.ErrInvalidArgument)
	}
	return c.postChains(&recvChain, len(wrs),
		func(i int) uint64 { return wrs[i].ID },
		func(i int) error { return ib.CheckRecvWR(&wrs[i], c.caps.MaxRecvSGE) },
		func(i, k int, wrid uint64) error { return c.bufs.fillRecv(k, &wrs[i], wrid, c.dev) },
		func(k int) C.int { return C.srpt_post_recv(c.qp, &c.bufs.rwr[0], C.int(k), c.bufs.bad) })
}

// chainQueue is the queue PostSend or PostRecv posts to, with the names its errors carry.
type chainQueue struct {
	what, call string // "post send", "ibv_post_send"
	queue      uint64 // queueSend or queueRecv, in the wr_id
}

var (
	sendChain = chainQueue{what: "post send", call: "ibv_post_send", queue: queueSend}
	recvChain = chainQueue{what: "post receive", call: "ibv_post_recv", queue: queueRecv}
)

// postChains is the loop PostSend and PostRecv share: n work requests, as many per verbs
// call as the queue's C work request array holds. The steps on request i of the caller's
// slice are theirs: id, check (against the device's and the QP's limits), fill (into slot k
// of the C array under wrid) and post (slots 0..k-1 as one chain; the errno, and the index
// of the refused request in *c.bufs.bad). The closures are only called, never kept, so
// they stay on the caller's stack: posting allocates nothing.
//
// A request that fails its check, finds the queue full or cannot be written ends the
// posting: those before it are posted and counted, and the error names it. When the
// provider refuses a chain, the requests from the refused one on are forgotten again and
// not counted.
func (c *Conn) postChains(cq *chainQueue, n int, id func(i int) uint64, check func(i int) error,
	fill func(i, k int, wrid uint64) error, post func(k int) C.int) (int, error) {
	q, slots := &c.q.sq, len(c.bufs.swr)
	if cq.queue == queueRecv {
		q, slots = &c.q.rq, len(c.bufs.rwr)
	}
	posted := 0
	for posted < n {
		k := 0
		var verr error
		for posted+k < n && k < slots {
			i := posted + k
			if verr = check(i); verr != nil {
				break
			}
			if q.free() == 0 {
				verr = fmt.Errorf("%d outstanding: %w", len(q.ids), ib.ErrQueueFull)
				break
			}
			if verr = fill(i, k, encodeWRID(cq.queue, q.tail)); verr != nil {
				break
			}
			q.push(id(i))
			k++
		}
		if k > 0 {
			if e := post(k); e != 0 {
				bad := int(*c.bufs.bad)
				q.unpush(k - bad)
				i := posted + bad
				return i, errorf("%s on %v: work request %d (id %#x): %s: %w",
					cq.what, c, i, id(i), cq.call, postError(syscall.Errno(e)))
			}
			posted += k
		}
		if verr != nil {
			return posted, errorf("%s on %v: work request %d (id %#x): %w", cq.what, c, posted, id(posted), verr)
		}
	}
	return posted, nil
}

// PollCompletions implements ib.Conn: up to wcBatch completions per call into C, each call
// taking the send CQ's first and then the receive CQ's. After the device's removal it returns
// nothing: the CQs are gone and the contract says not to wait for flushes.
func (c *Conn) PollCompletions(wcs []ib.Completion) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase.closed() {
		return 0, errorf("poll on %v: %w", c, ib.ErrClosed)
	}
	if c.shq != nil {
		return 0, errorf("poll on %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	}
	if c.phase.released() {
		return 0, nil
	}
	n := 0
	for n < len(wcs) {
		want := min(len(wcs)-n, len(c.bufs.wcs))
		got := int(C.srpt_poll_cqs(c.scq.cq, c.rcq.cq, C.int(want), &c.bufs.wcs[0]))
		failed := got < 0
		if failed {
			got = -got - 1
		}
		for j := 0; j < got; j++ {
			w := &c.bufs.wcs[j]
			comp, err := c.q.complete(uint64(w.wr_id), uint32(w.status), uint32(w.opcode), uint32(w.byte_len))
			if err != nil {
				return n, errorf("poll on %v: %w", c, err)
			}
			wcs[n] = comp
			n++
		}
		if failed {
			return n, errorf("poll on %v: ibv_poll_cq: %w", c, syscall.EIO)
		}
		if got < want {
			break
		}
	}
	return n, nil
}

// PollEvent implements ib.Conn.
func (c *Conn) PollEvent() (ib.Event, bool) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if c.evHead == c.evTail {
		return 0, false
	}
	e := c.events[c.evHead%len(c.events)]
	c.evHead++
	return e, true
}

// pushLocked queues an event, under evMu. At most three events ever occur (established,
// disconnected, device removed), so the ring never fills.
func (c *Conn) pushLocked(e ib.Event) {
	c.events[c.evTail%len(c.events)] = e
	c.evTail++
	c.signal()
	if c.onEvent != nil {
		c.onEvent()
	}
}

func (c *Conn) establishedEvent() { c.queueEvent(evEstablished) }

func (c *Conn) disconnectedEvent() { c.queueEvent(evDisconnected) }

// cmEvent receives the connection's RDMA/CM events from the loop.
func (c *Conn) cmEvent(ev *cmEvent) {
	c.evMu.Lock()
	if c.connEv != nil {
		select {
		case c.connEv <- *ev:
		default:
		}
		c.evMu.Unlock()
		return
	}
	c.evMu.Unlock()
	switch ev.typ {
	case C.RDMA_CM_EVENT_ESTABLISHED:
		c.establishedEvent()
	case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_REJECTED, C.RDMA_CM_EVENT_CONNECT_ERROR,
		C.RDMA_CM_EVENT_UNREACHABLE:
		// After the peer's DREQ, after our own DREQ's answer (or its timeout), or when the
		// connection failed before it was established.
		c.disconnectedEvent()
	case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
		c.dev.remove()
	}
}

// commEstablished passes IBV_EVENT_COMM_EST to the CM: the initiator's first packet arrived
// before the RTU, and the CM must treat the connection as established.
func (c *Conn) commEstablished() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.phase.released() && c.ownsID {
		C.rdma_notify(c.id, C.IBV_EVENT_COMM_EST)
	}
}

// deviceRemoved queues EventDeviceRemoved and releases the connection's verbs and CM
// resources at once; Close then has nothing left to do but mark it closed. A Route.Connect
// still waiting for the answer is told too: the removal may have been reported on another id
// of the device, and this one's events end with its destruction.
func (c *Conn) deviceRemoved() {
	c.evMu.Lock()
	if c.connEv != nil {
		select {
		case c.connEv <- cmEvent{typ: C.RDMA_CM_EVENT_DEVICE_REMOVAL}:
		default:
		}
	}
	c.queueEventLocked(evRemoved)
	c.evMu.Unlock()
	c.teardown(true)
}

// Disconnect implements ib.Conn: the QP goes to the error state (flushing everything
// outstanding) and rdma_disconnect sends a DREQ, or the DREP to the peer's DREQ.
// EventDisconnected follows from the CM; if the connection was never established, the CM has
// nothing to report and the event is queued here.
func (c *Conn) Disconnect() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked("disconnect"); err != nil {
		return err
	}
	if e := C.srpt_qp_err(c.qp); e != 0 {
		return errorf("disconnect %v: QP to ERR: %w", c, syscall.Errno(e))
	}
	if c.phase == connDisconnecting {
		return nil
	}
	c.setPhase(connDisconnecting)
	r := C.rdma_disconnect(c.id)
	c.evMu.Lock()
	est := c.queued != evNone
	c.evMu.Unlock()
	if r != 0 || !est {
		c.disconnectedEvent()
	}
	return nil
}

// Close implements ib.Conn: a connected QP is disconnected first (the peer gets a DREQ), then
// QP, CM id, CQ and completion channel are destroyed, in that order, after the goroutine
// waiting on the channel has stopped.
func (c *Conn) Close() error {
	if c.teardown(false) {
		c.signal()
	}
	return nil
}

// teardown releases everything the connection holds, once, because of Close or (removed) of
// the device's removal, in which case no DREQ is sent. It reports whether the phase moved.
func (c *Conn) teardown(removed bool) bool {
	c.mu.Lock()
	switch {
	case c.phase == connRemoved && !removed:
		c.setPhase(connRemovedClosed) // closed after the removal released everything
		c.mu.Unlock()
		return true
	case c.phase.released():
		c.mu.Unlock()
		return false
	case removed:
		c.setPhase(connRemoved)
	default:
		if c.qp != nil && c.ownsID && c.phase == connOpen {
			C.srpt_qp_err(c.qp)
			C.rdma_disconnect(c.id)
		}
		c.setPhase(connClosed)
	}
	c.fileToServe = c.serving
	c.mu.Unlock()
	// From here on nothing else touches the resources: the data path sees released, the CM
	// events find no handler, COMM_EST finds no QP.
	c.loop.unregisterIf(c.key, c)
	c.dev.leave(c)
	switch {
	case c.fileToServe:
		// Serve reads the channel under mu and sees released; the interrupt ends its park.
		c.Interrupt()
	case c.cqFile != nil:
		// Close returns once no read of the file is in progress (internal/poll's FD.Close
		// waits for its references to go).
		c.cqFile.Close()
		if c.readyMode.Load() {
			<-c.waitDone
		}
	}
	if c.qp != nil {
		c.dev.delQP(c.qpn)
		C.ibv_destroy_qp(c.qp)
	}
	c.leaveShared()
	if c.ownsID {
		C.rdma_destroy_id(c.id)
	}
	// The QP is gone first: a CQ in use by a QP cannot be destroyed.
	c.scq.destroy()
	c.rcq.destroy()
	if c.ch != nil {
		C.ibv_destroy_comp_channel(c.ch)
	}
	c.bufs.free()
	c.dev.release()
	c.loop.release()
	c.signal()
	return true
}

var _ ib.QPNumberer = (*Conn)(nil)

// QPNum is the queue pair number (struct ibv_qp's qp_num, libibverbs/verbs.h).
func (c *Conn) QPNum() uint32 { return c.qpn }
