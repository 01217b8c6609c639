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
