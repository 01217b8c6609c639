package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
)

// ibTarget is the add_target line of one ib listener on one InfiniBand port: what srp_daemon
// writes for a target it found by Device Management discovery, in srp_daemon's field order
// (srp_daemon/srp_daemon.c, add_non_exist_target: id_ext, ioc_guid, dgid, pkey, service_id).
// A port with no GID to name gets the placeholder "<gid>" and a note.
type ibTarget struct {
	port      uint16 // the listener's port
	dgid      string // 32 hex digits, or "<gid>"
	pkey      uint16
	serviceID uint64
	note      string
}

// line is the add_target value for identity id. ib_srp parses dgid as 32 hex digits and
// id_ext, ioc_guid, pkey and service_id as hex (drivers/infiniband/ulp/srp/ib_srp.c,
// srp_parse_options).
func (t ibTarget) line(id Identity) string {
	return fmt.Sprintf("id_ext=%016x,ioc_guid=%016x,dgid=%s,pkey=%04x,service_id=%016x",
		id.idExt, id.iocGUID, t.dgid, t.pkey, t.serviceID)
}

func (t ibTarget) command(id Identity) string {
	return fmt.Sprintf(`echo "%s" > %s`, t.line(id), addTargetPath)
}

// gidHex writes a GID as ib_srp's dgid= takes it: 32 hex digits.
func gidHex(g netip.Addr) string {
	b := g.As16()
	return fmt.Sprintf("%x", b[:])
}

// ibTargetLines returns the add_target lines of cfg's ib listeners: one per InfiniBand port
// the listener serves (every one of devs, or those its ib_ports names), with the port's GID 0
// (subnet prefix and port GUID, as srp_daemon writes dgid) and the P_Key of its index 0. When
// the host has no such port (or the devices cannot be listed), a placeholder line says what to
// put in.
func ibTargetLines(cfg *config.Config, devices DevicesFunc) []ibTarget {
	var devs []Device
	var devErr error
	listed := false
	var out []ibTarget
	for _, lc := range cfg.Listeners {
		if !lc.IsIB() {
			continue
		}
		if !listed {
			listed = true
			if devices != nil {
				devs, devErr = devices()
			} else {
				devErr = ErrNoRDMA
			}
			devs = slices.Clone(devs)
			slices.SortFunc(devs, func(a, b Device) int { return strings.Compare(a.Name, b.Name) })
		}
		sid := ib.IBServiceID(lc.Port)
		n := 0
		for _, d := range devs {
			for _, p := range d.Ports {
				hca := fmt.Sprintf("%s/%d", d.Name, p.Num)
				if p.LinkLayer != LinkLayerIB || len(lc.IBPorts) > 0 && !slices.Contains(lc.IBPorts, hca) {
					continue
				}
				t := ibTarget{port: lc.Port, dgid: "<gid>", pkey: 0xffff, serviceID: sid}
				if p.PKey != 0 {
					t.pkey = p.PKey
				}
				for _, g := range p.GIDs {
					if g.Index == 0 {
						t.dgid = gidHex(g.GID)
					}
				}
				t.note = fmt.Sprintf("%s, %s", hca, p.State)
				if p.LID != 0 {
					t.note += fmt.Sprintf(", LID %d", p.LID)
				}
				if t.dgid == "<gid>" {
					t.note += ": no GID yet; replace <gid> with the port's GID 0 (32 hex digits)"
				}
				out = append(out, t)
				n++
			}
		}
		if n == 0 {
			why := "this host has no InfiniBand port"
			switch {
			case devErr != nil:
				why = "the RDMA devices could not be listed (" + devErr.Error() + ")"
			case len(lc.IBPorts) > 0:
				why = "none of " + strings.Join(lc.IBPorts, ", ") + " is an InfiniBand port of this host"
			}
			out = append(out, ibTarget{port: lc.Port, dgid: "<gid>", pkey: 0xffff, serviceID: sid,
				note: why + ": replace <gid> with the GID 0 of the target's InfiniBand port (32 hex digits; srptarget devices on the target lists it)"})
		}
	}
	return out
}

// ibLoginLineText is the native InfiniBand part of `srptarget login-line`: the ib listeners'
// lines for the target and for each of its other ports.
func ibLoginLineText(cfg *config.Config, id Identity, devices DevicesFunc) string {
	lines := ibTargetLines(cfg, devices)
	if len(lines) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Native InfiniBand (ib listeners): the line srp_daemon would write, in its order. srp_daemon\n")
	b.WriteString("# itself cannot find this target (it asks only ports whose IsDeviceManagementSupported bit is\n")
	b.WriteString("# set, which only kernel code can set): write the line by hand, from an initiator port on the\n")
	b.WriteString("# same subnet.\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "# ib listener, port %d: %s\n", l.port, l.note)
		b.WriteString(l.command(id))
		b.WriteByte('\n')
	}
	for _, p := range cfg.Target.Ports {
		pid := PortIdentity(p, id)
		fmt.Fprintf(&b, "# Target port id_ext=%016x ioc_guid=%016x (relative port %d) over InfiniBand:\n", pid.idExt, pid.iocGUID, p.RelativePortID)
		for _, l := range lines {
			b.WriteString(l.command(pid))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// IBPortWarnings says, for `validate`, which ib listeners of cfg have no InfiniBand port to
// bind on this host: a listener there would bind and never receive a login (on RoCE the
// kernel rejects AF_IB requests before they reach user space), or wait for the port.
func IBPortWarnings(cfg *config.Config, devices DevicesFunc) []string {
	if !cfg.HasIBListener() {
		return nil
	}
	var devs []Device
	err := ErrNoRDMA
	if devices != nil {
		devs, err = devices()
	}
	if err != nil {
		return []string{fmt.Sprintf("ib listeners: the RDMA devices could not be listed to look for InfiniBand ports (%v)", err)}
	}
	ports := map[string]Port{}
	var all []string
	for _, d := range devs {
		for _, p := range d.Ports {
			hca := fmt.Sprintf("%s/%d", d.Name, p.Num)
			ports[hca] = p
			all = append(all, fmt.Sprintf("%s %s", hca, p.LinkLayer))
		}
	}
	have := "this host has no RDMA device"
	if len(all) > 0 {
		have = "this host has " + strings.Join(all, ", ")
	}
	var out []string
	for i, lc := range cfg.Listeners {
		if !lc.IsIB() {
			continue
		}
		if len(lc.IBPorts) == 0 {
			if !slices.ContainsFunc(devs, func(d Device) bool {
				return slices.ContainsFunc(d.Ports, func(p Port) bool { return p.LinkLayer == LinkLayerIB })
			}) {
				out = append(out, fmt.Sprintf("listeners[%d] (ib, port %d): no InfiniBand port to bind: %s; it would wait for one (AF_IB logins arrive only on InfiniBand ports, never on RoCE)", i, lc.Port, have))
			}
			continue
		}
		for _, hca := range lc.IBPorts {
			p, ok := ports[hca]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("listeners[%d] (ib, port %d): %s is not an HCA port of this host (%s); it would wait for it", i, lc.Port, hca, have))
			case p.LinkLayer != LinkLayerIB:
				out = append(out, fmt.Sprintf("listeners[%d] (ib, port %d): %s is %s, not InfiniBand: the listener would fail there (AF_IB logins arrive only on InfiniBand ports)", i, lc.Port, hca, p.LinkLayer))
			}
		}
	}
	return out
}
