package memfabric

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/srptarget/srptarget/ib"
)

// pair is the wire between the two QPs of one connection. One mutex guards both ends' queues, so
// an operation that touches both (a SEND consuming the peer's receive, a flush on both sides)
// is atomic, and the mutex hand-offs give the race detector the same happens-before edges as
// "completion polled, then buffer read".
type pair struct {
	f  *Fabric
	mu sync.Mutex
	a  *Conn // target side; nil until Accept
	b  *Conn // initiator side

	// Async mode: kick wakes the goroutine that runs settle; done stops it.
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	started bool
	stopped bool
}

func newPair(f *Fabric) *pair {
	return &pair{f: f, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// start begins execution for an accepted connection (the goroutine in async mode).
func (p *pair) start() {
	p.started = true
	if !p.f.opts.Async {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.kick:
			case <-p.done:
				return
			}
			p.mu.Lock()
			p.settle()
			p.mu.Unlock()
		}
	}()
}

// wake runs the send queues that were marked dirty: at once in sync mode, on the pair's
// goroutine in async mode. Called with p.mu held.
func (p *pair) wake() {
	if p.f.opts.Async {
		select {
		case p.kick <- struct{}{}:
		default:
		}
		return
	}
	p.settle()
}

// settle runs progress on dirty ends until neither is dirty. Progress on one end can dirty the
// other (a flush makes the peer's blocked SEND re-evaluate), hence the loop.
func (p *pair) settle() {
	if !p.started {
		return
	}
	for {
		switch {
		case p.a != nil && p.a.dirty:
			p.a.dirty = false
			p.a.progress()
		case p.b != nil && p.b.dirty:
			p.b.dirty = false
			p.b.progress()
		default:
			return
		}
	}
}

// stopIfDead stops the async goroutine once both ends are closed. It returns true if the caller
// must wait for it (after releasing p.mu).
func (p *pair) stopIfDead() bool {
	if !p.started || p.stopped || (p.a != nil && !p.a.closed) || (p.b != nil && !p.b.closed) {
		return false
	}
	p.stopped = true
	close(p.done)
	return true
}

// Conn is one end of a connection: an RC QP with its own CQ and event queue. It implements
// ib.Conn; the initiator side also has PrivateData and Vanish.
type Conn struct {
	node          *Node
	local, remote netip.AddrPort
	caps          ib.QPCaps
	ready         chan struct{}
	intr          chan struct{} // ib.Waiter's Interrupt
	qpn           uint32        // set before the connection is visible to another goroutine

	// Set before the connection is visible to another goroutine, or under p.mu.
	p           *pair
	rnrRetry    uint8 // how often our SENDs are retried against an empty peer RQ
	rdDepth     uint8 // negotiated initiator depth (RDMA READs allowed if > 0)
	privateData []byte

	// Guarded by p.mu.
	state      qpState
	closed     bool // Close or Vanish called
	removed    bool // device removed
	discSent   bool // EventDisconnected queued
	estPending bool // DelayEstablished: EventEstablished waits for the first receive
	dirty      bool // send queue needs another look
	sq         sendQueue
	rq         recvQueue
	cq         compQueue
	events     []ib.Event
	// consumerArms: ArmNotify was called, so a completion signals Ready only while its
	// queue's CQ is armed, like a CQ armed with ibv_req_notify_cq (see ib.NotifyArmer):
	// armedRecv for receive completions, armedSend for send-queue ones.
	consumerArms bool
	armedRecv    bool
	armedSend    bool
	// Shared queues (AcceptParams.CQ, SRQ, OnEvent), set before the connection is visible to
	// another goroutine. sqRetired and rqRetired are the queue heads polling the shared CQ
	// retired, under its mu (sharedCQ.retired brings them over).
	scq                  *sharedCQ // receives, and sends unless sendCQ
	sendCQ               *sharedCQ
	srq                  *srq
	srqSGEs              []ib.SGE // the SGEs of the SRQ receive a SEND lands in
	onEvent              func()
	sqRetired, rqRetired uint64

	blk        blockKind
	blkIdx     uint64
	blkTimed   bool
	blkEnd     time.Time
	timer      *time.Timer
	timerArmed bool
	timerGen   uint64
	timerWG    sync.WaitGroup

	src, dst [][]byte // scatter/gather scratch
}

var (
	_ ib.Conn        = (*Conn)(nil)
	_ ib.NotifyArmer = (*Conn)(nil)
	_ ib.QPNumberer  = (*Conn)(nil)
	_ ib.Waiter      = (*Conn)(nil)
)

// QPNum is the queue pair number, unique in the fabric (as qp_num is on a device).
func (c *Conn) QPNum() uint32 { return c.qpn }

func newConn(n *Node, caps ib.QPCaps, local, remote netip.AddrPort) *Conn {
	return &Conn{
		node:   n,
		local:  local,
		remote: remote,
		caps:   caps,
		ready:  make(chan struct{}, 1),
		intr:   make(chan struct{}, 1),
		sq:     sendQueue{slotRing: newSlotRing[sendSlot](caps.SendQueueDepth)},
		rq:     recvQueue{slotRing: newSlotRing[recvSlot](caps.RecvQueueDepth)},
		cq:     compQueue{ring: make([]cqEntry, caps.SendQueueDepth+caps.RecvQueueDepth)},
		events: make([]ib.Event, 0, 4),
	}
}

func (c *Conn) LocalAddr() netip.AddrPort  { return c.local }
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }
func (c *Conn) Ready() <-chan struct{}     { return c.ready }

// PrivateData is the private data of the REP that accepted this (initiator) connection, the
// SRP_LOGIN_RSP, zero-padded to ib.MaxAcceptPrivateData bytes as IB/RoCE deliver it. The slice
// must not be modified.
func (c *Conn) PrivateData() []byte { return c.privateData }

func (c *Conn) String() string { return fmt.Sprintf("conn %v -> %v", c.local, c.remote) }

func (c *Conn) peer() *Conn {
	if c.p.a == c {
		return c.p.b
	}
	return c.p.a
}

// answers says whether a packet sent to c would be acknowledged: the QP exists, its device is
// there and it is not in the error state (an error-state QP silently drops what it receives).
func (c *Conn) answers() bool {
	return c != nil && !c.closed && !c.removed && c.state == qpReady
}

// Serve implements ib.Waiter: step runs on the caller's goroutine, which waits for Ready's
// signal or an Interrupt between steps. Unlike verbs, Ready stays usable beside it (tests
// look at it); the signals Serve takes are Ready's.
func (c *Conn) Serve(step func(ready bool) bool) error {
	// The first step looks at everything: a signal from before Serve is its.
	ready := false
	select {
	case <-c.ready:
		ready = true
	default:
	}
	for {
		c.p.mu.Lock()
		err := c.usable("serve")
		c.p.mu.Unlock()
		if err != nil {
			return err
		}
		if step(ready) {
			return nil
		}
		select {
		case <-c.ready:
			ready = true
		case <-c.intr:
			ready = false
		}
	}
}

// Interrupt implements ib.Waiter.
func (c *Conn) Interrupt() {
	select {
	case c.intr <- struct{}{}:
	default:
	}
}

func (c *Conn) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

func (c *Conn) push(e cqEntry) {
	if c.scq != nil {
		e.c.QPNum = c.qpn
		if e.sq && c.sendCQ != nil {
			c.sendCQ.add(c, e)
		} else {
			c.scq.add(c, e)
		}
		return
	}
	if c.cq.tail-c.cq.head == uint64(len(c.cq.ring)) {
		panic("memfabric: completion queue overrun (broken slot accounting)")
	}
	c.cq.ring[c.cq.tail%uint64(len(c.cq.ring))] = e
	c.cq.tail++
	switch {
	case !c.consumerArms:
		c.signal()
	case e.sq && c.armedSend:
		c.armedSend = false
		c.signal()
	case !e.sq && c.armedRecv:
		c.armedRecv = false
		c.signal()
	}
}

// ArmNotify implements ib.NotifyArmer: the next receive completion signals Ready, and the
// next send-queue completion too when sends is set; completions already queued do not.
func (c *Conn) ArmNotify(sends bool) error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.scq != nil {
		return fmt.Errorf("memfabric: arm %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	}
	c.consumerArms = true
	c.armedRecv = true
	c.armedSend = sends
	return nil
}

func (c *Conn) pushEvent(e ib.Event) {
	c.events = append(c.events, e)
	c.signal()
	if c.onEvent != nil {
		c.onEvent()
	}
}

func (c *Conn) usable(what string) error {
	switch {
	case c.closed:
		return fmt.Errorf("memfabric: %s on %v: %w", what, c, ib.ErrClosed)
	case c.removed:
		return fmt.Errorf("memfabric: %s on %v: %w", what, c, ib.ErrDeviceRemoved)
	}
	return nil
}

// sendLimits are the connection's inputs to ib.CheckSendWR.
func (c *Conn) sendLimits() ib.SendLimits {
	return ib.SendLimits{
		MaxSGE:         c.caps.MaxSendSGE,
		MaxReadSGE:     c.node.f.opts.Limits.MaxReadSGE,
		MaxInline:      c.caps.MaxInlineData,
		InitiatorDepth: c.rdDepth,
	}
}

// PostSend implements ib.Conn.
func (c *Conn) PostSend(wrs []ib.SendWR) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if err := c.usable("post send"); err != nil {
		return 0, err
	}
	lim := c.sendLimits()
	if c.scq != nil {
		c.retired()
	}
	n := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if err = ib.CheckSendWR(wr, lim); err != nil {
			err = fmt.Errorf("memfabric: post send on %v: work request %d (id %#x): %w", c, i, wr.ID, err)
			break
		}
		if c.sq.full() {
			err = fmt.Errorf("memfabric: post send on %v: work request %d (id %#x): %d outstanding: %w",
				c, i, wr.ID, len(c.sq.slots), ib.ErrQueueFull)
			break
		}
		s := c.sq.slot(c.sq.tail)
		s.wr = *wr
		s.sges = append(s.sges[:0], wr.SGL...)
		s.wr.SGL = s.sges
		if wr.Inline {
			s.inlineLen = 0
			for _, g := range wr.SGL {
				if need := s.inlineLen + int(g.Length); need > len(s.inline) {
					s.inline = append(s.inline[:s.inlineLen], make([]byte, need-s.inlineLen)...)
				}
				s.inlineLen += copy(s.inline[s.inlineLen:], g.MR.Bytes()[g.Offset:g.Offset+uint64(g.Length)])
			}
		}
		c.sq.tail++
		n++
		if c.state == qpError {
			c.flushSend()
		}
	}
	if n > 0 && c.state == qpReady {
		c.dirty = true
		c.p.wake()
	}
	return n, err
}

// PostRecv implements ib.Conn.
func (c *Conn) PostRecv(wrs []ib.RecvWR) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if err := c.usable("post receive"); err != nil {
		return 0, err
	}
	if c.srq != nil {
		return 0, fmt.Errorf("memfabric: post receive on %v: its receive queue is an SRQ: %w", c, ib.ErrInvalidArgument)
	}
	if c.scq != nil {
		c.retired()
	}
	n := 0
	var err error
	for i := range wrs {
		if err = ib.CheckRecvWR(&wrs[i], c.caps.MaxRecvSGE); err != nil {
			err = fmt.Errorf("memfabric: post receive on %v: work request %d (id %#x): %w", c, i, wrs[i].ID, err)
			break
		}
		if c.rq.full() {
			err = fmt.Errorf("memfabric: post receive on %v: work request %d (id %#x): %d outstanding: %w",
				c, i, wrs[i].ID, len(c.rq.slots), ib.ErrQueueFull)
			break
		}
		c.postRecvLocked(&wrs[i])
		n++
	}
	if peer := c.peer(); n > 0 && peer != nil && peer.blk == blockRNR {
		peer.dirty = true
		c.p.wake()
	}
	return n, err
}

// postRecvLocked queues a checked receive; in the error state it is flushed at once.
func (c *Conn) postRecvLocked(wr *ib.RecvWR) {
	s := c.rq.slot(c.rq.tail)
	s.id = wr.ID
	s.sges = append(s.sges[:0], wr.SGL...)
	c.rq.tail++
	if c.state == qpError {
		c.flushRecv()
	}
}

// PollCompletions implements ib.Conn. Polling a completion frees its queue slot; for the send
// queue it also frees the slots of the unsignaled work requests before it.
func (c *Conn) PollCompletions(wcs []ib.Completion) (int, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.closed {
		return 0, fmt.Errorf("memfabric: poll on %v: %w", c, ib.ErrClosed)
	}
	if c.scq != nil {
		return 0, fmt.Errorf("memfabric: poll on %v: its completions go to a shared CQ: %w", c, ib.ErrInvalidArgument)
	}
	n := 0
	for n < len(wcs) && c.cq.head < c.cq.tail {
		e := &c.cq.ring[c.cq.head%uint64(len(c.cq.ring))]
		wcs[n] = e.c
		if e.srq != nil {
			e.srq.retire()
		} else if e.sq {
			c.sq.head = max(c.sq.head, e.idx+1)
		} else {
			c.rq.head = max(c.rq.head, e.idx+1)
		}
		c.cq.head++
		n++
	}
	return n, nil
}

// PollEvent implements ib.Conn.
func (c *Conn) PollEvent() (ib.Event, bool) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if len(c.events) == 0 {
		return 0, false
	}
	e := c.events[0]
	c.events = append(c.events[:0], c.events[1:]...)
	return e, true
}

// Disconnect implements ib.Conn.
func (c *Conn) Disconnect() error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if err := c.usable("disconnect"); err != nil {
		return err
	}
	c.enterError()
	c.sendDisconnect()
	c.p.wake()
	return nil
}

// sendDisconnect models DREQ/DREP: both ends get EventDisconnected once. The peer's QP is left
// alone: on a real fabric it stays in RTS until the peer calls Disconnect itself.
func (c *Conn) sendDisconnect() {
	if !c.discSent {
		c.discSent = true
		c.estPending = false
		c.pushEvent(ib.EventDisconnected)
	}
	if peer := c.peer(); peer != nil && !peer.closed && !peer.removed && !peer.discSent {
		peer.discSent = true
		peer.estPending = false
		peer.pushEvent(ib.EventDisconnected)
	}
}

// Close implements ib.Conn: a connected QP sends a DREQ first, as rdma_destroy_id does.
func (c *Conn) Close() error {
	c.closeConn(true)
	return nil
}

// Vanish makes this end disappear without a DREQ, as if its host crashed or its cable was
// pulled: the peer gets no event, and its work requests complete with
// StatusTransportRetryExceeded after Options.RetryTimeout. The Conn is closed afterwards.
func (c *Conn) Vanish() {
	c.closeConn(false)
}

func (c *Conn) closeConn(dreq bool) {
	p := c.p
	p.mu.Lock()
	if c.closed {
		p.mu.Unlock()
		return
	}
	if dreq && !c.removed {
		c.enterError()
		c.sendDisconnect()
	}
	c.closed = true
	c.leaveShared()
	c.unblock()
	c.signal()
	if peer := c.peer(); peer != nil {
		peer.dirty = true
	}
	p.wake()
	stop := p.stopIfDead()
	p.mu.Unlock()
	c.node.forget(c)
	c.timerWG.Wait()
	if stop {
		p.wg.Wait()
	}
}

// deviceRemoved is Node.Remove's part for one connection.
func (c *Conn) deviceRemoved() {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.closed || c.removed {
		return
	}
	c.removed = true
	c.unblock()
	c.pushEvent(ib.EventDeviceRemoved)
	if peer := c.peer(); peer != nil {
		peer.dirty = true
	}
	c.p.wake()
}
