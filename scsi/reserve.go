package scsi

// SPC-2 operation codes of the reservations that persistent reservations replaced, still sent
// by legacy clustering software.
const (
	opReserve6  = 0x16
	opRelease6  = 0x17
	opReserve10 = 0x56
	opRelease10 = 0x57
)

// CDB usage data of RESERVE and RELEASE: third-party reservations (3RDPTY, LONGID, the third
// party device ID) and extents are not supported, so every field but CONTROL reads zero and a
// CDB that sets one ends in INVALID FIELD IN CDB.
var (
	usageReserve6  = []byte{opReserve6, 0x00, 0x00, 0x00, 0x00, 0x07}
	usageRelease6  = []byte{opRelease6, 0x00, 0x00, 0x00, 0x00, 0x07}
	usageReserve10 = []byte{opReserve10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07}
	usageRelease10 = []byte{opRelease10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07}
)

// crhExempt reports whether the I_T nexus id is one whose RESERVE or RELEASE completes with GOOD
// and changes nothing while a persistent reservation exists (SPC-4 5.13.3, CRH set in REPORT
// CAPABILITIES): the reservation holder, or a registrant of a registrants only or all
// registrants reservation.
func (s *prState) crhExempt(id ITNexusID) bool {
	return s.holds(id) || prRegistrantsAccess(s.resType) && s.find(id) >= 0
}

// reserveSPC2 handles RESERVE(6) and RESERVE(10) (SPC-2 7.21, 7.22): the I_T nexus reserves the
// whole logical unit, or conflicts with a reservation of another kind or holder. Registrations
// without a reservation also refuse it, as SPC-2 5.5.1 says (while any initiator is registered,
// every RESERVE and RELEASE conflicts), except for the nexuses SPC-4 5.13.3 exempts: mixing the
// two kinds on one logical unit would let an SPC-2 holder keep registered cluster members out.
func reserveSPC2(lu *LogicalUnit, c *Command) {
	if _, ok := c.checkForm(opReserve10, usageReserve6, usageReserve10); !ok {
		return
	}
	id := c.Nexus.id()
	ch := lu.pr.change(c, id, false, func(s *prState, _ *prEffects) bool {
		c.Status, c.SenseLength = StatusGood, 0
		switch {
		case len(s.regs) > 0:
			if !s.crhExempt(id) {
				c.reservationConflict()
			}
			return false
		case s.spc2 != nil:
			if *s.spc2 != id {
				c.reservationConflict()
			}
			return false
		}
		s.spc2 = &id
		return true // not persisted: SPC-2 reservations do not survive a power loss
	})
	if !ch.ok {
		ch.fail(c)
		return
	}
	lu.pr.publish(ch)
}

// releaseSPC2 handles RELEASE(6) and RELEASE(10) (SPC-2 7.17, 7.18): the holder's reservation
// ends; from any other I_T nexus it succeeds and changes nothing. While a persistent
// reservation exists, only the I_T nexuses SPC-4 5.13.3 exempts get GOOD.
func releaseSPC2(lu *LogicalUnit, c *Command) {
	if _, ok := c.checkForm(opRelease10, usageRelease6, usageRelease10); !ok {
		return
	}
	id := c.Nexus.id()
	s := lu.pr.state.Load()
	if s.resType != 0 && !s.crhExempt(id) {
		c.reservationConflict()
		return
	}
	lu.pr.dropSPC2(&id)
}
