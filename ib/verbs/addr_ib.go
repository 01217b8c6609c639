package verbs

import (
	"encoding/binary"
	"net/netip"

	"github.com/srptarget/srptarget/ib"
)

// sockaddrIB is a view of struct sockaddr_ib (kernel include/rdma/ib.h, rdma-core's
// <infiniband/ib.h>), the address of an AF_IB RDMA CM id, as librdmacm reads and writes it:
//
//	offset size field
//	0      2    sib_family    AF_IB (27), host order
//	2      2    sib_pkey      big endian
//	4      4    sib_flowinfo  big endian
//	8      16   sib_addr      the GID, network order
//	24     8    sib_sid       service ID, big endian
//	32     8    sib_sid_mask  big endian
//	40     8    sib_scope_id  host order
//
// shim.c checks these offsets against the header at build time.
type sockaddrIB []byte

const sockaddrIBSize = 48 // sizeof(struct sockaddr_ib)

func (s sockaddrIB) Family() uint16   { return binary.NativeEndian.Uint16(s[0:]) }
func (s sockaddrIB) PKey() uint16     { return binary.BigEndian.Uint16(s[2:]) }
func (s sockaddrIB) FlowInfo() uint32 { return binary.BigEndian.Uint32(s[4:]) }
func (s sockaddrIB) GID() netip.Addr  { return netip.AddrFrom16([16]byte(s[8:24])) }
func (s sockaddrIB) SID() uint64      { return binary.BigEndian.Uint64(s[24:]) }
func (s sockaddrIB) SIDMask() uint64  { return binary.BigEndian.Uint64(s[32:]) }
func (s sockaddrIB) ScopeID() uint64  { return binary.NativeEndian.Uint64(s[40:]) }

func (s sockaddrIB) SetFamily(f uint16)   { binary.NativeEndian.PutUint16(s[0:], f) }
func (s sockaddrIB) SetPKey(p uint16)     { binary.BigEndian.PutUint16(s[2:], p) }
func (s sockaddrIB) SetFlowInfo(f uint32) { binary.BigEndian.PutUint32(s[4:], f) }
func (s sockaddrIB) SetSID(sid uint64)    { binary.BigEndian.PutUint64(s[24:], sid) }
func (s sockaddrIB) SetSIDMask(m uint64)  { binary.BigEndian.PutUint64(s[32:], m) }
func (s sockaddrIB) SetScopeID(id uint64) { binary.NativeEndian.PutUint64(s[40:], id) }

func (s sockaddrIB) SetGID(g netip.Addr) {
	b := g.As16()
	copy(s[8:24], b[:])
}

// encodeSockaddrIB builds the sockaddr_ib for a: the GID (the zero GID, or an invalid one,
// binds every InfiniBand port), the P_Key, and the service ID with a full mask, which makes
// rdma_bind_addr take the service ID as it is (cma_select_ib_ps in
// drivers/infiniband/core/cma.c: the masked service ID must be 0x00000000013FPPPP for an
// RDMA_PS_IB id). A zero service ID gets a zero mask: any port, which is what a bind that only
// ties an id to a device wants.
func encodeSockaddrIB(a ib.IBAddr) (sockaddr, error) {
	var sa sockaddr
	g := a.GID
	switch {
	case !g.IsValid():
		g = netip.IPv6Unspecified()
	case !g.Is6() || g.Is4In6() || g.Zone() != "":
		return sa, errorf("address %v: not a GID: %w", a, ib.ErrInvalidArgument)
	}
	s := sockaddrIB(sa[:sockaddrIBSize])
	s.SetFamily(afIB)
	s.SetPKey(a.PKey)
	s.SetGID(g)
	s.SetSID(a.ServiceID)
	if a.ServiceID != 0 {
		s.SetSIDMask(^uint64(0))
	}
	return sa, nil
}

// decodeSockaddrIB reads an AF_IB sockaddr written by librdmacm; ok is false for another
// family or a short buffer.
func decodeSockaddrIB(b []byte) (ib.IBAddr, bool) {
	if len(b) < sockaddrIBSize || sockaddrIB(b).Family() != afIB {
		return ib.IBAddr{}, false
	}
	s := sockaddrIB(b)
	return ib.IBAddr{GID: s.GID(), PKey: s.PKey(), ServiceID: s.SID()}, true
}

// ibAddrPort is the netip form of an AF_IB address, for RemoteAddr and LocalAddr: the GID
// with the port of the service ID, 0 when it is not in RDMA CM's IB port space.
func ibAddrPort(a ib.IBAddr) netip.AddrPort {
	port, _ := ib.IBServicePort(a.ServiceID)
	return netip.AddrPortFrom(a.GID, port)
}
