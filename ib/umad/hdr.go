// Package umad sends and receives InfiniBand management datagrams (MADs) through the kernel's
// ib_umad (/dev/infiniband/umadN): a GSI agent of one management class on one HCA port. It is
// what libibumad does, done here with libc calls (shim.c) so that the binary needs no library
// beyond libc, and so that ibsim's umad2sim can replace the kernel in tests.
package umad

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
)

// HdrSize is sizeof(struct ib_user_mad_hdr_old) (include/uapi/rdma/ib_user_mad.h), the header
// in front of every MAD read from or written to a umad file on which IB_USER_MAD_ENABLE_PKEY
// was not called. That ABI has no P_Key index: MADs are sent with P_Key index 0 (the default
// partition), and the index of a received one is not known.
const HdrSize = 56

// QP1QKey is the Q_Key of the general services QP (InfiniBand Architecture Specification:
// IB_QP1_QKEY), which a GSI MAD is sent with.
const QP1QKey = 0x80010000

// Errors.
var (
	// ErrTimeout: nothing arrived in time, or a request got no response.
	ErrTimeout = errors.New("umad: timed out")
	// ErrNotSupported: built without cgo or outside Linux.
	ErrNotSupported = errors.New("umad: not supported in this build")
)

// Addr is where a MAD comes from or goes to: the address part of struct ib_user_mad_hdr.
type Addr struct {
	QPN       uint32
	QKey      uint32
	LID       uint16
	SL        uint8
	PathBits  uint8
	GRH       bool
	GIDIndex  uint8
	HopLimit  uint8
	TClass    uint8
	GID       netip.Addr // with GRH
	FlowLabel uint32
}

// userMADHdr is a view of struct ib_user_mad_hdr_old:
//
//	0 id, 4 status, 8 timeout_ms, 12 retries, 16 length (host order); 20 qpn, 24 qkey (big
//	endian), 28 lid (big endian), 30 sl, 31 path_bits, 32 grh_present, 33 gid_index,
//	34 hop_limit, 35 traffic_class, 36 gid[16], 52 flow_label (big endian)
//
// shim.c checks the offsets against the kernel's header at build time.
type userMADHdr []byte

func (h userMADHdr) agent() uint32  { return binary.NativeEndian.Uint32(h[0:]) }
func (h userMADHdr) status() uint32 { return binary.NativeEndian.Uint32(h[4:]) }

func (h userMADHdr) addr() Addr {
	a := Addr{
		QPN:       binary.BigEndian.Uint32(h[20:]),
		QKey:      binary.BigEndian.Uint32(h[24:]),
		LID:       binary.BigEndian.Uint16(h[28:]),
		SL:        h[30],
		PathBits:  h[31],
		GRH:       h[32] != 0,
		GIDIndex:  h[33],
		HopLimit:  h[34],
		TClass:    h[35],
		FlowLabel: binary.BigEndian.Uint32(h[52:]),
	}
	if a.GRH {
		a.GID = netip.AddrFrom16([16]byte(h[36:52]))
	}
	return a
}

// put writes a send header: agent, the time to wait for a response and the retries (0 for
// a response, which waits for nothing), and the destination.
func (h userMADHdr) put(agent uint32, timeoutMs, retries uint32, a Addr) {
	clear(h[:HdrSize])
	binary.NativeEndian.PutUint32(h[0:], agent)
	binary.NativeEndian.PutUint32(h[8:], timeoutMs)
	binary.NativeEndian.PutUint32(h[12:], retries)
	binary.BigEndian.PutUint32(h[20:], a.QPN)
	binary.BigEndian.PutUint32(h[24:], a.QKey)
	binary.BigEndian.PutUint16(h[28:], a.LID)
	h[30], h[31] = a.SL, a.PathBits
	if a.GRH {
		h[32], h[33], h[34], h[35] = 1, a.GIDIndex, a.HopLimit, a.TClass
		g := a.GID.As16()
		copy(h[36:52], g[:])
		binary.BigEndian.PutUint32(h[52:], a.FlowLabel)
	}
}

// Reply is the address to answer a request received from a: the same port, QP and path, with
// the GSI Q_Key (as the kernel's agents answer, ib_create_ah_from_wc).
func (a Addr) Reply() Addr {
	r := a
	r.QKey = QP1QKey
	return r
}

// PortInfo describes one HCA port with a umad device.
type PortInfo struct {
	CA   string
	Port int
	// Umad is N of /dev/infiniband/umadN.
	Umad      int
	LID       uint16
	SMLID     uint16
	CapMask   uint32
	State     string
	LinkLayer string
	// GID is GID 0: the subnet prefix and the port GUID.
	GID  netip.Addr
	PKey uint16
}

// Name is "ca/port", as the configuration names HCA ports.
func (p PortInfo) Name() string { return p.CA + "/" + strconv.Itoa(p.Port) }

// InfiniBand reports whether the port's link layer is InfiniBand (libibumad reads a missing
// link_layer file, as under umad2sim, as InfiniBand too).
func (p PortInfo) InfiniBand() bool {
	return p.LinkLayer == "" || p.LinkLayer == "InfiniBand" || p.LinkLayer == "IB"
}

// CapIsDM is PortInfo:CapabilityMask's IsDeviceManagementSupported bit.
const CapIsDM = 1 << 19
