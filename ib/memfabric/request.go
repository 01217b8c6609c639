package memfabric

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// RejectReason is the IB CM REJ reason code.
type RejectReason uint8

const (
	// RejectInvalidServiceID: nobody listens on the port (IB CM reason 8).
	RejectInvalidServiceID RejectReason = 8
	// RejectConsumerDefined: the listener called Reject (IB CM reason 28; RDMA/CM turns
	// rdma_reject into this, and ib_srp expects it with an SRP_LOGIN_REJ as private data).
	RejectConsumerDefined RejectReason = 28
)

// RejectedError is what Connect returns when the connection request was rejected.
type RejectedError struct {
	Reason RejectReason
	// PrivateData is the REJ's private data (the SRP_LOGIN_REJ) zero-padded to
	// ib.MaxRejectPrivateData bytes as IB/RoCE deliver it; nil unless Reason is
	// RejectConsumerDefined.
	PrivateData []byte
}

func (e *RejectedError) Error() string {
	return "memfabric: connection rejected, reason " + strconv.Itoa(int(e.Reason)) +
		", " + strconv.Itoa(len(e.PrivateData)) + " bytes of private data"
}

// listener is an ib.Listener. closed, err and the drain of reqs are guarded by node.mu.
type listener struct {
	node *Node
	addr netip.AddrPort
	fam  ib.Family
	ps   PortSpace
	reqs chan *connReq
	done chan struct{}

	closed bool
	err    error
}

var _ ib.Listener = (*listener)(nil)

func (l *listener) Next(ctx context.Context) (ib.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		if l.fam == ib.FamilyIB {
			return ibConnReq{r}, nil
		}
		return r, nil
	case <-l.done:
		return nil, fmt.Errorf("memfabric: listener %v: %w", l.addr, l.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("memfabric: listener %v: %w", l.addr, ctx.Err())
	}
}

func (l *listener) Addr() netip.AddrPort { return l.addr }

// PD is the node's protection domain (ib.DeviceListener): a node is one device.
func (l *listener) PD() (ib.ProtectionDomain, bool) { return l.node.pd, true }

// Family implements ib.FamilyListener: the SRP target chooses the SRP_LOGIN_REQ layout by it.
func (l *listener) Family() ib.Family { return l.fam }

// PortSpace is the listener's port space.
func (l *listener) PortSpace() PortSpace { return l.ps }

func (l *listener) Close() error {
	n := l.node
	n.mu.Lock()
	if l.closed {
		n.mu.Unlock()
		return nil
	}
	if key := (listenKey{l.ps, l.addr.Port()}); n.listeners[key] == l {
		delete(n.listeners, key)
	}
	reqs := l.closeLocked(ib.ErrClosed)
	n.mu.Unlock()
	rejectAll(reqs)
	return nil
}

// closeLocked marks the listener closed and takes the queued requests out. Because enqueue also
// runs under node.mu and checks that the listener is still in the node's table, nothing is
// queued after this.
func (l *listener) closeLocked(err error) []*connReq {
	if l.closed {
		return nil
	}
	l.closed = true
	l.err = err
	close(l.done)
	var reqs []*connReq
	for {
		select {
		case r := <-l.reqs:
			reqs = append(reqs, r)
		default:
			return reqs
		}
	}
}

type reqState uint8

const (
	reqPending reqState = iota
	reqCanceled
	reqAnswered
)

// connReq is an ib.ConnRequest. Its immutable fields are set by Connect and enqueue; state is
// guarded by mu.
type connReq struct {
	ln     *listener
	ps     PortSpace
	sent   []byte // the sender's private data
	priv   []byte // what the listener receives
	remote netip.AddrPort
	local  netip.AddrPort
	// ibRemote and ibLocal are the AF_IB addresses, for requests to AF_IB listeners.
	ibRemote, ibLocal ib.IBAddr
	params            ConnectParams
	ini               *Conn
	// reply carries the answer to Connect: nil for accept, a *RejectedError otherwise.
	reply chan error

	mu    sync.Mutex
	state reqState
}

var _ ib.ConnRequest = (*connReq)(nil)

func (r *connReq) PrivateData() []byte        { return r.priv }
func (r *connReq) RemoteAddr() netip.AddrPort { return r.remote }
func (r *connReq) LocalAddr() netip.AddrPort  { return r.local }
func (r *connReq) ResponderResources() uint8  { return r.params.ResponderResources }
func (r *connReq) InitiatorDepth() uint8      { return r.params.InitiatorDepth }
func (r *connReq) Limits() ib.DeviceLimits    { return r.ln.node.f.opts.Limits }
func (r *connReq) PD() ib.ProtectionDomain    { return r.ln.node.pd }
func (r *connReq) String() string             { return fmt.Sprintf("request %v -> %v", r.remote, r.local) }

// ibConnReq is a request that an AF_IB listener delivers: it also has the InfiniBand
// addresses of both ends.
type ibConnReq struct{ *connReq }

var _ ib.IBAddresser = ibConnReq{}

func (r ibConnReq) RemoteIB() ib.IBAddr { return r.ibRemote }
func (r ibConnReq) LocalIB() ib.IBAddr  { return r.ibLocal }

// answer sends a rejection if the request is still pending (used on listener close).
func (r *connReq) answer(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == reqPending {
		r.reply <- err
	}
	r.answered()
}

// answered marks the request answered. Called with r.mu held (r.mu before node.mu).
func (r *connReq) answered() {
	r.state = reqAnswered
	r.ln.node.forgetReq(r)
}

func (r *connReq) Reject(privateData []byte) error {
	if len(privateData) > ib.MaxRejectPrivateData {
		return fmt.Errorf("memfabric: reject %v: %d bytes: %w", r, len(privateData), ib.ErrPrivateDataTooLong)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case reqAnswered:
		return fmt.Errorf("memfabric: reject %v: %w", r, ib.ErrAnswered)
	case reqPending:
		r.reply <- &RejectedError{Reason: RejectConsumerDefined, PrivateData: padded(privateData, ib.MaxRejectPrivateData)}
	}
	// A withdrawn request: the REJ goes nowhere.
	r.answered()
	return nil
}

func (r *connReq) Accept(ap ib.AcceptParams) (ib.Conn, error) {
	lim := r.ln.node.f.opts.Limits
	// The initiator-depth rule is stricter than verbs, where the mismatch shows up later as
	// stalled RDMA READs or a failed QP transition on the initiator.
	if err := ib.CheckAccept(&ap, r.params.ResponderResources, lim, 0); err != nil {
		return nil, fmt.Errorf("memfabric: accept %v: %w", r, err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == reqAnswered {
		return nil, fmt.Errorf("memfabric: accept %v: %w", r, ib.ErrAnswered)
	}
	ini := r.ini
	p := ini.p
	t, err := r.ln.node.newConn(p, ap.QP, r.local, r.remote, false)
	if err != nil {
		if r.state == reqPending {
			r.reply <- &RejectedError{Reason: RejectInvalidServiceID}
		}
		r.answered()
		return nil, fmt.Errorf("memfabric: accept %v: %w", r, err)
	}
	if err := r.ln.node.useShared(t, &ap); err != nil {
		r.ln.node.forget(t)
		return nil, fmt.Errorf("memfabric: accept %v: %w", r, err)
	}
	canceled := r.state == reqCanceled
	r.answered()

	p.mu.Lock()
	p.a = t
	t.rnrRetry = r.params.RNRRetryCount
	t.rdDepth = ap.InitiatorDepth
	ini.rnrRetry = ap.RNRRetryCount
	ini.rdDepth = min(r.params.InitiatorDepth, ap.ResponderResources)
	ini.privateData = padded(ap.PrivateData, ib.MaxAcceptPrivateData)
	for i := range ap.Recv {
		t.postRecvLocked(&ap.Recv[i])
	}
	if canceled {
		// The initiator gave up before the REP arrived: the connection never establishes.
		t.discSent = true
		t.pushEvent(ib.EventDisconnected)
	} else {
		if r.ln.node.f.opts.DelayEstablished {
			t.estPending = true
		} else {
			t.pushEvent(ib.EventEstablished)
		}
		ini.pushEvent(ib.EventEstablished)
	}
	p.start()
	p.mu.Unlock()
	if !canceled {
		r.reply <- nil
	}
	return t, nil
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
