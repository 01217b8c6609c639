package daemon

import (
	"errors"
	"slices"

	"github.com/srptarget/srptarget/config"
	"github.com/srptarget/srptarget/ib"
	"github.com/srptarget/srptarget/ib/dm"
	"github.com/srptarget/srptarget/ib/umad"
)

// The InfiniBand Device Management agent (srptarget dm-agent): what it answers for the
// configuration's ib listeners, on which ports.

// DMAgentFor builds what the agent advertises for cfg: one I/O controller per ioc_guid of the
// target's ports, each with a service per (target port with that ioc_guid, ib listener): the
// name SRP.T10:<id_ext> and the listener's service ID 0x00000000013fPPPP, which srp_daemon
// turns into one add_target line each. The profile carries the limits an initiator may use.
func DMAgentFor(cfg *config.Config, id Identity) (*dm.Agent, error) {
	var sids []uint64
	for _, lc := range cfg.Listeners {
		if lc.IsIB() {
			sids = append(sids, ib.IBServiceID(lc.Port))
		}
	}
	if len(sids) == 0 {
		return nil, errors.New("the configuration has no ib listener: the Device Management agent advertises the service IDs of ib listeners (kind: ib), and RDMA/CM logins (dest=) need no discovery")
	}
	ids := []Identity{id}
	for _, p := range cfg.Target.Ports {
		ids = append(ids, PortIdentity(p, id))
	}
	a := &dm.Agent{Profile: dm.Profile{
		SendQueueDepth: uint16(min(cfg.Limits.Credits, 0xffff)),
		SendSize:       uint32(cfg.Limits.MaxIUSize),
		RDMASize:       uint32(cfg.Limits.MaxTransferSize),
		IDString:       "srptarget",
	}}
	for _, pid := range ids {
		i := slices.IndexFunc(a.IOCs, func(c dm.IOC) bool { return c.GUID == pid.iocGUID })
		if i < 0 {
			a.IOCs = append(a.IOCs, dm.IOC{GUID: pid.iocGUID})
			i = len(a.IOCs) - 1
		}
		for _, sid := range sids {
			a.IOCs[i].Services = append(a.IOCs[i].Services, dm.Service{IDExt: pid.idExt, ServiceID: sid})
		}
	}
	return a, a.Check()
}

// DMPorts picks the InfiniBand ports the agent answers on: those the ib listeners name, or
// every InfiniBand port when one of them names none.
func DMPorts(cfg *config.Config, ports []umad.PortInfo) []umad.PortInfo {
	named := map[string]bool{}
	all := false
	for _, lc := range cfg.Listeners {
		if lc.IsIB() {
			all = all || len(lc.IBPorts) == 0
			for _, p := range lc.IBPorts {
				named[p] = true
			}
		}
	}
	var out []umad.PortInfo
	for _, p := range ports {
		if p.InfiniBand() && (all || named[p.Name()]) {
			out = append(out, p)
		}
	}
	return out
}
