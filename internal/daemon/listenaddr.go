package daemon

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
)

// listenAddr names one listener of the daemon: an IP address and port (an address listener,
// RDMA/CM), or the HCA port and port of an ib listener (AF_IB, service ID 0x00000000013FPPPP).
// One ib listener of the configuration is one listenAddr per entry of its ib_ports, or one for
// every InfiniBand port.
type listenAddr struct {
	ap   netip.AddrPort // address listeners
	ib   bool
	hca  string // ib listeners: "mlx5_0/1", or "" for every InfiniBand port
	port uint16 // ib listeners
}

func addrListen(ap netip.AddrPort) listenAddr { return listenAddr{ap: ap} }

// listenAddrsOf returns the listeners of lc (valid: config checked it).
func listenAddrsOf(lc config.Listener) []listenAddr {
	if !lc.IsIB() {
		addr, _ := config.ParseListenAddress(lc.Address)
		return []listenAddr{addrListen(netip.AddrPortFrom(addr, lc.Port))}
	}
	if len(lc.IBPorts) == 0 {
		return []listenAddr{{ib: true, port: lc.Port}}
	}
	out := make([]listenAddr, 0, len(lc.IBPorts))
	for _, p := range lc.IBPorts {
		out = append(out, listenAddr{ib: true, hca: p, port: lc.Port})
	}
	return out
}

// String names the listener in logs, the status and reload results: "192.0.2.1:5555",
// "ib port 5555" (every InfiniBand port), "ib mlx5_0/1 port 5555".
func (a listenAddr) String() string {
	if !a.ib {
		return a.ap.String()
	}
	if a.hca == "" {
		return fmt.Sprintf("ib port %d", a.port)
	}
	return fmt.Sprintf("ib %s port %d", a.hca, a.port)
}

// compare orders address listeners first, by address, then ib listeners.
func (a listenAddr) compare(b listenAddr) int {
	if a.ib != b.ib {
		if a.ib {
			return 1
		}
		return -1
	}
	if !a.ib {
		return a.ap.Compare(b.ap)
	}
	return cmp.Or(cmp.Compare(a.port, b.port), strings.Compare(a.hca, b.hca))
}

// ListenIBFunc opens an ib listener: on hca ("mlx5_0/1"), or on every InfiniBand port when
// hca is "", with the service ID of port. The binary uses ib/verbs (rdma_verbs.go); tests use
// a node of ib/memfabric.
type ListenIBFunc func(hca string, port uint16) (ib.Listener, error)

// open opens the listener a names through the daemon's seams.
func (d *daemon) open(a listenAddr) (ib.Listener, error) {
	if a.ib {
		if d.opts.listenIB == nil {
			return nil, ErrNoRDMA
		}
		return d.opts.listenIB(a.hca, a.port)
	}
	if d.opts.listen == nil {
		return nil, ErrNoRDMA
	}
	return d.opts.listen(a.ap)
}
