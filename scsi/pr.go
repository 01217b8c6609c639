package scsi

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
)

// Persistent reservation types (SPC-4 6.16.2, table 212: the TYPE field of PERSISTENT RESERVE
// OUT and the reservation descriptors of PERSISTENT RESERVE IN).
const (
	PRTypeWriteExclusive                 = 0x1
	PRTypeExclusiveAccess                = 0x3
	PRTypeWriteExclusiveRegistrantsOnly  = 0x5
	PRTypeExclusiveAccessRegistrantsOnly = 0x6
	PRTypeWriteExclusiveAllRegistrants   = 0x7
	PRTypeExclusiveAccessAllRegistrants  = 0x8
)

// prScopeLU is LU_SCOPE, the only SCOPE SPC-4 keeps (6.16.2).
const prScopeLU = 0x0

// validPRType reports whether t is one of the six reservation types.
func validPRType(t uint8) bool {
	switch t {
	case PRTypeWriteExclusive, PRTypeExclusiveAccess,
		PRTypeWriteExclusiveRegistrantsOnly, PRTypeExclusiveAccessRegistrantsOnly,
		PRTypeWriteExclusiveAllRegistrants, PRTypeExclusiveAccessAllRegistrants:
		return true
	}
	return false
}

// prAllRegistrants reports whether every registered I_T nexus holds a reservation of type t
// (SPC-4 5.13.10: all registrants types).
func prAllRegistrants(t uint8) bool {
	return t == PRTypeWriteExclusiveAllRegistrants || t == PRTypeExclusiveAccessAllRegistrants
}

// prRegistrantsAccess reports whether registered I_T nexuses that do not hold a reservation of
// type t still access the logical unit as if they did (registrants only and all registrants).
func prRegistrantsAccess(t uint8) bool { return t >= PRTypeWriteExclusiveRegistrantsOnly }

// prExclusiveAccess reports whether a reservation of type t keeps non-holders from reading too.
func prExclusiveAccess(t uint8) bool {
	return t == PRTypeExclusiveAccess || t == PRTypeExclusiveAccessRegistrantsOnly ||
		t == PRTypeExclusiveAccessAllRegistrants
}

// ITNexusID names an I_T nexus independently of the Nexus object: registrations are made by I_T
// nexus (SPC-4 5.13.7) and outlive the Nexus objects of the transport, and with APTPL the
// daemon.
type ITNexusID struct {
	// Initiator is the initiator port identifier: for SRP the 16-byte INITIATOR PORT
	// IDENTIFIER of the login (SRP-2 5.6.2), as the SRP TransportID carries it.
	Initiator [16]byte
	// RelativePort is the RELATIVE TARGET PORT IDENTIFIER of the target port.
	RelativePort uint16
}

// id returns the I_T nexus identifier of n (the zero one for a nil n).
func (n *Nexus) id() ITNexusID {
	if n == nil {
		return ITNexusID{}
	}
	id := ITNexusID{Initiator: n.InitiatorID}
	if n.Port != nil {
		id.RelativePort = n.Port.RelativeID
	}
	return id
}

// PRRegistration is one registration: a reservation key and the I_T nexus, or with
// AllTargetPorts the initiator port through every target port (ALL_TG_PT, SPC-4 6.16.3), it was
// made for.
type PRRegistration struct {
	Key uint64
	ITNexusID
	AllTargetPorts bool
	// Holder marks the registration that holds the reservation (not used by the all
	// registrants types, where every registration does).
	Holder bool
}

// matches reports whether the registration covers the I_T nexus id.
func (r *PRRegistration) matches(id ITNexusID) bool {
	return r.Initiator == id.Initiator && (r.AllTargetPorts || r.RelativePort == id.RelativePort)
}

// prState is one immutable version of a logical unit's reservations. Commands read it with one
// atomic load (Reservations.state); changes build a new one.
type prState struct {
	// active is false when there is nothing a command could conflict with: no registration
	// and no SPC-2 reservation. The I/O path checks only it.
	active     bool
	generation uint32 // PRGENERATION (SPC-4 6.15.2)
	regs       []PRRegistration
	resType    uint8 // TYPE of the persistent reservation; 0 when there is none
	aptpl      bool  // ACTIVATE PERSIST THROUGH POWER LOSS of the last registration
	// spc2 is the I_T nexus holding an SPC-2 reservation (RESERVE(6)/(10)), if any.
	spc2 *ITNexusID
	// stale is set while shared reservations cannot be known current (SetFresh): commands
	// that a reservation could conflict with fail instead (prshare.go).
	stale bool
	// alua are the asymmetric access states that SET TARGET PORT GROUPS stored for the
	// device servers sharing the state, by group, sorted (aluashare.go).
	alua []groupState
}

// clone returns a copy of s whose registrations may be changed.
func (s *prState) clone() *prState {
	n := *s
	n.regs = slices.Clone(s.regs)
	n.alua = slices.Clone(s.alua)
	return &n
}

// find returns the index of the registration of id, or -1.
func (s *prState) find(id ITNexusID) int {
	for i := range s.regs {
		if s.regs[i].matches(id) {
			return i
		}
	}
	return -1
}

// findInitiator returns the index of a registration of the initiator port through any target
// port, or -1.
func (s *prState) findInitiator(ini [16]byte) int {
	for i := range s.regs {
		if s.regs[i].Initiator == ini {
			return i
		}
	}
	return -1
}

// holds reports whether the I_T nexus id holds the persistent reservation.
func (s *prState) holds(id ITNexusID) bool {
	if s.resType == 0 {
		return false
	}
	i := s.find(id)
	return i >= 0 && (s.regs[i].Holder || prAllRegistrants(s.resType))
}

// holder returns the index of the registration holding a reservation that is not of an all
// registrants type, or -1.
func (s *prState) holder() int {
	for i := range s.regs {
		if s.regs[i].Holder {
			return i
		}
	}
	return -1
}

// release drops the persistent reservation.
func (s *prState) release() {
	s.resType = 0
	for i := range s.regs {
		s.regs[i].Holder = false
	}
}

// settle restores the invariants after a change: an all registrants reservation ends with its
// last registration, and active says whether anything is left to conflict with.
func (s *prState) settle() {
	if len(s.regs) == 0 {
		s.resType = 0
	}
	s.active = len(s.regs) > 0 || s.spc2 != nil || s.stale
}

// conflicts reports whether command op from the I_T nexus id must end in RESERVATION CONFLICT
// (SPC-4 5.13.1 table 51 and SBC-3 4.17 for persistent reservations, SPC-2 5.5.1 for SPC-2
// reservations).
func (s *prState) conflicts(id ITNexusID, op *opInfo, cdb []byte) bool {
	if s.spc2 != nil && *s.spc2 != id && op.flags&opSPC2Allowed == 0 {
		return true
	}
	if s.resType == 0 || op.flags&opPRAllowed != 0 {
		return false
	}
	if s.holds(id) || prRegistrantsAccess(s.resType) && s.find(id) >= 0 {
		return false
	}
	if op.flags&opPRByCDB != 0 && prAllowedByCDB(op, cdb) {
		return false
	}
	if op.flags&opPRReads != 0 {
		return prExclusiveAccess(s.resType)
	}
	return true
}

// prAllowedByCDB decides the commands whose conflict depends on their CDB: PREVENT ALLOW
// MEDIUM REMOVAL with PREVENT 00b (SPC-4 table 51), and START STOP UNIT with START set and no
// power condition (SBC-3 table 13), are allowed; the other forms conflict.
func prAllowedByCDB(op *opInfo, cdb []byte) bool {
	switch op.opcode {
	case opPreventAllowMedium:
		return cdb[4]&0x03 == 0
	case opStartStopUnit:
		return cdb[4]&0x01 != 0 && cdb[4]&0xF0 == 0
	}
	return false
}

// maxPRRegistrations bounds the registrations of one logical unit; more end in INSUFFICIENT
// REGISTRATION RESOURCES (SPC-4 5.13.7).
const maxPRRegistrations = 256

// Reservations holds the persistent reservations and the SPC-2 reservation of one logical
// unit. It lives apart from the LogicalUnit: registrations belong to the logical unit's
// identity, so that a reload that replaces the LogicalUnit object (a changed setting) hands
// the same Reservations to the new one and initiators keep their keys and reservation.
type Reservations struct {
	// mu serializes changes (PERSISTENT RESERVE OUT, RESERVE, RELEASE) and their persisting.
	mu    sync.Mutex
	state atomic.Pointer[prState]
	// persist saves the state whenever APTPL is in force, with nil data to remove what it
	// saved; nil when the logical unit cannot persist (PTPL_C is then 0).
	persist func(data []byte) error
	// store, when not nil, keeps the state for several device servers (prshare.go): version
	// is the stored version the state is, events the unit attentions and aborts of the last
	// changes as stored with it. Both are guarded by mu.
	store   PRStore
	version uint64
	events  []prEvent
	// applying are the versions in force whose effects on I_T nexuses are being applied;
	// applied is signalled when one is done (Version, Apply).
	applying map[uint64]struct{}
	applied  *sync.Cond
	// lu is the logical unit that the changes other device servers make reach (the newest
	// one using these reservations).
	lu atomic.Pointer[LogicalUnit]
}

// NewReservations makes empty reservations. persist, when not nil, is called with the
// serialized state (MarshalReservations) after every change while APTPL is in force, and with
// nil when APTPL is turned off; it must write atomically. A change is in force only once
// persist succeeded.
func NewReservations(persist func(data []byte) error) *Reservations {
	r := &Reservations{persist: persist}
	r.state.Store(&prState{})
	return r
}

// LoadReservations makes reservations from data saved by persist (MarshalReservations). It
// refuses data it cannot fully trust, with an error saying what is wrong.
func LoadReservations(data []byte, persist func(data []byte) error) (*Reservations, error) {
	s, err := unmarshalPRState(data)
	if err != nil {
		return nil, err
	}
	r := &Reservations{persist: persist}
	r.state.Store(s)
	return r, nil
}

// Registrations returns the registrations and the reservation type (0: none), for status
// displays.
func (r *Reservations) Registrations() (regs []PRRegistration, resType uint8, generation uint32) {
	s := r.state.Load()
	return slices.Clone(s.regs), s.resType, s.generation
}

// dropSPC2 drops the SPC-2 reservation when the I_T nexus id holds it (or any, for a nil
// id): a reset or the loss of the holder's nexus releases it (SPC-2 5.5.1).
func (r *Reservations) dropSPC2(id *ITNexusID) {
	var from ITNexusID
	if id != nil {
		from = *id
	}
	r.publish(r.change(nil, from, false, func(s *prState, _ *prEffects) bool {
		if s.spc2 == nil || id != nil && *s.spc2 != *id {
			return false
		}
		s.spc2 = nil
		return true
	}))
}

// SRP TransportID (SPC-4 7.6.4.5): FORMAT CODE 00b, PROTOCOL IDENTIFIER 4h, then the 16-byte
// initiator port identifier at byte 8.
const (
	ProtocolSRP          = 0x4
	srpTransportIDLength = 24
)

// putSRPTransportID writes the SRP TransportID of initiator into b (24 bytes).
func putSRPTransportID(b []byte, initiator [16]byte) {
	clear(b[:srpTransportIDLength])
	b[0] = ProtocolSRP
	copy(b[8:24], initiator[:])
}

// parseTransportID decodes the TransportID at the start of b. It returns the initiator port
// and the TransportID's length, or the offset within b of the field that is wrong (bad >= 0).
func parseTransportID(b []byte) (initiator [16]byte, n int, bad int) {
	if len(b) < srpTransportIDLength {
		return initiator, 0, 0
	}
	if b[0]&0x0F != ProtocolSRP || b[0]&0xC0 != 0 {
		return initiator, 0, 0
	}
	copy(initiator[:], b[8:24])
	return initiator, srpTransportIDLength, -1
}

// PERSISTENT RESERVE IN service actions (SPC-4 6.15.1 table 200).
const (
	prInReadKeys           = 0x00
	prInReadReservation    = 0x01
	prInReportCapabilities = 0x02
	prInReadFullStatus     = 0x03
)

// persistentReserveIn handles PERSISTENT RESERVE IN (SPC-4 6.15).
func persistentReserveIn(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usagePRIn)) {
		return
	}
	alloc := int(binary.BigEndian.Uint16(c.CDB[7:9]))
	s := lu.pr.state.Load()
	var data []byte
	switch c.CDB[1] & 0x1F {
	case prInReadKeys:
		// SPC-4 6.15.2: PRGENERATION, ADDITIONAL LENGTH, then a key per registration.
		data = make([]byte, 8, 8+8*len(s.regs))
		for i := range s.regs {
			data = binary.BigEndian.AppendUint64(data, s.regs[i].Key)
		}
	case prInReadReservation:
		// SPC-4 6.15.3: one reservation descriptor when there is a reservation. Its key is
		// zero for the all registrants types, whose holders have every key.
		data = make([]byte, 8, 24)
		if s.resType != 0 {
			d := make([]byte, 16)
			if h := s.holder(); h >= 0 {
				binary.BigEndian.PutUint64(d[0:], s.regs[h].Key)
			}
			d[13] = prScopeLU<<4 | s.resType
			data = append(data, d...)
		}
	case prInReportCapabilities:
		data = lu.pr.capabilities(s)
		c.putDataIn(data, alloc)
		return
	case prInReadFullStatus:
		data = make([]byte, 8, 8+(24+srpTransportIDLength)*len(s.regs))
		for i := range s.regs {
			reg := &s.regs[i]
			d := make([]byte, 24+srpTransportIDLength)
			binary.BigEndian.PutUint64(d[0:], reg.Key)
			if reg.AllTargetPorts {
				d[12] |= 0x02 // ALL_TG_PT
			}
			if s.resType != 0 && (reg.Holder || prAllRegistrants(s.resType)) {
				d[12] |= 0x01 // R_HOLDER
				d[13] = prScopeLU<<4 | s.resType
			}
			binary.BigEndian.PutUint16(d[18:], reg.RelativePort)
			binary.BigEndian.PutUint32(d[20:], srpTransportIDLength)
			putSRPTransportID(d[24:], reg.Initiator)
			data = append(data, d...)
		}
	default:
		c.invalidCDBField(1, 4)
		return
	}
	binary.BigEndian.PutUint32(data[0:], s.generation)
	binary.BigEndian.PutUint32(data[4:], uint32(len(data)-8))
	c.putDataIn(data, alloc)
}

// capabilities is the REPORT CAPABILITIES parameter data (SPC-4 6.15.4).
func (r *Reservations) capabilities(s *prState) []byte {
	d := make([]byte, 8)
	binary.BigEndian.PutUint16(d[0:], 8) // LENGTH
	// CRH: RESERVE and RELEASE follow SPC-4 5.13.3 in the presence of persistent
	// reservations. SIP_C: SPEC_I_PT. ATP_C: ALL_TG_PT.
	d[2] = 0x10 | 0x08 | 0x04
	if r.persistable() {
		d[2] |= 0x01 // PTPL_C
	}
	// TMV: the type mask is valid. ALLOW COMMANDS 001b: TEST UNIT READY is allowed from
	// every I_T nexus (SPC-4 table 51), as table 205 describes that value.
	d[3] = 0x80 | 0x01<<4
	if s.aptpl {
		d[3] |= 0x01 // PTPL_A
	}
	d[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02 // WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX
	d[5] = 0x01                             // EX_AC_AR
	return d
}

// Operation codes of the persistent reservation commands (SPC-4 Annex E).
const (
	opPersistentReserveIn  = 0x5E
	opPersistentReserveOut = 0x5F
)

// CDB usage data of PERSISTENT RESERVE IN (SERVICE ACTION, ALLOCATION LENGTH) and OUT (SERVICE
// ACTION, SCOPE and TYPE, PARAMETER LIST LENGTH).
var (
	usagePRIn  = []byte{opPersistentReserveIn, 0x1F, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0x07}
	usagePROut = []byte{opPersistentReserveOut, 0x1F, 0xFF, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x07}
)

// prCommands are the reservation commands: PERSISTENT RESERVE IN and OUT, one entry per service
// action so that REPORT SUPPORTED OPERATION CODES lists each, and the SPC-2 RESERVE and RELEASE.
// A port in the standby state runs PERSISTENT RESERVE IN and OUT (SPC-4 5.15.2.4.4), so that a
// cluster can fence through any path; RESERVE and RELEASE are not in that list.
var prCommands = func() []opInfo {
	in := []string{"READ KEYS", "READ RESERVATION", "REPORT CAPABILITIES", "READ FULL STATUS"}
	out := []string{"REGISTER", "RESERVE", "RELEASE", "CLEAR", "PREEMPT", "PREEMPT AND ABORT",
		"REGISTER AND IGNORE EXISTING KEY", "REGISTER AND MOVE"}
	var l []opInfo
	for sa, name := range in {
		l = append(l, opInfo{name: "PERSISTENT RESERVE IN " + name, opcode: opPersistentReserveIn,
			serviceAction: uint16(sa), hasSA: true, cdbLength: 10, usage: usagePRIn,
			flags: opPRAllowed | opAllowedInStandby, run: persistentReserveIn})
	}
	for sa, name := range out {
		l = append(l, opInfo{name: "PERSISTENT RESERVE OUT " + name, opcode: opPersistentReserveOut,
			serviceAction: uint16(sa), hasSA: true, cdbLength: 10, usage: usagePROut,
			flags: opPRAllowed | opChangesReservations | opAllowedInStandby, run: persistentReserveOut})
	}
	return append(l,
		opInfo{name: "RESERVE(6)", opcode: opReserve6, cdbLength: 6, usage: usageReserve6,
			flags: opPRAllowed | opChangesReservations, run: reserveSPC2},
		opInfo{name: "RELEASE(6)", opcode: opRelease6, cdbLength: 6, usage: usageRelease6,
			flags: opPRAllowed | opSPC2Allowed, run: releaseSPC2},
		opInfo{name: "RESERVE(10)", opcode: opReserve10, cdbLength: 10, usage: usageReserve10,
			flags: opPRAllowed | opChangesReservations, run: reserveSPC2},
		opInfo{name: "RELEASE(10)", opcode: opRelease10, cdbLength: 10, usage: usageRelease10,
			flags: opPRAllowed | opSPC2Allowed, run: releaseSPC2},
	)
}()
