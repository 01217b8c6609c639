package ib

import (
	"fmt"
	"net/netip"
)

// Family is the address family of a listener. The Linux RDMA CM puts a 36-byte header of its
// own (version, IP version, port, source and destination IP) in front of the private data of
// the IB CM REQs that ids of an IP family send, and takes it off again for listeners of an IP
// family, in every port space; ids of the AF_IB family send and receive the REQ's private
// data raw (drivers/infiniband/core/cma.c: cma_user_data_offset is 0 for AF_IB and
// sizeof(struct cma_hdr) otherwise). So the family of the listener, not its port space,
// decides what a connection request's private data holds: for SRP, the 56-byte
// srp_login_req_rdma or the 64-byte srp_login_req (include/scsi/srp.h).
type Family uint8

const (
	// FamilyIP is AF_INET or AF_INET6: what rdma_connect to an IP address reaches (RoCE,
	// iWARP, InfiniBand with IPoIB addresses; ib_srp's dest=). A request carries at most
	// MaxConnRequestPrivateData bytes.
	FamilyIP Family = iota + 1
	// FamilyIB is AF_IB, native InfiniBand addressing by GID and service ID: how user space
	// receives the REQs that kernel users of the IB CM send (ib_srp's dgid=...,service_id=...).
	// A request carries the IB CM REQ's private data raw, MaxIBConnRequestPrivateData bytes.
	// The kernel delivers AF_IB requests only on InfiniBand link-layer ports, and only to
	// listeners in the initial network namespace (cma.c: cma_ib_acquire_dev validates the
	// source GID as an IB GID; cma_ib_id_from_event looks AF_IB listeners up in init_net).
	FamilyIB
)

var familyNames = [...]string{FamilyIP: "IP", FamilyIB: "AF_IB"}

func (f Family) String() string { return enumName(familyNames[:], f, "family") }

// MaxIBConnRequestPrivateData is the private data of an IB CM REQ (include/rdma/ib_cm.h,
// IB_CM_REQ_PRIVATE_DATA_SIZE): what a connection request to an AF_IB listener carries.
const MaxIBConnRequestPrivateData = 92

// FamilyListener is implemented by listeners that know their address family. A consumer that
// parses private data by layout asks it; a listener that does not implement it leaves the
// consumer to guess from the length.
type FamilyListener interface {
	Family() Family
}

// IBAddr is an InfiniBand address as an AF_IB RDMA CM id carries it (struct sockaddr_ib,
// include/rdma/ib.h; rdma-core's <infiniband/ib.h>): a port's GID, a partition key and a
// service ID. Linux prints GIDs in IPv6 notation (%pI6), so the GID is a 16-byte netip.Addr.
type IBAddr struct {
	GID netip.Addr
	// PKey is the partition key of the path, the membership bit (0x8000, full member)
	// included.
	PKey      uint16
	ServiceID uint64
}

// String writes the address as "gid fe80::2:c903:a0:b0c2 pkey 0xffff", with the service ID
// when it is set; an unset GID as "::", which stands for every port where one is bound.
func (a IBAddr) String() string {
	g := a.GID
	if !g.IsValid() {
		g = netip.IPv6Unspecified()
	}
	s := fmt.Sprintf("gid %v pkey %#04x", g, a.PKey)
	if a.ServiceID != 0 {
		s += fmt.Sprintf(" service_id %016x", a.ServiceID)
	}
	return s
}

// IBAddresser is implemented by the connection requests of AF_IB listeners: their addresses
// as InfiniBand has them. RemoteAddr and LocalAddr of such a request carry the GIDs as
// netip.Addr, with the port of the service ID locally and 0 for the peer, which has none.
type IBAddresser interface {
	RemoteIB() IBAddr
	LocalIB() IBAddr
}

// Service IDs in the form RDMA CM binds AF_IB ids in its IB port space (include/rdma/rdma_cm.h:
// RDMA_IB_IP_PS_MASK, RDMA_IB_IP_PS_IB): 0x00000000013FPPPP, PPPP the port. rdma_bind_addr
// refuses any other service ID for an RDMA_PS_IB id with EPROTONOSUPPORT, which is why a
// user-space target cannot listen on the node GUID as the kernel's ib_srpt does.
const (
	IBServiceIDMask   uint64 = 0xFFFFFFFFFFFF0000
	IBServiceIDPrefix uint64 = 0x00000000013F0000
)

// IBServiceID is the service ID of port in RDMA CM's IB port space.
func IBServiceID(port uint16) uint64 { return IBServiceIDPrefix | uint64(port) }

// IBServicePort returns the port of an RDMA CM IB port space service ID, and whether sid is
// one.
func IBServicePort(sid uint64) (uint16, bool) {
	if sid&IBServiceIDMask != IBServiceIDPrefix {
		return 0, false
	}
	return uint16(sid), true
}
