package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/ib"
)

// ListenFunc opens an RDMA/CM listener. The binary uses ib/verbs (rdma_verbs.go); tests use a
// node of ib/memfabric.
type ListenFunc func(addr netip.AddrPort) (ib.Listener, error)

// DevicesFunc lists the host's RDMA devices.
type DevicesFunc func() ([]Device, error)

// Device is what the daemon needs to know of one RDMA device: its node GUID (the default
// target identity) and, for `srptarget devices`, its ports. It is the command's own copy of
// verbs.DeviceInfo, so that the command builds and is tested without cgo.
type Device struct {
	Name     string `json:"name"`
	NodeGUID uint64 `json:"node_guid"`
	Ports    []Port `json:"ports"`
}

type Port struct {
	Num       int    `json:"port"`
	State     string `json:"state"`
	LinkLayer string `json:"link_layer"`
	ActiveMTU int    `json:"active_mtu"` // bytes; 0 when unknown
	// LID is the port's local identifier (InfiniBand; 0 until the subnet manager sets it).
	LID uint16 `json:"lid,omitempty"`
	// IsDM is PortInfo:CapabilityMask's IsDeviceManagementSupported bit (InfiniBand).
	IsDM bool `json:"is_device_management_supported,omitempty"`
	// PKey is entry 0 of the port's P_Key table (0 if unknown).
	PKey uint16 `json:"pkey,omitempty"`
	GIDs []GID  `json:"gids"`
}

// LinkLayerIB is Port.LinkLayer of an InfiniBand port.
const LinkLayerIB = "InfiniBand"

type GID struct {
	Index  int        `json:"index"`
	GID    netip.Addr `json:"gid"`
	Type   string     `json:"type"`
	Netdev string     `json:"netdev,omitempty"`
}

// ErrNoRDMA is what a build without RDMA support answers (no cgo, or not Linux).
var ErrNoRDMA = errors.New("this srptarget was built without RDMA support (it needs Linux and cgo with rdma-core: libibverbs and librdmacm)")

// errNoRDMAKernel wraps the verbs error for a kernel or host without RDMA.
var errNoRDMAKernel = errors.New("load the driver of the RDMA adapter, or add a soft-RoCE device: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0")

// errNoIBPortYet wraps the verbs error for an ib listener on a host whose RDMA ports are all
// Ethernet or iWARP: like a missing device, the listener waits for one (an InfiniBand
// adapter's driver may load after the daemon).
var errNoIBPortYet = errors.New("the ib listener listens once an InfiniBand port is there: load the InfiniBand adapter's driver (mlx5_ib, ...); on a host without InfiniBand, remove the ib listener")

// hcaPortGID returns GID 0 of the HCA port hca ("mlx5_0/1") of devs: the subnet prefix and the
// port GUID, the address an AF_IB listener binds to serve that port only. A device that is not
// there (yet) is errNoRDMAKernel, as for an address no device has; a port that is not
// InfiniBand, or has no GID yet, is an error of its own.
func hcaPortGID(devs []Device, hca string) (netip.Addr, error) {
	name, num, _ := strings.Cut(hca, "/")
	for _, d := range devs {
		if d.Name != name {
			continue
		}
		for _, p := range d.Ports {
			if strconv.Itoa(p.Num) != num {
				continue
			}
			if p.LinkLayer != LinkLayerIB {
				return netip.Addr{}, fmt.Errorf("%s is an %s port: an ib listener receives logins only on InfiniBand ports (the kernel rejects AF_IB requests on RoCE before they reach user space); listen on an IP address there", hca, p.LinkLayer)
			}
			for _, g := range p.GIDs {
				if g.Index == 0 {
					return g.GID, nil
				}
			}
			return netip.Addr{}, fmt.Errorf("%s has no GID 0 yet: %w", hca, errNoRDMAKernel)
		}
		return netip.Addr{}, fmt.Errorf("%s has no port %s (srptarget devices lists them)", name, num)
	}
	return netip.Addr{}, fmt.Errorf("no RDMA device %s (yet): %w", name, errNoRDMAKernel)
}

// MarshalJSON gives the node GUID as ibv_devinfo prints it (0002:c903:00a0:b0c1): a 64-bit
// number does not survive a JSON reader that holds numbers as doubles.
func (d Device) MarshalJSON() ([]byte, error) {
	type plain Device
	return json.Marshal(struct {
		plain
		NodeGUID string `json:"node_guid"`
	}{plain(d), FormatGUID(d.NodeGUID)})
}

// FormatGUID writes a GUID as ibv_devinfo does: 0002:c903:00a0:b0c1.
func FormatGUID(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xFFFF, g>>16&0xFFFF, g&0xFFFF)
}
