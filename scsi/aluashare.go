package scsi

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Asymmetric access states shared by the device servers of one logical unit.
//
// Two gateways in front of one image are one logical unit with the target ports of both, and
// each describes every port in its target port groups (the configuration's alua). The group
// layout, which port is in which group, comes from each configuration. The states may be
// changed by SET TARGET PORT GROUPS (explicit ALUA, SPC-4 6.36) through any of them: the
// states it sets live with the reservations, in the same shared state (PRStore), so that they
// are changed the same way: one compare-and-write of the version, the other device servers
// told and acknowledging once they applied it (their I_T nexuses given ASYMMETRIC ACCESS STATE
// CHANGED), and the command completes after that. A group SET TARGET PORT GROUPS never named
// keeps its configured state.
//
// A device server that cannot be sure its copy is current (stale, see SetFresh) cannot know
// the states either: its own target ports are then unavailable. It fails the commands the
// unavailable state does not run with LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE
// STATE (what stale reservations fail with anyway), and REPORT TARGET PORT GROUPS through it
// reports the group of the port it came through as unavailable.

// groupState is a target port group's state as SET TARGET PORT GROUPS stored it.
type groupState struct {
	id    uint16
	state AccessState
}

// groupState returns the stored state of group id.
func (s *prState) groupState(id uint16) (AccessState, bool) {
	for _, g := range s.alua {
		if g.id == id {
			return g.state, true
		}
	}
	return 0, false
}

// setGroupState stores state for group id, keeping s.alua sorted by group.
func (s *prState) setGroupState(id uint16, state AccessState) {
	i, found := slices.BinarySearchFunc(s.alua, id, func(g groupState, id uint16) int { return int(g.id) - int(id) })
	if found {
		s.alua[i].state = state
		return
	}
	s.alua = slices.Insert(s.alua, i, groupState{id, state})
}

// GroupStates returns the asymmetric access states that SET TARGET PORT GROUPS stored for
// every device server sharing the reservations, by target port group (none: the configured
// states are in force).
func (r *Reservations) GroupStates() map[uint16]AccessState {
	s := r.state.Load()
	if len(s.alua) == 0 {
		return nil
	}
	out := make(map[uint16]AccessState, len(s.alua))
	for _, g := range s.alua {
		out[g.id] = g.state
	}
	return out
}

// sharedALUA reports whether the access states of c's port are shared with other device
// servers: the port has target port groups and the logical unit's reservations a PRStore.
func (lu *LogicalUnit) sharedALUA(c *Command) bool {
	return lu != nil && lu.pr.store != nil && c.alua() != nil
}

// accessState returns the access state of the target port the command came through; ok is
// false without asymmetric access, or for a port no group holds (which the transport's
// configuration prevents). The configured state, or the shared one; unavailable while the
// shared state is stale.
func (lu *LogicalUnit) accessState(c *Command) (AccessState, bool) {
	a := c.alua()
	if a == nil {
		return 0, false
	}
	s := a.snap.Load()
	i, ok := s.portIndex(c.Nexus.Port.RelativeID)
	if !ok {
		return 0, false
	}
	st := s.groups[i].State
	if lu != nil && lu.pr.store != nil {
		ps := lu.pr.state.Load()
		if ps.stale {
			return Unavailable, true
		}
		if o, ok := ps.groupState(s.groups[i].ID); ok {
			st = o
		}
	}
	return st, true
}

// aluaView is the snapshot REPORT TARGET PORT GROUPS answers c from: a's, with the shared
// states in force (STATUS CODE 01h, set by SET TARGET PORT GROUPS), and, while they are stale,
// the group of c's port unavailable.
func (lu *LogicalUnit) aluaView(c *Command, a *ALUA) *aluaSnapshot {
	s := a.snap.Load()
	if !lu.sharedALUA(c) {
		return s
	}
	ps := lu.pr.state.Load()
	if len(ps.alua) == 0 && !ps.stale {
		return s
	}
	groups := slices.Clone(s.groups)
	status := slices.Clone(s.status)
	for i := range groups {
		if st, ok := ps.groupState(groups[i].ID); ok {
			groups[i].State, status[i] = st, statusExplicit
		}
	}
	if i, ok := s.portIndex(c.Nexus.Port.RelativeID); ok && ps.stale {
		groups[i].State = Unavailable
	}
	return newALUASnapshot(groups, status)
}

// Operation code and service action of SET TARGET PORT GROUPS (MAINTENANCE OUT).
const (
	opMaintenanceOut      = 0xA4
	saSetTargetPortGroups = 0x0A
)

// usageSetTPGs is the CDB usage data of SET TARGET PORT GROUPS: the PARAMETER LIST LENGTH.
var usageSetTPGs = []byte{opMaintenanceOut, 0x1F, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}

// stpgHeader is the length of the parameter list's reserved header, stpgDescriptor that of a
// set target port group descriptor (SPC-4 6.36, tables 246 and 247).
const (
	stpgHeader     = 4
	stpgDescriptor = 4
)

// setTargetPortGroups handles SET TARGET PORT GROUPS (SPC-4 6.36) where the access states are
// shared (sharedALUA); elsewhere MAINTENANCE OUT is not supported. Each descriptor names a
// group of the configuration and one of the states an application client may ask for
// (active/optimized, active/non-optimized, standby, unavailable). The list is checked whole
// before anything changes; the states are stored with the reservations and the command
// completes once every device server sharing them has applied them.
func setTargetPortGroups(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageSetTPGs)) {
		return
	}
	if !lu.sharedALUA(c) {
		c.invalidOpcode()
		return
	}
	plen := int(binary.BigEndian.Uint32(c.CDB[6:10]))
	c.TransferLength = plen
	if plen == 0 {
		return // no descriptor: nothing to change
	}
	base := c.alua().snap.Load()
	if plen < stpgHeader || (plen-stpgHeader)%stpgDescriptor != 0 || plen > stpgHeader+stpgDescriptor*len(base.groups) {
		c.fail(ReasonParameterListLengthError)
		return
	}
	if len(c.DataOut) < plen {
		c.invalidCDBField(6, -1)
		return
	}
	set, f := parseSTPG(c.DataOut[stpgHeader:plen], base)
	if c.failOn(f) {
		return
	}
	if !lu.pr.Fresh() {
		c.fail(ReasonLUNotAccessibleTargetPortUnavailable)
		return
	}
	id := c.Nexus.id()
	ch := lu.pr.change(c, id, false, func(s *prState, eff *prEffects) bool {
		changed := false
		for _, g := range withDemotions(set, s, base) {
			if stored, ok := s.groupState(g.id); !ok || stored != g.state {
				changed = true
			}
			if effectiveState(s, base, g.id) != g.state {
				eff.alua = true
			}
			s.setGroupState(g.id, g.state)
		}
		return changed
	})
	if !ch.ok {
		ch.fail(c)
		return
	}
	lu.applyPREffects(c, id, &ch.eff)
	lu.pr.announce(ch)
}

// effectiveState is group id's state: as stored in s, else as configured in base.
func effectiveState(s *prState, base *aluaSnapshot, id uint16) AccessState {
	if st, ok := s.groupState(id); ok {
		return st
	}
	i, _ := base.group(id)
	return base.groups[i].State
}

// withDemotions adds to set, when it makes a group active/optimized, every other group
// active/optimized in s that it does not name, as active/non-optimized: one group at a time is
// active/optimized once SET TARGET PORT GROUPS chose one (an implicit transition that an
// explicit one causes, which SPC-4 allows). Gateways in front of one RBD image want that: with
// exclusive-lock one gateway at a time should write, and when dm-multipath fails over to a
// path in an active/non-optimized group, Linux's ALUA handler asks for that group alone to
// become active/optimized.
func withDemotions(set []groupState, s *prState, base *aluaSnapshot) []groupState {
	if !slices.ContainsFunc(set, func(g groupState) bool { return g.state == ActiveOptimized }) {
		return set
	}
	out := slices.Clone(set)
	for _, g := range base.groups {
		if effectiveState(s, base, g.ID) == ActiveOptimized && !slices.ContainsFunc(set, func(n groupState) bool { return n.id == g.ID }) {
			out = append(out, groupState{g.ID, ActiveNonOptimized})
		}
	}
	return out
}

// parseSTPG checks the set target port group descriptors d against the groups of base: a
// group it has, each once, in a state an application client may set (SPC-4 6.36: not
// transitioning, and no state this device server does not support). Field pointers count
// from the start of the parameter list.
func parseSTPG(d []byte, base *aluaSnapshot) ([]groupState, fault) {
	var set []groupState
	for off := 0; off < len(d); off += stpgDescriptor {
		p := stpgHeader + off
		st := AccessState(d[off] & 0x0F)
		if d[off]&0xF0 != 0 {
			return nil, paramFieldFault(p, 7)
		}
		switch st {
		case ActiveOptimized, ActiveNonOptimized, Standby, Unavailable:
		default:
			return nil, paramFieldFault(p, 3)
		}
		if d[off+1] != 0 {
			return nil, paramFieldFault(p+1, 7)
		}
		id := binary.BigEndian.Uint16(d[off+2:])
		if _, ok := base.group(id); !ok || slices.ContainsFunc(set, func(g groupState) bool { return g.id == id }) {
			return nil, paramFieldFault(p+2, -1)
		}
		set = append(set, groupState{id, st})
	}
	return set, 0
}

// marshalGroupStates and unmarshalGroupStates are the shared form of prState.alua.
type prFileGroup struct {
	Group uint16 `json:"group"`
	State string `json:"state"`
}

func marshalGroupStates(gs []groupState) []prFileGroup {
	var out []prFileGroup
	for _, g := range gs {
		out = append(out, prFileGroup{g.id, g.state.String()})
	}
	return out
}

func unmarshalGroupStates(fg []prFileGroup) ([]groupState, error) {
	if len(fg) > MaxPortGroups {
		return nil, fmt.Errorf("asymmetric access states of %d groups, at most %d", len(fg), MaxPortGroups)
	}
	var out []groupState
	for i, g := range fg {
		st, err := ParseAccessState(g.State)
		if err != nil || st == Transitioning {
			return nil, fmt.Errorf("target port group %d: state %q cannot be set", g.Group, g.State)
		}
		if i > 0 && g.Group <= fg[i-1].Group {
			return nil, fmt.Errorf("target port group %d after %d: not sorted or twice", g.Group, fg[i-1].Group)
		}
		out = append(out, groupState{g.Group, st})
	}
	return out, nil
}
