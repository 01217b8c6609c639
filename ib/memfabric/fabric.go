package memfabric

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// PortSpace is an RDMA/CM port space, numbered as librdmacm's enum rdma_port_space. A listener
// receives only the connection requests sent to its port in its port space. What a request's
// private data holds depends on the families of its sender and of the listener (ib.Family),
// not on the port space.
type PortSpace uint16

const (
	// PortSpaceTCP (RDMA_PS_TCP) is what rdma_connect to an IP address uses: RoCE, iWARP and
	// IB with IPoIB addresses (ib_srp's dest=).
	PortSpaceTCP PortSpace = 0x0106
	// PortSpaceIB (RDMA_PS_IB) is where RDMA/CM binds AF_IB listeners, the only way user
	// space can receive native IB CM REQs (ib_srp's dgid=...,service_id=0x013fPPPP). The
	// port is the low 16 bits of the service ID 0x00000000013FPPPP.
	PortSpaceIB PortSpace = 0x013F
)

func (ps PortSpace) valid() bool { return ps == PortSpaceTCP || ps == PortSpaceIB }

func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceTCP:
		return "RDMA_PS_TCP"
	case PortSpaceIB:
		return "RDMA_PS_IB"
	}
	return fmt.Sprintf("port space %#04x", uint16(ps))
}

// maxPrivateData is how much private data a connection request sent by an id of family f can
// carry: an IP-family sender's RDMA/CM takes 36 of the IB CM REQ's 92 bytes for its header.
func maxPrivateData(f ib.Family) int {
	if f == ib.FamilyIB {
		return ib.MaxIBConnRequestPrivateData
	}
	return ib.MaxConnRequestPrivateData
}

// listenKey names a listener: a port in a port space.
type listenKey struct {
	ps   PortSpace
	port uint16
}

// Fabric connects nodes. Every goroutine and timer it starts ends with Close.
type Fabric struct {
	opts Options

	mrSeq  atomic.Uint64
	keySeq atomic.Uint32
	qpSeq  atomic.Uint32 // queue pair numbers, unique in the fabric as in an HCA

	mu     sync.Mutex
	nodes  map[netip.Addr]*Node
	all    []*Node // including removed nodes whose address was reused
	closed bool
}

// New makes an empty fabric.
func New(opts Options) *Fabric {
	if opts.Limits == (ib.DeviceLimits{}) {
		opts.Limits = DefaultLimits
	}
	if opts.RNRTimer <= 0 {
		opts.RNRTimer = 2 * time.Millisecond
	}
	if opts.RetryTimeout <= 0 {
		opts.RetryTimeout = 10 * time.Millisecond
	}
	if opts.Backlog <= 0 {
		opts.Backlog = 128
	}
	switch {
	case opts.Shared == (ib.SharedLimits{}):
		opts.Shared = DefaultSharedLimits
	case opts.Shared.MaxSRQWR < 0:
		opts.Shared.MaxSRQWR, opts.Shared.MaxSRQSGE = 0, 0
	}
	return &Fabric{opts: opts, nodes: make(map[netip.Addr]*Node)}
}

// NewNode adds a node (one RDMA device with one IP address). An address whose node was removed
// can be reused: that models the device coming back.
func (f *Fabric) NewNode(addr netip.Addr) (*Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("memfabric: new node %v: %w", addr, ib.ErrClosed)
	}
	if old := f.nodes[addr]; old != nil && !old.isRemoved() {
		return nil, fmt.Errorf("memfabric: new node %v: %w", addr, unix.EADDRINUSE)
	}
	n := &Node{
		f:         f,
		addr:      addr,
		listeners: make(map[listenKey]*listener),
		conns:     make(map[*Conn]struct{}),
		pending:   make(map[*connReq]struct{}),
		nextPort:  40000,
	}
	n.pd = &pd{node: n, byRKey: make(map[uint32]*mr)}
	f.nodes[addr] = n
	f.all = append(f.all, n)
	return n, nil
}

// node finds the node of addr, an address or a GID (Node.GID).
func (f *Fabric) node(addr netip.Addr) *Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.nodes[addr]; n != nil {
		return n
	}
	for _, n := range f.nodes {
		if n.GID() == addr {
			return n
		}
	}
	return nil
}

// Close closes every listener and connection of every node and waits for the fabric's
// goroutines and timers.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	nodes := f.all
	f.mu.Unlock()
	for _, n := range nodes {
		n.close()
	}
	return nil
}

// Node is one device with one address: it listens, connects and registers memory.
type Node struct {
	f    *Fabric
	addr netip.Addr
	pd   *pd

	mu        sync.Mutex
	removed   bool
	closed    bool
	listeners map[listenKey]*listener
	conns     map[*Conn]struct{}
	pending   map[*connReq]struct{} // requests to this node not answered yet
	nextPort  uint16
}

// Addr is the node's address.
func (n *Node) Addr() netip.Addr { return n.addr }

// PD is the node's protection domain.
func (n *Node) PD() ib.ProtectionDomain { return n.pd }

// Limits are the node's device limits.
func (n *Node) Limits() ib.DeviceLimits { return n.f.opts.Limits }

func (n *Node) isRemoved() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.removed
}

// GID is the node's InfiniBand GID, what an AF_IB listener and its peers see as the node's
// address: the link-local subnet prefix fe80::/64 and, as interface ID, the low 8 bytes of the
// node's address (of its IPv4-mapped form for an IPv4 address).
func (n *Node) GID() netip.Addr {
	a := n.addr.As16()
	var g [16]byte
	g[0], g[1] = 0xfe, 0x80
	copy(g[8:], a[8:])
	return netip.AddrFrom16(g)
}

// newConn makes an unconnected QP with its queues and registers it with the node.
// An initiator's local address gets an ephemeral port.
func (n *Node) newConn(p *pair, caps ib.QPCaps, local, remote netip.AddrPort, ephemeral bool) (*Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.removed:
		return nil, ib.ErrDeviceRemoved
	case n.closed:
		return nil, ib.ErrClosed
	}
	if ephemeral {
		local = netip.AddrPortFrom(n.addr, n.nextPort)
		n.nextPort++
		if n.nextPort == 0 {
			n.nextPort = 40000
		}
	}
	c := newConn(n, caps, local, remote)
	c.p = p
	c.qpn = n.f.qpSeq.Add(1)
	n.conns[c] = struct{}{}
	return c, nil
}

func (n *Node) forget(c *Conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// Remove simulates hot removal of the node's device: every connection gets
// EventDeviceRemoved and stops working (no flush completions are generated: after a device is
// gone a consumer must not wait for them), listeners fail with ib.ErrDeviceRemoved, and peers
// see a QP that no longer answers. Close the connections to release them.
func (n *Node) Remove() {
	n.mu.Lock()
	if n.removed {
		n.mu.Unlock()
		return
	}
	n.removed = true
	n.closeListenersLocked(ib.ErrDeviceRemoved)
	reqs := n.pendingLocked()
	conns := n.connsLocked()
	n.mu.Unlock()
	n.pd.mu.Lock()
	n.pd.removed = true
	n.pd.mu.Unlock()
	rejectAll(reqs)
	for _, c := range conns {
		c.deviceRemoved()
	}
}

func (n *Node) close() {
	n.mu.Lock()
	n.closed = true
	n.closeListenersLocked(ib.ErrClosed)
	reqs := n.pendingLocked()
	conns := n.connsLocked()
	n.mu.Unlock()
	rejectAll(reqs)
	for _, c := range conns {
		c.Close()
	}
}

// pendingLocked returns the unanswered requests, queued or already handed out by Next: a node
// that closes or loses its device answers them all with a REJ, so no Connect waits for ever.
func (n *Node) pendingLocked() []*connReq {
	reqs := make([]*connReq, 0, len(n.pending))
	for r := range n.pending {
		reqs = append(reqs, r)
	}
	return reqs
}

func (n *Node) forgetReq(r *connReq) {
	n.mu.Lock()
	delete(n.pending, r)
	n.mu.Unlock()
}

func (n *Node) connsLocked() []*Conn {
	conns := make([]*Conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	return conns
}

// closeListenersLocked closes every listener and returns the requests still queued, to be
// rejected once n.mu is released (rejecting takes the request's lock, which Accept holds while
// it takes n.mu).
func (n *Node) closeListenersLocked(err error) []*connReq {
	var reqs []*connReq
	for key, l := range n.listeners {
		reqs = append(reqs, l.closeLocked(err)...)
		delete(n.listeners, key)
	}
	return reqs
}

func rejectAll(reqs []*connReq) {
	for _, r := range reqs {
		r.answer(&RejectedError{Reason: RejectInvalidServiceID})
	}
}
