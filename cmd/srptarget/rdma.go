package main

import (
	"errors"
	"net/netip"

	"github.com/srptarget/srptarget/ib"
)

// listenFunc opens an RDMA/CM listener. The binary uses ib/verbs (rdma_verbs.go); tests use a
// node of ib/memfabric.
type listenFunc func(addr netip.AddrPort) (ib.Listener, error)

// devicesFunc lists the host's RDMA devices.
type devicesFunc func() ([]rdmaDevice, error)

// rdmaDevice is what the daemon needs to know of one RDMA device: its node GUID (the default
// target identity) and, for `srptarget devices`, its ports. It is the command's own copy of
// verbs.DeviceInfo, so that the command builds and is tested without cgo.
type rdmaDevice struct {
	Name     string
	NodeGUID uint64
	Ports    []rdmaPort
}

type rdmaPort struct {
	Num       int
	State     string
	LinkLayer string
	ActiveMTU int // bytes; 0 when unknown
	GIDs      []rdmaGID
}

type rdmaGID struct {
	Index  int
	GID    netip.Addr
	Type   string
	Netdev string
}

// errNoRDMA is what a build without RDMA support answers (no cgo, or not Linux).
var errNoRDMA = errors.New("this srptarget was built without RDMA support (it needs Linux and cgo with rdma-core: libibverbs and librdmacm)")

// errNoRDMAKernel wraps the verbs error for a kernel or host without RDMA.
var errNoRDMAKernel = errors.New("load the driver of the RDMA adapter, or add a soft-RoCE device: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0")
