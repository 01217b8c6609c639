package memfabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
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

// Listen listens on the node's address and port in the RDMA/CM TCP port space, as an id of
// an IP family.
func (n *Node) Listen(port uint16) (ib.Listener, error) {
	return n.listen(ib.FamilyIP, PortSpaceTCP, port)
}

// ListenPortSpace listens as an id of an IP family on the node's address and port in port
// space ps. The same port can be listened on in each port space. Over an IP-family listener
// RDMA/CM strips its header in every port space: an IB-space listener of this kind gets the
// 56 bytes an IP-family sender gave, and rejects what an IB-family sender sends (see Connect).
func (n *Node) ListenPortSpace(ps PortSpace, port uint16) (ib.Listener, error) {
	return n.listen(ib.FamilyIP, ps, port)
}

// ListenIB listens as an AF_IB id in the IB port space, on service ID 0x00000000013FPPPP (PPPP
// the port) at the node's GID: what an SRP target does to receive ib_srp's native IB CM
// logins. Its requests carry the raw 92 bytes of REQ private data and implement
// ib.IBAddresser; the listener implements ib.FamilyListener (ib.FamilyIB).
func (n *Node) ListenIB(port uint16) (ib.Listener, error) {
	return n.listen(ib.FamilyIB, PortSpaceIB, port)
}

func (n *Node) listen(fam ib.Family, ps PortSpace, port uint16) (ib.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr := netip.AddrPortFrom(n.addr, port)
	if fam == ib.FamilyIB {
		addr = netip.AddrPortFrom(n.GID(), port)
	}
	key := listenKey{ps, port}
	switch {
	case !ps.valid():
		return nil, fmt.Errorf("memfabric: listen %v in %v: %w", addr, ps, ib.ErrInvalidArgument)
	case n.removed:
		return nil, fmt.Errorf("memfabric: listen %v: %w", addr, ib.ErrDeviceRemoved)
	case n.closed:
		return nil, fmt.Errorf("memfabric: listen %v: %w", addr, ib.ErrClosed)
	case n.listeners[key] != nil:
		return nil, fmt.Errorf("memfabric: listen %v in %v: %w", addr, ps, unix.EADDRINUSE)
	}
	l := &listener{
		node: n,
		addr: addr,
		fam:  fam,
		ps:   ps,
		reqs: make(chan *connReq, n.f.opts.Backlog),
		done: make(chan struct{}),
	}
	n.listeners[key] = l
	return l, nil
}

// ConnectParams are the initiator's side of a connection (what rdma_connect is given).
type ConnectParams struct {
	QP ib.QPCaps
	// RNRRetryCount is how often the target retries a SEND that finds no receive posted here
	// (0..7, 7 = for ever; ib_srp uses 7).
	RNRRetryCount uint8
	// ResponderResources: RDMA READs the target may have outstanding against us (ib_srp: 4).
	ResponderResources uint8
	// InitiatorDepth: RDMA READs we may issue (ib_srp: 0).
	InitiatorDepth uint8
	// Family is how the request is sent. Zero means ib.FamilyIP: rdma_connect to an IP
	// address, which carries at most ib.MaxConnRequestPrivateData bytes behind RDMA/CM's
	// header. ib.FamilyIB sends the private data raw, up to ib.MaxIBConnRequestPrivateData
	// bytes, as the kernel's IB CM users do (ib_srp's dgid=...,service_id=...).
	Family ib.Family
	// PortSpace is where the request goes. Zero means PortSpaceIB for an ib.FamilyIB request
	// and PortSpaceTCP otherwise.
	PortSpace PortSpace
	// PKey is the partition key of the path (an ib.FamilyIB request's); zero means 0xffff,
	// the default partition.
	PKey uint16
	// Recv is posted before the request is sent, so the target can SEND as soon as it accepts.
	Recv []ib.RecvWR
	// CQ, when set, takes the completions of both queues, as ib.AcceptParams.CQ does on the
	// target side (a CQ of this node's PD): one initiator polls many connections at once.
	CQ ib.CQ
}

// Connect sends a connection request carrying privateData to dst (the target node's address;
// the port is the service's) in params.PortSpace and waits for the answer. On accept it
// returns the initiator's connection, whose PrivateData is the REP's; on reject a
// *RejectedError (reason RejectInvalidServiceID when nobody listens on that port in that port
// space). If ctx ends first the request is withdrawn; a target that accepts it afterwards sees
// EventDisconnected instead of EventEstablished.
//
// What the listener receives follows the two families, as Linux's RDMA CM delivers it
// (drivers/infiniband/core/cma.c: cma_format_hdr, cma_save_ip_info, cma_user_data_offset,
// cma_match_net_dev):
//
//	sender  listener  the listener's private data
//	IP      IP        the sender's bytes, zero-padded to 56 (the CMA header stripped)
//	IB      AF_IB     the sender's bytes, zero-padded to 92 (raw)
//	IP      AF_IB     92 bytes: the 36-byte CMA header, then the sender's 56
//	IB      IP        nothing: no listener matches, the CM answers REJ reason 28 (consumer
//	                  defined) with no private data
func (n *Node) Connect(ctx context.Context, dst netip.AddrPort, privateData []byte, params ConnectParams) (*Conn, error) {
	lim := n.f.opts.Limits
	if params.Family == 0 {
		params.Family = ib.FamilyIP
	}
	if params.PortSpace == 0 {
		params.PortSpace = PortSpaceTCP
		if params.Family == ib.FamilyIB {
			params.PortSpace = PortSpaceIB
		}
	}
	if params.PKey == 0 {
		params.PKey = 0xffff
	}
	ps := params.PortSpace
	if !ps.valid() || (params.Family != ib.FamilyIP && params.Family != ib.FamilyIB) {
		return nil, fmt.Errorf("memfabric: connect %v in %v, family %v: %w", dst, ps, params.Family, ib.ErrInvalidArgument)
	}
	if maxPriv := maxPrivateData(params.Family); len(privateData) > maxPriv {
		return nil, fmt.Errorf("memfabric: connect %v, family %v: %d bytes, at most %d: %w", dst, params.Family, len(privateData), maxPriv, ib.ErrPrivateDataTooLong)
	}
	if err := ib.CheckConnParams(params.QP, params.RNRRetryCount, params.ResponderResources, params.InitiatorDepth,
		params.Recv, lim, 0); err != nil {
		return nil, fmt.Errorf("memfabric: connect %v: %w", dst, err)
	}

	tn := n.f.node(dst.Addr())
	if tn == nil {
		return nil, fmt.Errorf("memfabric: connect %v: %w", dst, unix.EHOSTUNREACH)
	}
	p := newPair(n.f)
	ini, err := n.newConn(p, params.QP, netip.AddrPort{}, dst, true)
	if err != nil {
		return nil, fmt.Errorf("memfabric: connect %v: %w", dst, err)
	}
	if params.CQ != nil {
		if err := n.useShared(ini, &ib.AcceptParams{CQ: params.CQ}); err != nil {
			n.forget(ini)
			return nil, fmt.Errorf("memfabric: connect %v: %w", dst, err)
		}
	}
	p.mu.Lock()
	p.b = ini
	for i := range params.Recv {
		ini.postRecvLocked(&params.Recv[i])
	}
	p.mu.Unlock()

	r := &connReq{
		ps:     ps,
		sent:   slices.Clone(privateData),
		remote: ini.local,
		// What an AF_IB listener sees of the initiator (the path's source GID and P_Key).
		ibRemote: ib.IBAddr{GID: n.GID(), PKey: params.PKey},
		local:    dst,
		params:   params,
		ini:      ini,
		reply:    make(chan error, 1),
	}
	if err := tn.enqueue(r); err != nil {
		ini.Close()
		return nil, fmt.Errorf("memfabric: connect %v: %w", dst, err)
	}

	var rerr error
	select {
	case rerr = <-r.reply:
	case <-ctx.Done():
		r.mu.Lock()
		if r.state == reqPending {
			r.state = reqCanceled
			r.mu.Unlock()
			ini.Close()
			return nil, fmt.Errorf("memfabric: connect %v: %w", dst, ctx.Err())
		}
		r.mu.Unlock()
		// Answered while we gave up: the answer is already in the channel and wins.
		rerr = <-r.reply
	}
	if rerr != nil {
		ini.Close()
		return nil, fmt.Errorf("memfabric: connect %v: %w", dst, rerr)
	}
	return ini, nil
}

// enqueue hands a request to the listener on r.local's port in r's port space, with the
// private data and addresses that the families of both ends give it (Connect's table).
func (n *Node) enqueue(r *connReq) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.removed || n.closed {
		return unix.EHOSTUNREACH
	}
	l := n.listeners[listenKey{r.ps, r.local.Port()}]
	if l == nil {
		// Nobody listens on that port: the passive side's CM answers with a REJ.
		return &RejectedError{Reason: RejectInvalidServiceID}
	}
	switch {
	case r.params.Family == ib.FamilyIB && l.fam != ib.FamilyIB:
		// No CMA header: RDMA CM takes the request for an AF_IB one and finds no AF_IB
		// listener; the IB CM rejects it for the consumer.
		return &RejectedError{Reason: RejectConsumerDefined}
	case l.fam == ib.FamilyIB:
		r.priv = make([]byte, ib.MaxIBConnRequestPrivateData)
		at := 0
		if r.params.Family == ib.FamilyIP {
			at = cmaHeader(r.priv, r.remote, r.local)
		}
		copy(r.priv[at:], r.sent)
		r.ibLocal = ib.IBAddr{GID: n.GID(), PKey: r.params.PKey, ServiceID: ib.IBServiceID(r.local.Port())}
		r.remote = netip.AddrPortFrom(r.ibRemote.GID, 0)
		r.local = netip.AddrPortFrom(r.ibLocal.GID, r.local.Port())
	default:
		r.priv = padded(r.sent, ib.MaxConnRequestPrivateData)
	}
	r.ln = l
	select {
	case l.reqs <- r:
		n.pending[r] = struct{}{}
		return nil
	default:
		return fmt.Errorf("listen backlog of %d full: %w", cap(l.reqs), ib.ErrQueueFull)
	}
}

// cmaHeaderSize is sizeof(struct cma_hdr) (drivers/infiniband/core/cma.c).
const cmaHeaderSize = 36

// cmaHeader writes the header that an IP-family sender's RDMA CM puts in front of its private
// data (struct cma_hdr: version 0, the IP version in the high nibble, the source port, then
// source and destination address, each in a 16-byte union whose IPv4 form is the last 4
// bytes) and returns its size.
func cmaHeader(b []byte, src, dst netip.AddrPort) int {
	b[0] = 0
	b[1] = 6 << 4
	if src.Addr().Is4() {
		b[1] = 4 << 4
	}
	binary.BigEndian.PutUint16(b[2:], src.Port())
	for i, a := range []netip.Addr{src.Addr(), dst.Addr()} {
		at := 4 + 16*i
		if a.Is4() {
			v := a.As4()
			copy(b[at+12:at+16], v[:])
		} else {
			v := a.As16()
			copy(b[at:at+16], v[:])
		}
	}
	return cmaHeaderSize
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

// padded copies private data into a zeroed buffer of the message's full size: over IB and RoCE
// the CM always delivers the whole private-data field, whatever length the sender gave (iWARP
// delivers the exact length; consumers must cope with both).
func padded(b []byte, size int) []byte {
	out := make([]byte, size)
	copy(out, b)
	return out
}
