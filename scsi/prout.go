package scsi

import (
	"encoding/binary"
	"slices"
)

// PERSISTENT RESERVE OUT service actions (SPC-4 6.16.1 table 209).
const (
	prOutRegister            = 0x00
	prOutReserve             = 0x01
	prOutRelease             = 0x02
	prOutClear               = 0x03
	prOutPreempt             = 0x04
	prOutPreemptAndAbort     = 0x05
	prOutRegisterAndIgnore   = 0x06
	prOutRegisterAndMove     = 0x07
	prOutBasicParamLength    = 24 // SPC-4 6.16.3 table 213, without additional parameter data
	prOutSpecIPTHeaderLength = 28 // ... with TRANSPORTID PARAMETER DATA LENGTH
	prOutMoveHeaderLength    = 24 // REGISTER AND MOVE parameter list header (SPC-4 6.16.4)
	prOutFlagsOff            = 20 // SPEC_I_PT, ALL_TG_PT, APTPL
	// prOutMaxParamLength is the longest parameter list a PERSISTENT RESERVE OUT can use:
	// REGISTER with SPEC_I_PT naming as many SRP TransportIDs as there can be registrations.
	// A longer list is refused before it is looked at, without taking the reservations' lock.
	prOutMaxParamLength      = prOutSpecIPTHeaderLength + maxPRRegistrations*srpTransportIDLength
	prOutSpecIPT        byte = 0x08
	prOutAllTgPt        byte = 0x04
	prOutAPTPL          byte = 0x01
)

// prUA is a unit attention for the I_T nexuses a registration covers.
type prUA struct {
	reg    PRRegistration
	reason Reason
}

// prEffects is what a PERSISTENT RESERVE OUT does to other I_T nexuses once its new state is in
// force: unit attentions, and for PREEMPT AND ABORT the commands to abort.
type prEffects struct {
	ua    []prUA
	abort []PRRegistration
	// alua: SET TARGET PORT GROUPS changed an access state; every I_T nexus but the one it
	// came through gets ASYMMETRIC ACCESS STATE CHANGED (SPC-4 6.36).
	alua bool
}

// uaAllBut queues reason for every registration of s that does not cover the I_T nexus id.
func (e *prEffects) uaAllBut(s *prState, id ITNexusID, reason Reason) {
	for _, r := range s.regs {
		if !r.matches(id) {
			e.ua = append(e.ua, prUA{r, reason})
		}
	}
}

// reservationConflict ends the command with RESERVATION CONFLICT, which has no sense data.
func (c *Command) reservationConflict() {
	c.Status = StatusReservationConflict
	c.SenseLength, c.DataInLength = 0, 0
}

// persistentReserveOut handles PERSISTENT RESERVE OUT (SPC-4 6.16, 5.13). The change is worked
// out on a copy of the state under the reservations' lock and put in force (persisted first
// when APTPL asks for it, or stored in the PRStore shared with other device servers) before the
// other I_T nexuses hear of it; with a PRStore the command completes once the other device
// servers have applied it too, or have fenced themselves (Reservations.publish).
func persistentReserveOut(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usagePROut)) {
		return
	}
	sa := c.CDB[1] & 0x1F
	plen := int(binary.BigEndian.Uint32(c.CDB[5:9]))
	c.TransferLength = plen
	if sa > prOutRegisterAndMove {
		c.invalidCDBField(1, 4)
		return
	}
	if plen < prOutBasicParamLength {
		c.fail(ReasonParameterListLengthError)
		return
	}
	if len(c.DataOut) < plen {
		c.invalidCDBField(5, -1)
		return
	}
	p := c.DataOut[:plen]
	if plen > prOutMaxParamLength {
		// More TransportIDs than could ever be registered: INSUFFICIENT REGISTRATION
		// RESOURCES (SPC-4 5.13.7, a REGISTER the device server lacks the resources for).
		// Every other parameter list has a fixed length (SPC-4 6.16.3, 6.16.4): PARAMETER
		// LIST LENGTH ERROR.
		if sa == prOutRegister && p[prOutFlagsOff]&prOutSpecIPT != 0 {
			c.fail(ReasonInsufficientRegistrationResources)
		} else {
			c.fail(ReasonParameterListLengthError)
		}
		return
	}
	id := c.Nexus.id()

	ch := lu.pr.change(c, id, true, func(s *prState, eff *prEffects) bool {
		c.Status, c.SenseLength = StatusGood, 0
		return prOut(lu, c, s, id, sa, p, eff) && c.Status == StatusGood
	})
	if !ch.ok {
		ch.fail(c)
		return
	}
	lu.applyPREffects(c, id, &ch.eff)
	lu.pr.publish(ch)
}

// checkScopeType checks the SCOPE and TYPE fields of PERSISTENT RESERVE OUT (CDB byte 2) for
// the service actions that use them: the scope must be LU_SCOPE and the type one of SPC-4
// table 176.
func checkScopeType(scope, typ byte) fault {
	if scope != prScopeLU {
		return cdbFieldFault(2, 7)
	}
	if !validPRType(typ) {
		return cdbFieldFault(2, 3)
	}
	return 0
}

// prOut applies service action sa with parameter list p from the I_T nexus id to s. It reports
// whether s changed; a failure is set on c.
func prOut(lu *LogicalUnit, c *Command, s *prState, id ITNexusID, sa byte, p []byte, eff *prEffects) bool {
	key := binary.BigEndian.Uint64(p[0:8])
	saKey := binary.BigEndian.Uint64(p[8:16])
	scope, typ := c.CDB[2]>>4, c.CDB[2]&0x0F

	if sa == prOutRegisterAndMove {
		return prRegisterAndMove(lu, c, s, id, p, key, saKey)
	}
	if p[prOutFlagsOff]&prOutSpecIPT == 0 && len(p) != prOutBasicParamLength {
		c.fail(ReasonParameterListLengthError)
		return false
	}
	if sa == prOutRegister || sa == prOutRegisterAndIgnore {
		return prRegister(lu, c, s, id, p, key, saKey, sa == prOutRegisterAndIgnore, eff)
	}

	// Every other service action needs a registered I_T nexus with its own key (SPC-4 5.13.1
	// table 51 note: PERSISTENT RESERVE OUT from an unregistered I_T nexus conflicts).
	i := s.find(id)
	if i < 0 || s.regs[i].Key != key {
		c.reservationConflict()
		return false
	}
	switch sa {
	case prOutReserve:
		// SPC-4 5.13.9.
		if c.failOn(checkScopeType(scope, typ)) {
			return false
		}
		if s.resType != 0 {
			if !s.holds(id) || s.resType != typ {
				c.reservationConflict()
			}
			return false // the holder reserving again with the same type: nothing changes
		}
		s.resType = typ
		if !prAllRegistrants(typ) {
			s.regs[i].Holder = true
		}
		return true

	case prOutRelease:
		// SPC-4 5.13.11.2: releasing nothing, or a reservation one does not hold, succeeds and
		// changes nothing.
		if s.resType == 0 || !s.holds(id) {
			return false
		}
		if scope != prScopeLU || typ != s.resType {
			c.fail(ReasonInvalidReleaseOfPersistentReservation)
			return false
		}
		released := s.resType
		s.release()
		if prRegistrantsAccess(released) {
			eff.uaAllBut(s, id, ReasonReservationsReleased)
		}
		return true

	case prOutClear:
		// SPC-4 5.13.11.6: every registration and the reservation go.
		eff.uaAllBut(s, id, ReasonReservationsPreempted)
		s.regs = nil
		s.release()
		s.generation++
		return true

	case prOutPreempt, prOutPreemptAndAbort:
		return prPreempt(c, s, id, saKey, scope, typ, sa == prOutPreemptAndAbort, eff)
	}
	return false
}

// prRegister handles REGISTER and REGISTER AND IGNORE EXISTING KEY (SPC-4 5.13.7, 5.13.11.3).
func prRegister(lu *LogicalUnit, c *Command, s *prState, id ITNexusID, p []byte, key, saKey uint64, ignore bool, eff *prEffects) bool {
	flags := p[prOutFlagsOff]
	spec, allTg, aptpl := flags&prOutSpecIPT != 0, flags&prOutAllTgPt != 0, flags&prOutAPTPL != 0
	if aptpl && !lu.pr.persistable() {
		c.invalidParamField(prOutFlagsOff, 0) // PTPL_C is 0
		return false
	}
	if spec && ignore {
		c.invalidParamField(prOutFlagsOff, 3)
		return false
	}
	i := s.find(id)
	if i >= 0 {
		if !ignore && s.regs[i].Key != key {
			c.reservationConflict()
			return false
		}
		if spec {
			c.invalidParamField(prOutFlagsOff, 3)
			return false
		}
		if saKey == 0 {
			prUnregister(s, i, id, eff)
		} else {
			s.regs[i].Key = saKey
		}
		s.generation++
		s.aptpl = aptpl
		return true
	}
	if !ignore && key != 0 {
		c.reservationConflict()
		return false
	}
	if saKey == 0 {
		return false // unregistering an I_T nexus that is not registered: nothing to do
	}
	if allTg && s.findInitiator(id.Initiator) >= 0 {
		// Registered through another target port: a registration for every target port
		// would overlap it.
		c.invalidParamField(prOutFlagsOff, 2)
		return false
	}
	add := []PRRegistration{{Key: saKey, ITNexusID: id, AllTargetPorts: allTg}}
	if spec {
		var ok bool
		if add, ok = prSpecIPT(c, s, id, p, saKey, allTg, add); !ok {
			return false
		}
	}
	if len(s.regs)+len(add) > maxPRRegistrations {
		c.fail(ReasonInsufficientRegistrationResources)
		return false
	}
	s.regs = append(s.regs, add...)
	s.generation++
	s.aptpl = aptpl
	return true
}

// prSpecIPT appends to add the registrations that the TransportIDs of a SPEC_I_PT parameter
// list p (SPC-4 6.16.3) name: the same key, through the target port of id (or, with allTg,
// through all of them). A list that names more initiator ports than can be registered is
// refused before it is parsed, and duplicates are found with a map, so that the work done under
// the reservations' lock is bounded and linear in the list.
func prSpecIPT(c *Command, s *prState, id ITNexusID, p []byte, saKey uint64, allTg bool, add []PRRegistration) ([]PRRegistration, bool) {
	if len(p) < prOutSpecIPTHeaderLength {
		c.fail(ReasonParameterListLengthError)
		return nil, false
	}
	tlen := int(binary.BigEndian.Uint32(p[24:28]))
	if prOutSpecIPTHeaderLength+tlen != len(p) {
		c.fail(ReasonParameterListLengthError)
		return nil, false
	}
	// Every TransportID this device server accepts is an SRP one of 24 bytes, so the list
	// names at most tlen/24 initiator ports.
	n := tlen / srpTransportIDLength
	if len(s.regs)+len(add)+n > maxPRRegistrations {
		c.fail(ReasonInsufficientRegistrationResources)
		return nil, false
	}
	// taken holds the initiator ports whose registration the new ones would overlap: those
	// registered through this target port or through all of them, or any port when the new
	// registrations are for all target ports; and those named earlier in the list.
	taken := make(map[[16]byte]struct{}, len(s.regs)+len(add)+n)
	for i := range s.regs {
		if r := &s.regs[i]; allTg || r.AllTargetPorts || r.RelativePort == id.RelativePort {
			taken[r.Initiator] = struct{}{}
		}
	}
	for i := range add {
		taken[add[i].Initiator] = struct{}{}
	}
	for off := prOutSpecIPTHeaderLength; off < len(p); {
		ini, tidLen, bad := parseTransportID(p[off:])
		if bad >= 0 {
			c.invalidParamField(off+bad, -1)
			return nil, false
		}
		if _, dup := taken[ini]; dup {
			c.invalidParamField(off, -1)
			return nil, false
		}
		taken[ini] = struct{}{}
		add = append(add, PRRegistration{Key: saKey, ITNexusID: ITNexusID{Initiator: ini, RelativePort: id.RelativePort}, AllTargetPorts: allTg})
		off += tidLen
	}
	return add, true
}

// prUnregister removes registration i, that of the I_T nexus id (SPC-4 5.13.11.3). The holder
// of a reservation that is not of an all registrants type releases it, and the registrants of
// a registrants only reservation hear so; an all registrants reservation lasts while any
// registration does (settle).
func prUnregister(s *prState, i int, id ITNexusID, eff *prEffects) {
	wasHolder := s.regs[i].Holder
	s.regs = slices.Delete(s.regs, i, i+1)
	if wasHolder {
		released := s.resType
		s.release()
		if released == PRTypeWriteExclusiveRegistrantsOnly || released == PRTypeExclusiveAccessRegistrantsOnly {
			eff.uaAllBut(s, id, ReasonReservationsReleased)
		}
	}
}

// prPreempt handles PREEMPT and PREEMPT AND ABORT (SPC-4 5.13.11.4).
func prPreempt(c *Command, s *prState, id ITNexusID, saKey uint64, scope, typ byte,
	abort bool, eff *prEffects) bool {
	removeKey := func(k uint64, all bool) bool {
		found := false
		kept := s.regs[:0]
		for _, r := range s.regs {
			if r.matches(id) {
				found = found || r.Key == k
				kept = append(kept, r)
				continue
			}
			if all || r.Key == k {
				found = true
				eff.ua = append(eff.ua, prUA{r, ReasonRegistrationsPreempted})
				if abort {
					eff.abort = append(eff.abort, r)
				}
				continue
			}
			kept = append(kept, r)
		}
		s.regs = kept
		return found
	}

	allRegs := prAllRegistrants(s.resType)
	h := s.holder()
	preemptsReservation := s.resType != 0 &&
		(allRegs && saKey == 0 || !allRegs && h >= 0 && s.regs[h].Key == saKey)
	if !preemptsReservation {
		// Only registrations go; the reservation, if any, stays as it is (5.13.11.4.2 and
		// the all registrants case of 5.13.11.4.3 with a non-zero key).
		if saKey == 0 {
			c.invalidParamField(8, -1)
			return false
		}
		if !removeKey(saKey, false) {
			c.reservationConflict()
			return false
		}
		s.generation++
		return true
	}
	if c.failOn(checkScopeType(scope, typ)) {
		return false
	}
	oldType := s.resType
	removeKey(saKey, allRegs)
	s.release()
	s.resType = typ
	if !prAllRegistrants(typ) {
		s.regs[s.find(id)].Holder = true
	}
	if oldType != typ {
		// The registrants that remain learn that the reservation they knew is gone.
		for _, r := range s.regs {
			if !r.matches(id) {
				eff.ua = append(eff.ua, prUA{r, ReasonReservationsReleased})
			}
		}
	}
	s.generation++
	return true
}

// prRegisterAndMove handles REGISTER AND MOVE (SPC-4 5.13.8, parameter list 6.16.4): the holder
// registers another I_T nexus with the service action key, hands it the reservation, and may
// unregister itself.
func prRegisterAndMove(lu *LogicalUnit, c *Command, s *prState, id ITNexusID, p []byte, key, saKey uint64) bool {
	i := s.find(id)
	if i < 0 || s.regs[i].Key != key {
		c.reservationConflict()
		return false
	}
	tlen := int(binary.BigEndian.Uint32(p[20:24]))
	if prOutMoveHeaderLength+tlen > len(p) {
		c.fail(ReasonParameterListLengthError)
		return false
	}
	if s.resType == 0 || prAllRegistrants(s.resType) || !s.regs[i].Holder {
		c.reservationConflict()
		return false
	}
	if saKey == 0 {
		c.invalidParamField(8, -1)
		return false
	}
	unreg, aptpl := p[17]&0x02 != 0, p[17]&0x01 != 0
	if aptpl && !lu.pr.persistable() {
		c.invalidParamField(17, 0)
		return false
	}
	ini, _, bad := parseTransportID(p[prOutMoveHeaderLength : prOutMoveHeaderLength+tlen])
	if bad >= 0 {
		c.invalidParamField(prOutMoveHeaderLength+bad, -1)
		return false
	}
	dest := ITNexusID{Initiator: ini, RelativePort: binary.BigEndian.Uint16(p[18:20])}
	if !lu.knowsPort(c, dest.RelativePort) {
		c.invalidParamField(18, -1)
		return false
	}
	if s.regs[i].matches(dest) {
		c.invalidParamField(prOutMoveHeaderLength, -1)
		return false
	}
	j := s.find(dest)
	if j < 0 {
		if len(s.regs) >= maxPRRegistrations {
			c.fail(ReasonInsufficientRegistrationResources)
			return false
		}
		s.regs = append(s.regs, PRRegistration{Key: saKey, ITNexusID: dest})
		j = len(s.regs) - 1
	}
	s.regs[i].Holder = false
	s.regs[j].Holder = true
	if unreg {
		s.regs = slices.Delete(s.regs, i, i+1)
	}
	s.generation++
	s.aptpl = aptpl
	return true
}

// knowsPort reports whether rel is the relative target port identifier of a target port the
// logical unit has seen an I_T nexus through, or one of the target port groups of c's port
// describes (the ports of other device servers that share the logical unit).
func (lu *LogicalUnit) knowsPort(c *Command, rel uint16) bool {
	for n := range lu.nexuses.all() {
		if n.Port != nil && n.Port.RelativeID == rel {
			return true
		}
	}
	if a := c.alua(); a != nil {
		_, _, ok := a.PortState(rel)
		return ok
	}
	return false
}

// applyPREffects tells the other I_T nexuses what the PERSISTENT RESERVE OUT c from id did to
// them, and aborts the commands of PREEMPT AND ABORT's victims: those that lose commands get
// COMMANDS CLEARED BY ANOTHER INITIATOR too (TAS is 0, SAM-5 5.6). It runs after the
// reservations' lock is released, since aborting waits for running commands, which may be
// waiting for that lock.
func (lu *LogicalUnit) applyPREffects(c *Command, id ITNexusID, eff *prEffects) {
	if len(eff.ua) == 0 && len(eff.abort) == 0 && !eff.alua {
		return
	}
	lu.mu.Lock()
	defer lu.mu.Unlock()
	for n, st := range lu.nexuses.all() {
		nid := n.id()
		if nid == id {
			continue
		}
		if eff.alua {
			st.ua.add(ReasonAsymmetricAccessStateChanged)
		}
		for _, u := range eff.ua {
			if u.reg.matches(nid) {
				st.ua.add(u.reason)
			}
		}
	}
	if len(eff.abort) == 0 {
		return
	}
	lost := make(map[*Nexus]bool)
	lu.tasks.abortLocked(func(t *Command) bool {
		if t == c {
			return false
		}
		nid := t.Nexus.id()
		for i := range eff.abort {
			if eff.abort[i].matches(nid) && nid != id {
				lost[t.Nexus] = true
				return true
			}
		}
		return false
	})
	for n := range lost {
		lu.nexuses.getLocked(n).ua.add(ReasonCommandsClearedByAnotherInitiator)
	}
}
