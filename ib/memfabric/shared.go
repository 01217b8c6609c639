package memfabric

import (
	"fmt"
	"slices"
	"sync"

	"github.com/srptarget/srptarget/ib"
)

// DefaultSharedLimits are a node's limits for shared queues unless Options.Shared says
// otherwise: in the range of a ConnectX HCA.
var DefaultSharedLimits = ib.SharedLimits{MaxCQE: 1 << 22, CompVectors: 4, MaxSRQWR: 1 << 15, MaxSRQSGE: 31}

var _ ib.SharedQueues = (*pd)(nil)

// SharedLimits implements ib.SharedQueues.
func (p *pd) SharedLimits() ib.SharedLimits { return p.node.f.opts.Shared }

// NewCQ implements ib.SharedQueues.
func (p *pd) NewCQ(ch ib.CompChannel, depth, vector int) (ib.CQ, error) {
	lim := p.SharedLimits()
	if depth < 1 || depth > lim.MaxCQE || vector < 0 {
		return nil, fmt.Errorf("memfabric: CQ of %d entries on vector %d (max %d): %w", depth, vector, lim.MaxCQE, ib.ErrInvalidArgument)
	}
	c, ok := ch.(*compChannel)
	if !ok || c.node != p.node {
		return nil, fmt.Errorf("memfabric: create CQ: completion channel %T not of this node: %w", ch, ib.ErrInvalidArgument)
	}
	if err := p.node.usable(); err != nil {
		return nil, fmt.Errorf("memfabric: create CQ: %w", err)
	}
	if err := c.use(1); err != nil {
		return nil, fmt.Errorf("memfabric: create CQ: %w", err)
	}
	return &sharedCQ{node: p.node, ring: make([]sharedEntry, depth), ch: c,
		vector: vector % max(lim.CompVectors, 1)}, nil
}

// NewSRQ implements ib.SharedQueues.
func (p *pd) NewSRQ(depth, maxSGE int) (ib.SRQ, error) {
	lim := p.SharedLimits()
	if lim.MaxSRQWR == 0 {
		return nil, fmt.Errorf("memfabric: create SRQ: %w", ib.ErrNotSupported)
	}
	if depth < 1 || depth > lim.MaxSRQWR || maxSGE < 1 || maxSGE > lim.MaxSRQSGE {
		return nil, fmt.Errorf("memfabric: SRQ of %d receives of %d SGEs (max %d, %d): %w",
			depth, maxSGE, lim.MaxSRQWR, lim.MaxSRQSGE, ib.ErrInvalidArgument)
	}
	if err := p.node.usable(); err != nil {
		return nil, fmt.Errorf("memfabric: create SRQ: %w", err)
	}
	return &srq{node: p.node, maxSGE: maxSGE, ring: newSlotRing[recvSlot](depth), conns: map[*Conn]struct{}{}}, nil
}

// usable reports why the node can make nothing new.
func (n *Node) usable() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.removed:
		return ib.ErrDeviceRemoved
	case n.closed:
		return ib.ErrClosed
	}
	return nil
}

// sharedCQ is an ib.CQ. Lock order: a pair's mu, then a sharedCQ's mu, then an srq's mu.
type sharedCQ struct {
	node   *Node
	vector int
	ch     *compChannel

	mu         sync.Mutex
	ring       []sharedEntry
	head, tail uint64
	armed      bool
	overrun    bool
	users      int // QPs using it
	closed     bool
}

// sharedEntry is a completion with what polling it retires: a slot of conn's send queue (sq),
// of its receive queue, or of the SRQ it came from.
type sharedEntry struct {
	cqEntry
	conn *Conn
}

// add queues a completion of c, under c.p.mu. A full CQ overruns: the completion is lost and
// the CQ unusable, as verbs' asynchronous CQ error leaves it.
func (q *sharedCQ) add(c *Conn, e cqEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tail-q.head == uint64(len(q.ring)) {
		q.overrun = true
		return
	}
	q.ring[q.tail%uint64(len(q.ring))] = sharedEntry{e, c}
	q.tail++
	if q.armed {
		q.armed = false
		q.ch.raise(q)
	}
}

// Poll implements ib.CQ.
func (q *sharedCQ) Poll(wcs []ib.Completion) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return 0, fmt.Errorf("memfabric: poll CQ: %w", ib.ErrClosed)
	case q.overrun:
		return 0, fmt.Errorf("memfabric: poll CQ: overrun: %w", ib.ErrQueueFull)
	}
	n := 0
	for n < len(wcs) && q.head < q.tail {
		e := &q.ring[q.head%uint64(len(q.ring))]
		wcs[n] = e.c
		switch {
		case e.srq != nil:
			e.srq.retire()
		case e.sq:
			e.conn.sqRetired = max(e.conn.sqRetired, e.idx+1)
		default:
			e.conn.rqRetired = max(e.conn.rqRetired, e.idx+1)
		}
		*e = sharedEntry{}
		q.head++
		n++
	}
	return n, nil
}

// PollPair implements ib.CQ.
func (q *sharedCQ) PollPair(other ib.CQ, wcs []ib.Completion) (int, error) {
	n, err := q.Poll(wcs)
	if err != nil || n == len(wcs) {
		return n, err
	}
	o, ok := other.(*sharedCQ)
	if !ok || o.node != q.node {
		return n, fmt.Errorf("memfabric: poll CQ pair: %T not of this node: %w", other, ib.ErrInvalidArgument)
	}
	m, err := o.Poll(wcs[n:])
	return n + m, err
}

// Arm implements ib.CQ.
func (q *sharedCQ) Arm() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("memfabric: arm CQ: %w", ib.ErrClosed)
	}
	q.armed = true
	return nil
}

// Close implements ib.CQ.
func (q *sharedCQ) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.users > 0 {
		return fmt.Errorf("memfabric: close CQ: %d queue pairs use it: %w", q.users, ib.ErrInvalidArgument)
	}
	if !q.closed {
		q.closed = true
		_ = q.ch.use(-1)
	}
	return nil
}

// use counts a QP using the CQ (delta 1) or one closed (-1).
func (q *sharedCQ) use(delta int) {
	q.mu.Lock()
	q.users += delta
	q.mu.Unlock()
}

// retired brings c's queue heads up to what polling its CQs retired, under c.p.mu.
// sqRetired is written under the mutex of the CQ of the send queue's completions, rqRetired
// under the receive CQ's.
func (c *Conn) retired() {
	sq := c.scq
	if c.sendCQ != nil {
		sq = c.sendCQ
	}
	sq.mu.Lock()
	c.sq.head = max(c.sq.head, c.sqRetired)
	sq.mu.Unlock()
	c.scq.mu.Lock()
	c.rq.head = max(c.rq.head, c.rqRetired)
	c.scq.mu.Unlock()
}

// srq is an ib.SRQ. [next, tail) of the ring are posted and not consumed; unpolled counts the
// consumed ones whose completion is not polled yet, which still hold their slot.
type srq struct {
	node   *Node
	maxSGE int

	mu       sync.Mutex
	ring     slotRing[recvSlot]
	next     uint64
	unpolled int
	conns    map[*Conn]struct{} // QPs attached
	// rnr are the attached QPs whose peer's SEND found the SRQ empty (receiver not ready):
	// the next PostRecv wakes them. wake is its scratch.
	rnr    []*Conn
	wake   []*Conn
	closed bool
}

// PostRecv implements ib.SRQ. Receives posted wake the peers of attached QPs whose SENDs wait
// for one (RNR).
func (s *srq) PostRecv(wrs []ib.RecvWR) (int, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, fmt.Errorf("memfabric: post receive on SRQ: %w", ib.ErrClosed)
	}
	n := 0
	var err error
	for i := range wrs {
		if err = ib.CheckRecvWR(&wrs[i], s.maxSGE); err != nil {
			err = fmt.Errorf("memfabric: post receive on SRQ: work request %d (id %#x): %w", i, wrs[i].ID, err)
			break
		}
		if int(s.ring.tail-s.next)+s.unpolled >= len(s.ring.slots) {
			err = fmt.Errorf("memfabric: post receive on SRQ: work request %d (id %#x): %d outstanding: %w",
				i, wrs[i].ID, len(s.ring.slots), ib.ErrQueueFull)
			break
		}
		r := s.ring.slot(s.ring.tail)
		r.id = wrs[i].ID
		r.sges = append(r.sges[:0], wrs[i].SGL...)
		s.ring.tail++
		n++
	}
	var waiting []*Conn
	if n > 0 && len(s.rnr) > 0 {
		s.wake, s.rnr = s.rnr, s.wake[:0]
		waiting = s.wake
	}
	s.mu.Unlock()
	for i, c := range waiting {
		c.p.mu.Lock()
		if peer := c.peer(); peer != nil && peer.blk == blockRNR {
			peer.dirty = true
			c.p.wake()
		}
		c.p.mu.Unlock()
		waiting[i] = nil
	}
	return n, err
}

// blocked records that a SEND to c found the SRQ empty, under c's pair's mu, and reports
// whether it still is (false: a receive was posted since, the SEND goes on).
func (s *srq) blocked(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next != s.ring.tail {
		return false
	}
	if !slices.Contains(s.rnr, c) {
		s.rnr = append(s.rnr, c)
	}
	return true
}

// take consumes the oldest receive for a SEND, under the receiving pair's mu. Its SGEs are
// copied into sges (the receiving connection's): once consumed, the slot may be posted again.
func (s *srq) take(sges []ib.SGE) (recvSlot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == s.ring.tail {
		return recvSlot{}, false
	}
	r := s.ring.slot(s.next)
	s.next++
	s.unpolled++
	return recvSlot{id: r.id, sges: append(sges[:0], r.sges...)}, true
}

// empty reports whether no receive is posted.
func (s *srq) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next == s.ring.tail
}

// retire frees the slot of a consumed receive whose completion was polled.
func (s *srq) retire() {
	s.mu.Lock()
	s.unpolled--
	s.mu.Unlock()
}

// attach and detach keep the QPs using the SRQ.
func (s *srq) attach(c *Conn) {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
}

func (s *srq) detach(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if i := slices.Index(s.rnr, c); i >= 0 {
		s.rnr = slices.Delete(s.rnr, i, i+1)
	}
	s.mu.Unlock()
}

// Close implements ib.SRQ.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) > 0 {
		return fmt.Errorf("memfabric: close SRQ: %d queue pairs use it: %w", len(s.conns), ib.ErrInvalidArgument)
	}
	s.closed = true
	return nil
}

// useShared attaches the accepted connection c to the shared queues of ap, which must be this
// node's; called before c is visible to another goroutine.
func (n *Node) useShared(c *Conn, ap *ib.AcceptParams) error {
	cq := func(x ib.CQ) (*sharedCQ, error) {
		if x == nil {
			return nil, nil
		}
		q, ok := x.(*sharedCQ)
		if !ok || q.node != n {
			return nil, fmt.Errorf("CQ %T of another device: %w", x, ib.ErrInvalidArgument)
		}
		q.mu.Lock()
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("CQ: %w", ib.ErrClosed)
		}
		return q, nil
	}
	var err error
	if c.scq, err = cq(ap.CQ); err != nil {
		return err
	}
	if c.sendCQ, err = cq(ap.SendCQ); err != nil {
		c.scq = nil
		return err
	}
	if ap.SRQ != nil {
		s, ok := ap.SRQ.(*srq)
		if !ok || s.node != n {
			return fmt.Errorf("SRQ %T of another device: %w", ap.SRQ, ib.ErrInvalidArgument)
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return fmt.Errorf("SRQ: %w", ib.ErrClosed)
		}
		c.srq = s
		s.attach(c)
	}
	if c.scq != nil {
		c.scq.use(1)
	}
	if c.sendCQ != nil {
		c.sendCQ.use(1)
	}
	c.onEvent = ap.OnEvent
	if ap.OnQP != nil {
		ap.OnQP(c.qpn)
	}
	return nil
}

// leaveShared detaches a closed connection from its shared queues, once.
func (c *Conn) leaveShared() {
	if c.srq != nil {
		c.srq.detach(c)
	}
	if c.scq != nil {
		c.scq.use(-1)
	}
	if c.sendCQ != nil {
		c.sendCQ.use(-1)
	}
}
