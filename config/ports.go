package config

import (
	"fmt"
	"math"

	"github.com/srptarget/srptarget/scsi"
)

// The validator's checks of the target's ports and their ALUA groups.

// validatePorts checks target.relative_port_id, target.ports and alua.
func (v *validator) validatePorts(c *Config) {
	rel := map[uint16]string{c.Target.RelativePortID: "target"}
	ids := map[uint64]int{}
	for i := range c.Target.Ports {
		p := &c.Target.Ports[i]
		if p.IDExt == "" {
			v.errorf(At("target", "ports", i, "id_ext"), "id_ext is missing: each target port needs its own")
		} else if n, err := ParseEUI64(p.IDExt); err != nil {
			v.errorf(At("target", "ports", i, "id_ext"), "%v", err)
		} else if j, dup := ids[n]; dup {
			v.errorf(At("target", "ports", i, "id_ext"), "same id_ext as target.ports[%d]", j)
		} else {
			ids[n] = i
		}
		if p.IOCGUID != "" {
			if _, err := ParseEUI64(p.IOCGUID); err != nil {
				v.errorf(At("target", "ports", i, "ioc_guid"), "%v", err)
			}
		}
		if p.RelativePortID == 0 {
			v.errorf(At("target", "ports", i, "relative_port_id"), "relative_port_id is missing or 0: each target port needs its own, 1 to 65535")
			continue
		}
		if who, dup := rel[p.RelativePortID]; dup {
			v.errorf(At("target", "ports", i, "relative_port_id"), "relative port %d is %s's already", p.RelativePortID, who)
		}
		rel[p.RelativePortID] = fmt.Sprintf("target.ports[%d]", i)
	}
	if c.ALUA == nil {
		return
	}
	if len(c.ALUA.Groups) == 0 {
		v.errorf(At("alua", "groups"), "no target port group: list at least one, or remove alua")
		return
	}
	inGroup := map[int]bool{}
	ok := true
	for i := range c.ALUA.Groups {
		g := &c.ALUA.Groups[i]
		if g.ID == nil {
			v.errorf(At("alua", "groups", i, "id"), "id is missing (a target port group number, 0 to 65535)")
			ok = false
		} else if *g.ID < 0 || *g.ID > math.MaxUint16 {
			v.errorf(At("alua", "groups", i, "id"), "%d is outside 0..65535", *g.ID)
			ok = false
		}
		if _, err := scsi.ParseAccessState(g.State); err != nil {
			v.errorf(At("alua", "groups", i, "state"), "%v", err)
			ok = false
		}
		if len(g.Ports) == 0 {
			v.errorf(At("alua", "groups", i, "ports"), "no relative target port listed")
			ok = false
		}
		for j, p := range g.Ports {
			if p < 1 || p > math.MaxUint16 {
				v.errorf(At("alua", "groups", i, "ports", j), "%d is outside 1..65535", p)
				ok = false
			}
			inGroup[p] = true
		}
	}
	for _, p := range c.LocalPorts() {
		if !inGroup[int(p)] {
			v.errorf(At("alua", "groups"), "relative target port %d (%s) is in no target port group", p, rel[p])
			ok = false
		}
	}
	if ok {
		if _, err := scsi.NewALUA(c.PortGroups()); err != nil {
			v.errorf(At("alua", "groups"), "%v", err)
		}
	}
}
