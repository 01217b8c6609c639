package scsi

import (
	"fmt"
	"slices"
)

// Mapping puts a logical unit at a LUN for the initiators of a LUNMap.
type Mapping struct {
	LUN uint16
	LU  *LogicalUnit
	// ReadOnly write-protects the logical unit for these initiators only.
	ReadOnly bool
}

// WriteProtected reports whether the logical unit is write-protected for the initiators of
// the mapping: the mapping, the logical unit or its backstore is read-only (MODE SENSE then
// reports WP). Such an initiator may not change what other initiators share: its writes and
// MODE SELECT get WRITE PROTECTED, and its CLEAR TASK SET and LOGICAL UNIT RESET reach only its
// own commands (LUNMap.ClearTaskSet, LUNMap.LogicalUnitReset). A transport that aborts
// commands itself must scope them the same way.
func (mp *Mapping) WriteProtected() bool {
	return mp.ReadOnly || mp.LU.cfg.ReadOnly || mp.LU.bs.ReadOnly()
}

// LUNMap is what a group of initiators sees: LUN numbers mapped to logical units. It is
// immutable; a configuration reload builds a new one. It is the transport's entry point for
// commands and for task management.
type LUNMap struct {
	mappings []Mapping // sorted by LUN
	// low indexes the mappings of LUNs below 256 (peripheral addressing, what Linux uses for
	// them) so that the per-command lookup is an array load; high holds the rest.
	low  [256]*Mapping
	high map[uint16]*Mapping
}

// NewLUNMap checks that LUNs are unique and in range and builds the map.
func NewLUNMap(mappings []Mapping) (*LUNMap, error) {
	m := &LUNMap{mappings: slices.Clone(mappings), high: make(map[uint16]*Mapping)}
	slices.SortFunc(m.mappings, func(a, b Mapping) int { return int(a.LUN) - int(b.LUN) })
	seen := make(map[uint16]bool, len(mappings))
	for i, mp := range m.mappings {
		if mp.LU == nil {
			return nil, fmt.Errorf("lun %d: no logical unit", mp.LUN)
		}
		if mp.LUN > MaxLUN {
			return nil, fmt.Errorf("lun %d: larger than %d", mp.LUN, MaxLUN)
		}
		if seen[mp.LUN] {
			return nil, fmt.Errorf("lun %d: mapped twice", mp.LUN)
		}
		seen[mp.LUN] = true
		if mp.LUN < 256 {
			m.low[mp.LUN] = &m.mappings[i]
		} else {
			m.high[mp.LUN] = &m.mappings[i]
		}
	}
	return m, nil
}

// Mappings returns the mappings in LUN order. The slice must not be changed.
func (m *LUNMap) Mappings() []Mapping { return m.mappings }

// Lookup returns the mapping of the eight-byte LUN raw, or nil.
func (m *LUNMap) Lookup(raw uint64) *Mapping {
	n, ok := DecodeLUN(raw)
	if !ok {
		return nil
	}
	if n < 256 {
		return m.low[n]
	}
	return m.high[n]
}

// Execute runs c on the logical unit its LUN names. Commands to a LUN that is not mapped get what
// SPC-4 prescribes: INQUIRY answers with peripheral qualifier 3, REPORT LUNS and REQUEST SENSE
// work, anything else is LOGICAL UNIT NOT SUPPORTED.
func (m *LUNMap) Execute(c *Command) {
	c.lunMap = m
	if mp := m.Lookup(c.LUN); mp != nil {
		c.readOnly = mp.ReadOnly
		mp.LU.Execute(c)
		return
	}
	c.lu = nil
	c.Status = StatusGood
	if len(c.CDB) == 0 {
		c.fail(ReasonInvalidFieldInCommandIU)
		return
	}
	executeWithoutLU(m, c)
}

// ExecuteMapped is Execute for a transport that looked c's LUN up in m itself: mp is what
// Lookup returned for it, not nil.
func (m *LUNMap) ExecuteMapped(mp *Mapping, c *Command) {
	c.lunMap = m
	c.readOnly = mp.ReadOnly
	mp.LU.Execute(c)
}

// EstablishUA makes reason pending for nexus n on every logical unit of the map (for example
// REPORTED LUNS DATA HAS CHANGED after a reload changed the map).
func (m *LUNMap) EstablishUA(n *Nexus, reason Reason) {
	for _, mp := range m.mappings {
		mp.LU.EstablishUA(n, reason)
	}
}

// NexusReset aborts every command of nexus n on every logical unit of the map and establishes
// I_T NEXUS LOSS OCCURRED (I_T NEXUS RESET, logout or a lost connection).
func (m *LUNMap) NexusReset(n *Nexus) {
	for _, mp := range m.mappings {
		mp.LU.NexusReset(n)
	}
}

// lu returns the logical unit of the LUN raw for a task management function.
func (m *LUNMap) lu(raw uint64) *LogicalUnit {
	if mp := m.Lookup(raw); mp != nil {
		return mp.LU
	}
	return nil
}

// AbortTask aborts the command with tag of nexus n on the LUN raw.
func (m *LUNMap) AbortTask(n *Nexus, raw uint64, tag uint64) TMFResponse {
	if lu := m.lu(raw); lu != nil {
		return lu.AbortTask(n, tag)
	}
	return TMFIncorrectLUN
}

// AbortTaskSet aborts the commands of nexus n on the LUN raw.
func (m *LUNMap) AbortTaskSet(n *Nexus, raw uint64) TMFResponse {
	if lu := m.lu(raw); lu != nil {
		return lu.AbortTaskSet(n)
	}
	return TMFIncorrectLUN
}

// ClearTaskSet aborts every command on the LUN raw, from every nexus (SAM-5 CLEAR TASK SET).
// From a write-protected mapping (Mapping.WriteProtected) it aborts only nexus n's commands, as
// ABORT TASK SET: an initiator that may not write must not be able to make other initiators'
// commands fail either. It still answers FUNCTION COMPLETE, which is true of the commands it
// can see. (LIO refuses CLEAR TASK SET from everyone with FUNCTION NOT SUPPORTED, in
// target_tmr_work, drivers/target/target_core_transport.c.)
func (m *LUNMap) ClearTaskSet(n *Nexus, raw uint64) TMFResponse {
	return m.allNexusTMF(n, raw, (*LogicalUnit).AbortTaskSet, (*LogicalUnit).ClearTaskSet)
}

// LogicalUnitReset resets the LUN raw: every nexus's commands are aborted, mode parameters
// return to their defaults, and every nexus gets a unit attention (SAM-5 LOGICAL UNIT RESET).
// From a write-protected mapping (Mapping.WriteProtected) only nexus n's commands are aborted
// and only n gets the unit attention; the mode parameters, which such an initiator cannot have
// changed, stay. It answers FUNCTION COMPLETE all the same, since the initiator's own commands
// are all gone, which is what its error handler asked for: ib_srp's srp_reset_device
// (drivers/infiniband/ulp/srp/ib_srp.c) takes any other response as FAILED, and the SCSI
// error handler then escalates to srp_reset_host, a reconnect. LIO resets for everyone
// (core_tmr_lun_reset, drivers/target/target_core_tmr.c).
func (m *LUNMap) LogicalUnitReset(n *Nexus, raw uint64) TMFResponse {
	return m.allNexusTMF(n, raw, (*LogicalUnit).resetNexus, (*LogicalUnit).Reset)
}

// allNexusTMF runs, for nexus n, a task management function that acts on the commands of every
// nexus of the LUN raw: all, or own (the part that touches n alone) from a write-protected
// mapping.
func (m *LUNMap) allNexusTMF(n *Nexus, raw uint64, own, all func(*LogicalUnit, *Nexus) TMFResponse) TMFResponse {
	mp := m.Lookup(raw)
	switch {
	case mp == nil:
		return TMFIncorrectLUN
	case mp.WriteProtected():
		return own(mp.LU, n)
	}
	return all(mp.LU, n)
}

// QueryTask reports whether the command with tag of nexus n is in the LUN's task set.
func (m *LUNMap) QueryTask(n *Nexus, raw uint64, tag uint64) TMFResponse {
	if lu := m.lu(raw); lu != nil {
		return lu.QueryTask(n, tag)
	}
	return TMFIncorrectLUN
}
