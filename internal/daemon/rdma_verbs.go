package daemon

// The binary's RDMA seams. ib/verbs is cgo over rdma-core; in a build without cgo it is a
// stub whose every entry point fails with ib.ErrNotSupported, which is reported as ErrNoRDMA.

import (
	"errors"
	"fmt"
	"net/netip"

	"go.uber.org/zap"

	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/verbs"
)

// rdmaListen returns the listen seam over RDMA/CM through rdma-core. The rare events verbs
// cannot return to anyone (a request rejected because the backlog was full) go to log.
func rdmaListen(log *zap.Logger) ListenFunc {
	opts := verbs.Options{Logf: func(format string, args ...any) {
		log.Warn(fmt.Sprintf(format, args...))
	}}
	return func(addr netip.AddrPort) (ib.Listener, error) {
		l, err := verbs.Listen(addr, opts)
		if err != nil {
			return nil, rdmaError(err)
		}
		return l, nil
	}
}

// rdmaListenIB returns the ib listener seam: AF_IB listeners through rdma-core, on every
// InfiniBand port or on one HCA port's GID 0 (its port GUID).
func rdmaListenIB(log *zap.Logger) ListenIBFunc {
	opts := verbs.Options{Logf: func(format string, args ...any) {
		log.Warn(fmt.Sprintf(format, args...))
	}}
	return func(hca string, port uint16) (ib.Listener, error) {
		a := ib.IBAddr{PKey: 0xffff, ServiceID: ib.IBServiceID(port)}
		if hca != "" {
			devs, err := RDMADevices()
			if err != nil {
				return nil, err
			}
			gid, err := hcaPortGID(devs, hca)
			if err != nil {
				return nil, err
			}
			a.GID = gid
		}
		l, err := verbs.ListenIB(a, opts)
		if err != nil {
			return nil, rdmaError(err)
		}
		return l, nil
	}
}

// RDMADevices lists the RDMA devices through libibverbs.
func RDMADevices() ([]Device, error) {
	infos, err := verbs.Devices()
	if err != nil {
		return nil, rdmaError(err)
	}
	out := make([]Device, 0, len(infos))
	for _, d := range infos {
		dev := Device{Name: d.Name, NodeGUID: d.NodeGUID}
		for _, p := range d.Ports {
			port := Port{Num: p.Num, State: p.State.String(), LinkLayer: p.LinkLayer.String(), ActiveMTU: p.ActiveMTU,
				LID: p.LID, IsDM: p.CapMask&verbs.CapIsDeviceManagementSupported != 0, PKey: p.PKey}
			for _, g := range p.GIDs {
				port.GIDs = append(port.GIDs, GID{Index: g.Index, GID: g.GID, Type: g.Type.String(), Netdev: g.Netdev})
			}
			dev.Ports = append(dev.Ports, port)
		}
		out = append(out, dev)
	}
	return out, nil
}

// rdmaError adds what to do to the errors that mean "no RDMA here".
func rdmaError(err error) error {
	switch {
	case errors.Is(err, ib.ErrNotSupported):
		return fmt.Errorf("%w (%w)", ErrNoRDMA, err)
	case errors.Is(err, verbs.ErrNoDevice):
		return fmt.Errorf("%w: %w", err, errNoRDMAKernel)
	case errors.Is(err, verbs.ErrNoIBPort):
		return fmt.Errorf("%w: %w", err, errNoIBPortYet)
	}
	return err
}
