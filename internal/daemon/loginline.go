package daemon

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/srptarget/srptarget/config"
)

// HostAddr is one address of one of the host's network interfaces.
type HostAddr struct {
	Iface string
	Addr  netip.Addr
}

// InterfacesFunc lists the host's addresses, for the add_target lines of wildcard listeners.
type InterfacesFunc func() ([]HostAddr, error)

// HostAddrs lists the addresses of the interfaces that are up, except loopback ones.
func HostAddrs() ([]HostAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []HostAddr
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, HostAddr{Iface: ifi.Name, Addr: ip.Unmap()})
			}
		}
	}
	return out, nil
}

// addTarget is one add_target line: the dest= value for one listener, and a note for the
// operator (what to replace, which interface the address is on).
type addTarget struct {
	listener netip.AddrPort
	dest     string
	note     string
}

// addTargetPath is where the Linux initiator takes logins. <dev> and <port> are the initiator's
// RDMA device and port, which the target cannot know.
const addTargetPath = "/sys/class/infiniband_srp/srp-<dev>-<port>/add_target"

// command is the line to run on the initiator. The keys are ib_srp's (srp_opt_tokens in
// drivers/infiniband/ulp/srp/ib_srp.c): id_ext and ioc_guid are parsed as hex, dest is an
// address and port, an IPv6 address in brackets with its %scope inside them.
func (a addTarget) command(id Identity) string {
	return fmt.Sprintf(`echo "id_ext=%016x,ioc_guid=%016x,dest=%s" > %s`, id.idExt, id.iocGUID, a.dest, addTargetPath)
}

// addTargetLines returns the add_target lines for every listener. A wildcard listener gets one
// line per address of the host (IPv4 ones for 0.0.0.0, IPv4 and IPv6 ones for ::, leaving out
// link-local IPv6 addresses, whose scope is an interface of the initiator), or a placeholder
// when the host has none. A link-local listener gets a placeholder for the initiator's
// interface.
func addTargetLines(cfg *config.Config, id Identity, ifaces InterfacesFunc) []addTarget {
	var out []addTarget
	var host []HostAddr
	var hostErr error
	hostDone := false
	for _, lc := range cfg.Listeners {
		addr, err := config.ParseListenAddress(lc.Address)
		if err != nil {
			continue
		}
		ap := netip.AddrPortFrom(addr, lc.Port)
		port := strconv.Itoa(int(lc.Port))
		switch {
		case addr.IsUnspecified():
			if !hostDone {
				hostDone = true
				if ifaces != nil {
					host, hostErr = ifaces()
				}
			}
			n := 0
			for _, h := range host {
				a := h.Addr
				if a.Is4() || (addr.Is6() && !a.IsLinkLocalUnicast()) {
					out = append(out, addTarget{listener: ap, dest: destString(a, port), note: fmt.Sprintf("%v listens on every address; this is %v on %s", ap, a, h.Iface)})
					n++
				}
			}
			if n == 0 {
				why := "the host has no address up"
				if hostErr != nil {
					why = "the host's addresses could not be listed (" + hostErr.Error() + ")"
				}
				out = append(out, addTarget{listener: ap, dest: "<address>:" + port,
					note: fmt.Sprintf("%v listens on every address and %s: replace <address> with the target's address on the RDMA network", ap, why)})
			}
		case addr.Is6() && addr.IsLinkLocalUnicast():
			out = append(out, addTarget{listener: ap, dest: "[" + addr.WithZone("").String() + "%<if>]:" + port,
				note: fmt.Sprintf("%v is link-local: replace <if> with the initiator's interface on that link", ap)})
		default:
			out = append(out, addTarget{listener: ap, dest: destString(addr, port)})
		}
	}
	return out
}

// destString formats dest= as ib_srp parses it: a.b.c.d:port or [ipv6]:port.
func destString(a netip.Addr, port string) string {
	if a.Is4() {
		return a.String() + ":" + port
	}
	return "[" + a.String() + "]:" + port
}

// LoginLineText is the output of `srptarget login-line`: the dest= lines of the address
// listeners, then the dgid= lines of the ib listeners (ibLoginLineText).
func LoginLineText(cfg *config.Config, id Identity, ifaces InterfacesFunc, devices DevicesFunc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Target id_ext=%016x ioc_guid=%016x (from the %s).\n", id.idExt, id.iocGUID, id.from)
	b.WriteString("# Run on the initiator as root after `modprobe ib_srp`; <dev>-<port> is the initiator's\n")
	b.WriteString("# RDMA device and port that reach the target (ls /sys/class/infiniband_srp/).\n")
	lines := addTargetLines(cfg, id, ifaces)
	for _, l := range lines {
		if l.note != "" {
			fmt.Fprintf(&b, "# %s\n", l.note)
		}
		b.WriteString(l.command(id))
		b.WriteByte('\n')
	}
	// Each more target port is another path: one add_target per port and address.
	for _, p := range cfg.Target.Ports {
		if len(lines) == 0 {
			break
		}
		pid := PortIdentity(p, id)
		fmt.Fprintf(&b, "# Target port id_ext=%016x ioc_guid=%016x (relative port %d), another path to the same LUNs:\n",
			pid.idExt, pid.iocGUID, p.RelativePortID)
		for _, l := range lines {
			b.WriteString(l.command(pid))
			b.WriteByte('\n')
		}
	}
	b.WriteString(ibLoginLineText(cfg, id, devices))
	return b.String()
}

// LoginLineResult is what login-line --json prints: the target's identity and, for each
// target port and listener, the add_target line an initiator writes.
type LoginLineResult struct {
	IDExt   string      `json:"id_ext"`
	IOCGUID string      `json:"ioc_guid"`
	From    string      `json:"from"`
	Logins  []LoginLine `json:"logins"`
}

type LoginLine struct {
	IDExt        string `json:"id_ext"`
	IOCGUID      string `json:"ioc_guid"`
	RelativePort uint16 `json:"relative_port"`
	// Listener is the listener's address and port, or for an ib listener "ib:PORT".
	Listener string `json:"listener"`
	// Dest is the dest= value of an address listener; <address>, <if> are for the operator
	// to fill in (Note).
	Dest string `json:"dest,omitempty"`
	// DGID, PKey and ServiceID are those of an ib listener's line; "<gid>" when this host
	// has no port to name (Note).
	DGID      string `json:"dgid,omitempty"`
	PKey      string `json:"pkey,omitempty"`
	ServiceID string `json:"service_id,omitempty"`
	Note      string `json:"note,omitempty"`
	Command   string `json:"command"`
}

func LoginLines(cfg *config.Config, id Identity, ifaces InterfacesFunc, devices DevicesFunc) *LoginLineResult {
	r := &LoginLineResult{IDExt: fmt.Sprintf("%016x", id.idExt), IOCGUID: fmt.Sprintf("%016x", id.iocGUID), From: id.from, Logins: []LoginLine{}}
	lines := addTargetLines(cfg, id, ifaces)
	ibLines := ibTargetLines(cfg, devices)
	add := func(pid Identity, rel uint16) {
		base := LoginLine{IDExt: fmt.Sprintf("%016x", pid.idExt), IOCGUID: fmt.Sprintf("%016x", pid.iocGUID), RelativePort: rel}
		for _, l := range lines {
			ll := base
			ll.Listener, ll.Dest, ll.Note, ll.Command = l.listener.String(), l.dest, l.note, l.command(pid)
			r.Logins = append(r.Logins, ll)
		}
		for _, t := range ibLines {
			ll := base
			ll.Listener, ll.DGID, ll.Note, ll.Command = fmt.Sprintf("ib:%d", t.port), t.dgid, t.note, t.command(pid)
			ll.PKey, ll.ServiceID = fmt.Sprintf("%04x", t.pkey), fmt.Sprintf("%016x", t.serviceID)
			r.Logins = append(r.Logins, ll)
		}
	}
	add(id, cmp.Or(cfg.Target.RelativePortID, 1))
	for _, p := range cfg.Target.Ports {
		add(PortIdentity(p, id), p.RelativePortID)
	}
	return r
}
