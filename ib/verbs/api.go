package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/srptarget/srptarget/ib"
)

// ErrNoDevice: the kernel has no RDMA support or no RDMA device (librdmacm cannot start), or no
// device serves the address. It wraps the errno from rdma-core where there is one.
var ErrNoDevice = errors.New("verbs: no RDMA device")

// DefaultBacklog is the listen backlog when Options.Backlog is 0.
const DefaultBacklog = 128

// Options configure a Listener.
type Options struct {
	// Backlog bounds the connection requests that arrived but were not yet returned by
	// Listener.Next (rdma_listen's backlog, and the queue in front of Next). A request beyond
	// it is rejected with no private data. 0 means DefaultBacklog.
	Backlog int
	// Logf, if set, receives the rare events a caller cannot see otherwise: requests rejected
	// because the backlog was full or the device could not be opened.
	Logf func(format string, args ...any)
}

// ResolveOptions configure Resolve.
type ResolveOptions struct {
	// Src, if valid, is the local address to connect from (rdma_resolve_addr's src_addr).
	Src netip.Addr
	// Timeout bounds address and route resolution each (default 2 s). The context bounds the
	// whole of Resolve.
	Timeout time.Duration
}

// ConnectParams are the initiator side of a connection (what rdma_connect is given). They
// match memfabric.ConnectParams so that tests can run the same initiator over both.
type ConnectParams struct {
	QP ib.QPCaps
	// RNRRetryCount is how often the target retries a SEND that finds no receive posted here
	// (0..7, 7 = for ever; ib_srp uses 7).
	RNRRetryCount uint8
	// ResponderResources: RDMA READs the target may have outstanding against us (ib_srp: 4).
	ResponderResources uint8
	// InitiatorDepth: RDMA READs we may issue (ib_srp: 0).
	InitiatorDepth uint8
	// Recv is posted before the request is sent, so the target can SEND as soon as it accepts.
	Recv []ib.RecvWR
}

// RejectedError is what Route.Connect returns when the target rejected the connection request,
// or when nobody listens on the port (the passive side's CM rejects it).
type RejectedError struct {
	// Reason is the IB CM REJ reason (RDMA_CM_EVENT_REJECTED's status): 28 (consumer defined)
	// after the listener's Reject, 8 (invalid service ID) when nobody listens on the port.
	Reason int
	// PrivateData is the REJ's private data (the SRP_LOGIN_REJ). Over InfiniBand and RoCE the CM
	// pads it with zeros to the full 148 bytes.
	PrivateData []byte
}

// IB CM REJ reasons that matter here (kernel include/rdma/ib_cm.h, enum ib_cm_rej_reason).
const (
	RejectInvalidServiceID = 8
	RejectConsumerDefined  = 28
)

func (e *RejectedError) Error() string {
	return "verbs: connection rejected, reason " + strconv.Itoa(e.Reason) + ", " +
		strconv.Itoa(len(e.PrivateData)) + " bytes of private data"
}

// DeviceInfo describes one RDMA device, for `srptarget devices`.
type DeviceInfo struct {
	Name     string
	NodeGUID uint64
	Ports    []PortInfo
}

// PortInfo describes one port of a device. Ports are numbered from 1.
type PortInfo struct {
	Num       int
	State     PortState
	LinkLayer LinkLayer
	// ActiveMTU in bytes (256..4096), 0 if unknown.
	ActiveMTU int
	// LID and SMLID are the port's and its subnet manager's local identifiers (InfiniBand
	// only; 0 until a subnet manager assigned them).
	LID, SMLID uint16
	// CapMask is PortInfo:CapabilityMask (ibv_port_attr.port_cap_flags).
	CapMask uint32
	// PKey is entry 0 of the port's P_Key table, the partition its ports use by default
	// (0xffff: full member of the default partition); 0 if unknown.
	PKey uint16
	GIDs []GIDInfo
}

// CapIsDeviceManagementSupported is PortInfo:CapabilityMask bit 19 (include/rdma/ib_verbs.h
// IB_PORT_DEVICE_MGMT_SUP). srp_daemon sends its Device Management queries only to ports
// with it, and only kernel code (ib_modify_port) can set it: the kernel's SRP targets do.
const CapIsDeviceManagementSupported = 1 << 19

// GIDInfo is one valid entry of a port's GID table. On RoCE the GIDs are the IP addresses of
// the netdev (IPv4 as IPv4-mapped IPv6); those are what an initiator's dest= names.
type GIDInfo struct {
	Index int
	GID   netip.Addr // always 16 bytes; use Unmap() for an IPv4 GID
	Type  GIDType
	// Netdev is the network interface the GID belongs to (RoCE), empty if none or unknown.
	Netdev string
}

// PortState is enum ibv_port_state.
type PortState int

// Port states (enum ibv_port_state).
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

var portStateNames = [...]string{
	PortNop: "NOP", PortDown: "DOWN", PortInit: "INIT", PortArmed: "ARMED",
	PortActive: "ACTIVE", PortActiveDefer: "ACTIVE_DEFER",
}

func (s PortState) String() string { return enumName(portStateNames[:], int(s), "state") }

// LinkLayer is the IBV_LINK_LAYER_* value of a port.
type LinkLayer int

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

var linkLayerNames = [...]string{
	LinkLayerUnspecified: "unspecified", LinkLayerInfiniBand: "InfiniBand", LinkLayerEthernet: "Ethernet",
}

func (l LinkLayer) String() string { return enumName(linkLayerNames[:], int(l), "link-layer") }

// GIDType is enum ibv_gid_type.
type GIDType int

// GID types.
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

var gidTypeNames = [...]string{GIDTypeIB: "IB", GIDTypeRoCEv1: "RoCE v1", GIDTypeRoCEv2: "RoCE v2"}

func (g GIDType) String() string { return enumName(gidTypeNames[:], int(g), "gid-type") }

// enumName is the String of the verbs enums above, whose values run from 0 without gaps:
// names[v], or "kind(v)" for a value this package does not know (a newer kernel's).
func enumName(names []string, v int, kind string) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(v) + ")"
}

// mtuBytes converts enum ibv_mtu (1 = 256 ... 5 = 4096) to bytes.
func mtuBytes(m int) int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// errorf prefixes every error of the package the same way.
func errorf(format string, args ...any) error {
	return fmt.Errorf("verbs: "+format, args...)
}
