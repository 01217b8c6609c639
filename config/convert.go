package config

import (
	"fmt"

	"github.com/srptarget/srptarget/scsi"
)

// DefaultRelativePortID is the relative target port identifier of target's own port.
const DefaultRelativePortID = 1

// The conversions below read a configuration that Parse returned (or that ApplyDefaults and
// Validate passed): what they parse again cannot fail there, so they have no errors.

// LocalPorts returns the relative target port identifiers this daemon serves, target's first.
func (c *Config) LocalPorts() []uint16 {
	ps := []uint16{c.Target.RelativePortID}
	for _, p := range c.Target.Ports {
		ps = append(ps, p.RelativePortID)
	}
	return ps
}

// PortGroups returns the ALUA target port groups of the configuration: those of alua.groups,
// or one active/optimized group 0 of every local port.
func (c *Config) PortGroups() []scsi.PortGroup {
	if c.ALUA == nil {
		return []scsi.PortGroup{{ID: 0, State: scsi.ActiveOptimized, Ports: c.LocalPorts()}}
	}
	var gs []scsi.PortGroup
	for _, g := range c.ALUA.Groups {
		st, _ := scsi.ParseAccessState(g.State)
		pg := scsi.PortGroup{State: st, Preferred: g.Preferred}
		if g.ID != nil {
			pg.ID = uint16(*g.ID)
		}
		for _, p := range g.Ports {
			pg.Ports = append(pg.Ports, uint16(p))
		}
		gs = append(gs, pg)
	}
	return gs
}

// Configured reports whether the configuration names the target's identity itself (id_ext or
// ioc_guid); without either the daemon takes the node GUID of an RDMA device.
func (t *Target) Configured() bool { return t.IDExt != "" || t.IOCGUID != "" }

// Identity returns the configured id_ext and ioc_guid; when only one is given the other takes
// the same value. Both are 0 when neither is (Configured is false).
func (t *Target) Identity() (idExt, iocGUID uint64, err error) {
	if t.IDExt != "" {
		if idExt, err = ParseEUI64(t.IDExt); err != nil {
			return 0, 0, fmt.Errorf("target.id_ext: %w", err)
		}
	}
	if t.IOCGUID != "" {
		if iocGUID, err = ParseEUI64(t.IOCGUID); err != nil {
			return 0, 0, fmt.Errorf("target.ioc_guid: %w", err)
		}
	}
	switch {
	case t.IDExt == "":
		idExt = iocGUID
	case t.IOCGUID == "":
		iocGUID = idExt
	}
	return idExt, iocGUID, nil
}
