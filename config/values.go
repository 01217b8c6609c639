package config

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// ParseEUI64 parses 16 hex digits, with an optional 0x prefix and optional colons.
func ParseEUI64(s string) (uint64, error) {
	h := strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(s), "0x"), ":", "")
	if len(h) != 16 {
		return 0, fmt.Errorf("%q: want 16 hex digits (a 64-bit identifier such as 0x0002c90300a0b0c1)", s)
	}
	n, err := strconv.ParseUint(h, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: not hexadecimal", s)
	}
	return n, nil
}

// ParseListenAddress parses a listener address, keeping an IPv6 zone.
func ParseListenAddress(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errors.New("address is missing (use 0.0.0.0 or :: for all addresses)")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Is6() && a.IsLinkLocalUnicast() && a.Zone() == "" {
		return netip.Addr{}, fmt.Errorf("%q is link-local: add the interface, e.g. %s%%eth0", s, s)
	}
	return a, nil
}

// ParseSourcePrefix parses an ACL source: an address (a one-address prefix) or a prefix. An
// IPv4-mapped IPv6 address, or a prefix inside ::ffff:0:0/96, becomes its IPv4 form: Authorize
// unmaps the login's source address, so written as it is it would never match.
func ParseSourcePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an address prefix such as 10.0.0.0/8", s)
		}
		p = p.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or prefix", s)
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// initiatorPattern allows hex digits, 0x, and the wildcards * and ?.
var initiatorPattern = regexp.MustCompile(`^(0x)?[0-9a-fA-F*?]+$`)

// CheckInitiatorPattern checks an ACL's initiator pattern: "*", or 0x and 32 hex digits
// where * and ? may stand for some of them.
func CheckInitiatorPattern(p string) error {
	if p == "*" {
		return nil
	}
	if !initiatorPattern.MatchString(p) {
		return fmt.Errorf("%q: an initiator port id is 0x and 32 hex digits, with * and ? as wildcards", p)
	}
	if !strings.ContainsAny(p, "*?") && len(strings.TrimPrefix(p, "0x")) != 32 {
		return fmt.Errorf("%q: an initiator port id has 32 hex digits", p)
	}
	return nil
}

// MatchInitiator reports whether the initiator port id (0x and 32 hex digits) matches pattern.
func MatchInitiator(pattern, id string) bool {
	norm := func(s string) string { return strings.TrimPrefix(strings.ToLower(s), "0x") }
	ok, err := path.Match(norm(pattern), norm(id))
	return err == nil && ok
}

// IBPort names one HCA port for an ib listener: a device and its port number.
type IBPort struct {
	Device string
	Port   int
}

func (p IBPort) String() string { return p.Device + "/" + strconv.Itoa(p.Port) }

// ibDeviceName is what an RDMA device name may hold (the kernel's names are such as mlx5_0,
// rxe0, ibp59s0).
var ibDeviceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ParseIBPort reads an entry of ib_ports: "mlx5_0/1".
func ParseIBPort(s string) (IBPort, error) {
	dev, num, _ := strings.Cut(s, "/")
	n, err := strconv.Atoi(num)
	switch {
	case !ibDeviceName.MatchString(dev) || num == "":
		return IBPort{}, fmt.Errorf("%q: an HCA port is a device name and a port number, such as mlx5_0/1 (srptarget devices lists them)", s)
	case err != nil || n < 1 || n > 255 || strconv.Itoa(n) != num:
		return IBPort{}, fmt.Errorf("%q: the port number after / is 1..255", s)
	}
	return IBPort{Device: dev, Port: n}, nil
}
