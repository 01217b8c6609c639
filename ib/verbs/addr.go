package verbs

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"

	"github.com/srptarget/srptarget/ib"
)

// Socket addresses cross into librdmacm as struct sockaddr_in / sockaddr_in6 in a buffer the
// size of sockaddr_storage. They are built and read here in Go, byte by byte, so that the
// conversion is testable without cgo. The layout and the family numbers are Linux's, the only
// system librdmacm runs on.
const (
	sockaddrSize = 128 // sizeof(struct sockaddr_storage)
	afInet       = 2   // AF_INET on Linux
	afInet6      = 10  // AF_INET6 on Linux
	afIB         = 27  // AF_IB: InfiniBand native addressing (addr_ib.go)
)

type sockaddr [sockaddrSize]byte

// zoneIndex and zoneName map an IPv6 zone to its interface index and back; variables so that
// tests can replace them.
var (
	zoneIndex = func(zone string) (int, error) {
		ifi, err := net.InterfaceByName(zone)
		if err != nil {
			return 0, err
		}
		return ifi.Index, nil
	}
	zoneName = func(index int) string {
		if ifi, err := net.InterfaceByIndex(index); err == nil {
			return ifi.Name
		}
		return strconv.Itoa(index)
	}
)

// encodeSockaddr builds the sockaddr for ap. An IPv4-mapped IPv6 address becomes AF_INET (as
// the Go net package treats it); an IPv6 zone, a name or a number, becomes sin6_scope_id, which
// librdmacm needs to bind or reach a link-local address.
func encodeSockaddr(ap netip.AddrPort) (sockaddr, error) {
	var sa sockaddr
	a := ap.Addr()
	switch {
	case !a.IsValid():
		return sa, errorf("address %v: %w", ap, ib.ErrInvalidArgument)
	case a.Is4() || a.Is4In6():
		// struct sockaddr_in: family (host order), port (network order), address.
		binary.NativeEndian.PutUint16(sa[0:], afInet)
		binary.BigEndian.PutUint16(sa[2:], ap.Port())
		b := a.Unmap().As4()
		copy(sa[4:8], b[:])
	default:
		// struct sockaddr_in6: family, port, flowinfo, address, scope id (host order).
		binary.NativeEndian.PutUint16(sa[0:], afInet6)
		binary.BigEndian.PutUint16(sa[2:], ap.Port())
		b := a.As16()
		copy(sa[8:24], b[:])
		if z := a.Zone(); z != "" {
			idx, err := scopeID(z)
			if err != nil {
				return sa, errorf("address %v: zone %q: %w (%w)", ap, z, ib.ErrInvalidArgument, err)
			}
			binary.NativeEndian.PutUint32(sa[24:], idx)
		}
	}
	return sa, nil
}

func scopeID(zone string) (uint32, error) {
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	idx, err := zoneIndex(zone)
	if err != nil {
		return 0, err
	}
	return uint32(idx), nil
}

// decodeSockaddr reads a sockaddr written by librdmacm. A scope id becomes the zone (the
// interface name if it exists). IPv4-mapped IPv6 addresses are unmapped so that an IPv4 peer
// looks the same whether it reached an IPv4 or a dual-stack IPv6 listener. An unknown family,
// or a short buffer, gives the zero AddrPort.
func decodeSockaddr(b []byte) netip.AddrPort {
	if len(b) < 2 {
		return netip.AddrPort{}
	}
	switch binary.NativeEndian.Uint16(b) {
	case afInet:
		if len(b) < 8 {
			return netip.AddrPort{}
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:]))
	case afInet6:
		if len(b) < 28 {
			return netip.AddrPort{}
		}
		a := netip.AddrFrom16([16]byte(b[8:24]))
		if a.Is4In6() {
			a = a.Unmap()
		} else if id := binary.NativeEndian.Uint32(b[24:]); id != 0 {
			a = a.WithZone(zoneName(int(id)))
		}
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:]))
	}
	return netip.AddrPort{}
}

// inheritZone gives a link-local IPv6 address without a zone the given zone. The kernel does not
// always report the scope of the addresses of a connection, but both ends of a link-local
// connection are on the interface the listener or the route is on.
func inheritZone(ap netip.AddrPort, zone string) netip.AddrPort {
	a := ap.Addr()
	if zone == "" || !a.Is6() || a.Zone() != "" || !(a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast()) {
		return ap
	}
	return netip.AddrPortFrom(a.WithZone(zone), ap.Port())
}
