package memfabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/srptarget/srptarget/ib"
)

// The initiator's side of connecting: the request a node sends, and what the target node's
// listener receives of it, as RDMA/CM delivers it between the two address families.

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

// padded copies private data into a zeroed buffer of the message's full size: over IB and RoCE
// the CM always delivers the whole private-data field, whatever length the sender gave (iWARP
// delivers the exact length; consumers must cope with both).
func padded(b []byte, size int) []byte {
	out := make([]byte, size)
	copy(out, b)
	return out
}
