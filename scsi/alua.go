package scsi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// AccessState is a target port group's ASYMMETRIC ACCESS STATE (SPC-4 6.37, table 253): how a
// logical unit may be reached through the target ports of the group.
type AccessState uint8

// Asymmetric access states. Logical block dependent and offline are not offered: every logical
// unit of this package is reached the same way over all of its blocks, and a port that is
// offline is one this device server is not answering through.
const (
	ActiveOptimized    AccessState = 0x0
	ActiveNonOptimized AccessState = 0x1
	Standby            AccessState = 0x2
	Unavailable        AccessState = 0x3
	Transitioning      AccessState = 0xF
)

// accessStateNames are the names the configuration uses, as the states are written in SPC-4
// 5.15.2.4 and in multipath-tools' output.
var accessStateNames = [...]struct {
	s    AccessState
	name string
}{
	{ActiveOptimized, "active/optimized"},
	{ActiveNonOptimized, "active/non-optimized"},
	{Standby, "standby"},
	{Unavailable, "unavailable"},
	{Transitioning, "transitioning"},
}

func (s AccessState) String() string {
	for _, n := range accessStateNames {
		if n.s == s {
			return n.name
		}
	}
	return fmt.Sprintf("access state %#x", uint8(s))
}

// ParseAccessState parses a state name as String writes it.
func ParseAccessState(name string) (AccessState, error) {
	for _, n := range accessStateNames {
		if n.name == name {
			return n.s, nil
		}
	}
	return 0, fmt.Errorf("%q is not an asymmetric access state: use active/optimized, active/non-optimized, standby, unavailable or transitioning", name)
}

// notAccessible is the reason a command not allowed in state s fails with (SPC-4 5.15.2.4.4
// to 5.15.2.4.6), and whether commands are limited at all in s.
func (s AccessState) notAccessible() (Reason, bool) {
	switch s {
	case Standby:
		return ReasonLUNotAccessibleTargetPortInStandby, true
	case Unavailable:
		return ReasonLUNotAccessibleTargetPortUnavailable, true
	case Transitioning:
		return ReasonLUNotAccessibleAsymmetricAccessStateTransition, true
	}
	return ReasonNone, false
}

// allows reports whether a command with flags may run through a port in state s.
func (s AccessState) allows(flags opFlags) bool {
	switch s {
	case Standby:
		return flags&opAllowedInStandby != 0
	case Unavailable, Transitioning:
		return flags&opAllowedInUnavailable != 0
	}
	return true
}

// supportedStates are the SUPPORTED bits of a REPORT TARGET PORT GROUPS descriptor (SPC-4 6.37,
// table 252): T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP, the states ParseAccessState accepts.
const supportedStates = 0x80 | 0x08 | 0x04 | 0x02 | 0x01

// PortGroup is one target port group: its TARGET PORT GROUP number, state and the RELATIVE
// TARGET PORT IDENTIFIERs of its ports. A port may be one this device server does not serve
// (another daemon in front of the same storage): REPORT TARGET PORT GROUPS describes it all the
// same, so that the initiator knows every path and its state.
type PortGroup struct {
	ID    uint16
	State AccessState
	// Preferred sets PREF: the group the application client should prefer among those in the
	// same state.
	Preferred bool
	Ports     []uint16
}

// Limits of a port group configuration: they bound the REPORT TARGET PORT GROUPS parameter
// data, which is built once per SetGroups and copied out per command.
const (
	MaxPortGroups      = 32
	MaxPortsInAllGroup = 128
)

// ALUA is the asymmetric logical unit access configuration of the device server: the target
// port groups and their states, shared by every logical unit (one logical unit group) and every
// target port. The states change by configuration (SetGroups), and TPGS in the standard INQUIRY
// data is 01b (implicit only), except for a logical unit whose reservations are shared with
// other device servers (a PRStore): there the table also holds the states SET TARGET PORT
// GROUPS stored for every device server (aluashare.go), and TPGS is 11b. The transport points
// each TargetPort at the same ALUA; a nil ALUA means no asymmetric access (TPGS 00b).
//
// Commands read an immutable snapshot through an atomic pointer: changing the states costs the
// data path nothing.
type ALUA struct {
	snap atomic.Pointer[aluaSnapshot]
}

// aluaSnapshot is one configuration of groups, with what the data path needs precomputed.
type aluaSnapshot struct {
	groups []PortGroup
	// portGroup maps a relative target port identifier to its index in groups; lowPorts holds
	// the same for identifiers below lowPortIDs, as index + 1 (0: no group), which every
	// command looks up: an array index instead of a map lookup (docs/benchmarks.md).
	portGroup map[uint16]int
	lowPorts  [lowPortIDs]uint8
	// rtpgExt and rtpgLen are the REPORT TARGET PORT GROUPS parameter data in the extended
	// header format and in the length only format: the same descriptors behind an 8- or a
	// 4-byte header.
	rtpgExt, rtpgLen []byte
	// status is each group's STATUS CODE (SPC-4 6.37, table 254): why its state last changed.
	status []byte
}

// STATUS CODEs of a target port group descriptor (SPC-4 6.37, table 254).
const (
	statusNone     = 0x00
	statusExplicit = 0x01 // altered by SET TARGET PORT GROUPS
	statusImplicit = 0x02 // altered by an implicit asymmetric access state transition
)

// lowPortIDs bounds the relative target port identifiers found by array index (aluaSnapshot).
const lowPortIDs = 64

// ImplicitTransitionTime is IMPLICIT TRANSITION TIME in the extended header of REPORT TARGET
// PORT GROUPS, in seconds: how long an initiator should wait for a transition to end. A reload
// changes the states at once; 0 means "not specified" to SPC-4 and Linux's scsi_dh_alua then
// retries transitioning for its default (60 s), which suits a peer that takes its time.
const ImplicitTransitionTime = 0

// NewALUA makes an ALUA with groups (see SetGroups).
func NewALUA(groups []PortGroup) (*ALUA, error) {
	a := &ALUA{}
	if _, err := a.SetGroups(groups); err != nil {
		return nil, err
	}
	return a, nil
}

// SetGroups replaces the target port groups. It reports whether any port's access state
// changed (a port that moved to a group in another state, a group whose state changed, a port
// added or removed): the caller then establishes ASYMMETRIC ACCESS STATE CHANGED on every
// logical unit (EstablishUA with ReasonAsymmetricAccessStateChanged), as SPC-4 5.15.2.6 asks
// of an implicit transition. The groups are checked first; on error nothing changes.
func (a *ALUA) SetGroups(groups []PortGroup) (changed bool, err error) {
	if err := checkGroups(groups); err != nil {
		return false, err
	}
	old := a.snap.Load()
	status := make([]byte, len(groups))
	if old != nil {
		for i, g := range groups {
			for _, p := range g.Ports {
				if st, ok := old.portState(p); !ok || st != g.State {
					changed = true
					status[i] = statusImplicit
				}
			}
			if j, ok := old.group(g.ID); ok && old.status[j] != statusNone && old.groups[j].State == g.State {
				status[i] = old.status[j] // still the state the last change made
			}
		}
		for p := range old.portGroup {
			if !slices.ContainsFunc(groups, func(g PortGroup) bool { return slices.Contains(g.Ports, p) }) {
				changed = true
			}
		}
	}
	s := newALUASnapshot(groups, status)
	a.snap.Store(s)
	return changed, nil
}

// newALUASnapshot makes the snapshot of groups (checked) with their STATUS CODEs.
func newALUASnapshot(groups []PortGroup, status []byte) *aluaSnapshot {
	s := &aluaSnapshot{portGroup: make(map[uint16]int), status: status}
	for i, g := range groups {
		g.Ports = append([]uint16(nil), g.Ports...)
		s.groups = append(s.groups, g)
		for _, p := range g.Ports {
			s.portGroup[p] = i
			if p < lowPortIDs {
				s.lowPorts[p] = uint8(i + 1)
			}
		}
	}
	s.rtpgExt = s.buildRTPG()
	s.rtpgLen = make([]byte, len(s.rtpgExt)-4)
	binary.BigEndian.PutUint32(s.rtpgLen, uint32(len(s.rtpgLen)-4))
	copy(s.rtpgLen[4:], s.rtpgExt[rtpgExtendedHeader:])
	return s
}

// Groups returns a copy of the current groups.
func (a *ALUA) Groups() []PortGroup {
	s := a.snap.Load()
	out := make([]PortGroup, len(s.groups))
	for i, g := range s.groups {
		g.Ports = append([]uint16(nil), g.Ports...)
		out[i] = g
	}
	return out
}

// PortState returns the access state and group of the target port with relative identifier
// rel; ok is false when no group holds it.
func (a *ALUA) PortState(rel uint16) (state AccessState, group uint16, ok bool) {
	s := a.snap.Load()
	i, ok := s.portIndex(rel)
	if !ok {
		return 0, 0, false
	}
	return s.groups[i].State, s.groups[i].ID, true
}

func checkGroups(groups []PortGroup) error {
	if len(groups) == 0 {
		return errors.New("no target port group")
	}
	if len(groups) > MaxPortGroups {
		return fmt.Errorf("%d target port groups: at most %d", len(groups), MaxPortGroups)
	}
	ids := map[uint16]bool{}
	ports := map[uint16]uint16{}
	for _, g := range groups {
		if ids[g.ID] {
			return fmt.Errorf("target port group %d is listed twice", g.ID)
		}
		ids[g.ID] = true
		if _, err := ParseAccessState(g.State.String()); err != nil {
			return fmt.Errorf("target port group %d: %w", g.ID, err)
		}
		if len(g.Ports) == 0 {
			return fmt.Errorf("target port group %d has no target port", g.ID)
		}
		for _, p := range g.Ports {
			if p == 0 {
				return fmt.Errorf("target port group %d: relative target port identifier 0 is reserved", g.ID)
			}
			if other, dup := ports[p]; dup {
				return fmt.Errorf("relative target port %d is in target port groups %d and %d", p, other, g.ID)
			}
			ports[p] = g.ID
		}
	}
	if len(ports) > MaxPortsInAllGroup {
		return fmt.Errorf("%d target ports in the target port groups: at most %d", len(ports), MaxPortsInAllGroup)
	}
	return nil
}

// portIndex is the index in groups of the group that holds port rel.
func (s *aluaSnapshot) portIndex(rel uint16) (int, bool) {
	if rel < lowPortIDs {
		i := int(s.lowPorts[rel])
		return i - 1, i > 0
	}
	i, ok := s.portGroup[rel]
	return i, ok
}

func (s *aluaSnapshot) portState(rel uint16) (AccessState, bool) {
	i, ok := s.portIndex(rel)
	if !ok {
		return 0, false
	}
	return s.groups[i].State, true
}

func (s *aluaSnapshot) group(id uint16) (int, bool) {
	for i, g := range s.groups {
		if g.ID == id {
			return i, true
		}
	}
	return 0, false
}

// rtpgExtendedHeader is the length of the extended header (SPC-4 6.37, table 250); the length
// only header is its first four bytes.
const rtpgExtendedHeader = 8

// buildRTPG writes the REPORT TARGET PORT GROUPS parameter data (SPC-4 6.37) with the extended
// header: RETURN DATA LENGTH, FORMAT TYPE 001b, IMPLICIT TRANSITION TIME, then one target port
// group descriptor (table 251) per group.
func (s *aluaSnapshot) buildRTPG() []byte {
	n := rtpgExtendedHeader
	for _, g := range s.groups {
		n += 8 + 4*len(g.Ports)
	}
	b := make([]byte, n)
	binary.BigEndian.PutUint32(b[0:], uint32(n-4))
	b[4] = 0x10 // FORMAT TYPE 001b
	b[5] = ImplicitTransitionTime
	off := rtpgExtendedHeader
	for i, g := range s.groups {
		d := b[off:]
		d[0] = byte(g.State) & 0x0F
		if g.Preferred {
			d[0] |= 0x80 // PREF
		}
		d[1] = supportedStates
		binary.BigEndian.PutUint16(d[2:], g.ID)
		d[5] = s.status[i]
		d[7] = byte(len(g.Ports)) // TARGET PORT COUNT
		for j, p := range g.Ports {
			// Two obsolete bytes, then the RELATIVE TARGET PORT IDENTIFIER.
			binary.BigEndian.PutUint16(d[8+4*j+2:], p)
		}
		off += 8 + 4*len(g.Ports)
	}
	return b
}

// Operation code and service action of REPORT TARGET PORT GROUPS (MAINTENANCE IN).
const saReportTargetPortGroups = 0x0A

// usageReportTPGs is the CDB usage data of REPORT TARGET PORT GROUPS: PARAMETER DATA FORMAT
// (byte 1, bits 7:5) and the allocation length.
var usageReportTPGs = []byte{opMaintenanceIn, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}

// RTPG parameter data formats (SPC-4 6.37, table 249).
const (
	rtpgFormatLengthOnly = 0x0
	rtpgFormatExtended   = 0x1
)

// reportTargetPortGroups handles REPORT TARGET PORT GROUPS (SPC-4 6.37). Without an ALUA
// configuration the command is not supported (TPGS is 00b), as SPC-4 requires: it is answered as
// any unsupported service action of MAINTENANCE IN, and REPORT SUPPORTED OPERATION CODES does
// not list it (LogicalUnit.offers).
func reportTargetPortGroups(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageReportTPGs)) {
		return
	}
	a := c.alua()
	if a == nil {
		c.invalidServiceAction()
		return
	}
	alloc := int(binary.BigEndian.Uint32(c.CDB[6:10]))
	s := lu.aluaView(c, a)
	switch c.CDB[1] >> 5 {
	case rtpgFormatExtended:
		c.putDataIn(s.rtpgExt, alloc)
	case rtpgFormatLengthOnly:
		c.putDataIn(s.rtpgLen, alloc)
	default:
		c.invalidCDBField(1, 7)
	}
}

// alua returns the ALUA configuration of the target port the command came through, or nil.
func (c *Command) alua() *ALUA {
	if c.Nexus == nil || c.Nexus.Port == nil {
		return nil
	}
	return c.Nexus.Port.ALUA
}

// portGroupID is the TARGET PORT GROUP of the port the command came through, for VPD page 0x83:
// from the ALUA configuration when there is one, else TargetPort.GroupID.
func (c *Command) portGroupID() uint16 {
	if a := c.alua(); a != nil {
		if _, g, ok := a.PortState(c.Nexus.Port.RelativeID); ok {
			return g
		}
	}
	return c.Nexus.Port.GroupID
}
