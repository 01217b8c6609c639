package scsi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
)

// Three I_T nexuses through one target port for the reservation tests: A and B register (keys
// 0xA and 0xB), C does not.
var (
	prNexusA = &Nexus{InitiatorPort: "A", InitiatorID: prInitiator(0xA1), Port: testPort}
	prNexusB = &Nexus{InitiatorPort: "B", InitiatorID: prInitiator(0xB2), Port: testPort}
	prNexusC = &Nexus{InitiatorPort: "C", InitiatorID: prInitiator(0xC3), Port: testPort}
)

const (
	keyA = 0xA
	keyB = 0xB
	keyC = 0xC
)

// prInitiator is an SRP initiator port identifier: initiator_ext then a port GUID ending in b.
func prInitiator(b byte) [16]byte {
	var id [16]byte
	id[7] = b
	id[8], id[15] = 0xFE, b
	return id
}

func prOutCDB(sa, typ byte, plen uint32) []byte {
	cdb := []byte{0x5F, sa, typ, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(cdb[5:], plen)
	return cdb
}

func prInCDB(sa byte, alloc uint16) []byte {
	cdb := []byte{0x5E, sa, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(cdb[7:], alloc)
	return cdb
}

// prParams is the basic 24-byte PERSISTENT RESERVE OUT parameter list.
func prParams(key, saKey uint64, flags byte) []byte {
	p := make([]byte, 24)
	binary.BigEndian.PutUint64(p[0:], key)
	binary.BigEndian.PutUint64(p[8:], saKey)
	p[20] = flags
	return p
}

// moveParams is a REGISTER AND MOVE parameter list (SPC-4 6.16.4).
func moveParams(key, saKey uint64, flags byte, rel uint16, tid []byte) []byte {
	p := make([]byte, 24)
	binary.BigEndian.PutUint64(p[0:], key)
	binary.BigEndian.PutUint64(p[8:], saKey)
	p[17] = flags
	binary.BigEndian.PutUint16(p[18:], rel)
	binary.BigEndian.PutUint32(p[20:], uint32(len(tid)))
	return cat(p, tid)
}

// srpTID is the SRP TransportID of initiator.
func srpTID(initiator [16]byte) []byte {
	b := make([]byte, 24)
	b[0] = 0x04
	copy(b[8:], initiator[:])
	return b
}

// prOut sends PERSISTENT RESERVE OUT from n.
func sendPROut(m *LUNMap, n *Nexus, sa, typ byte, params []byte) *Command {
	return run(m, n, 0, prOutCDB(sa, typ, uint32(len(params))), params, 0)
}

// readKeys returns the generation and keys of READ KEYS.
func readKeys(t *testing.T, m *LUNMap, n *Nexus) (uint32, []uint64) {
	t.Helper()
	c := run(m, n, 0, prInCDB(0, 1024), nil, 1024)
	requireGood(t, c)
	d := data(c)
	var keys []uint64
	for i := 8; i < 8+int(binary.BigEndian.Uint32(d[4:])); i += 8 {
		keys = append(keys, binary.BigEndian.Uint64(d[i:]))
	}
	return binary.BigEndian.Uint32(d), keys
}

// readReservation returns the key and type of READ RESERVATION; typ 0 when there is none.
func readReservation(t *testing.T, m *LUNMap, n *Nexus) (key uint64, typ byte) {
	t.Helper()
	c := run(m, n, 0, prInCDB(1, 1024), nil, 1024)
	requireGood(t, c)
	d := data(c)
	if binary.BigEndian.Uint32(d[4:]) == 0 {
		return 0, 0
	}
	require.Equal(t, uint32(16), binary.BigEndian.Uint32(d[4:]))
	require.Len(t, d, 24)
	require.Zero(t, d[21]>>4, "scope")
	return binary.BigEndian.Uint64(d[8:]), d[21] & 0x0F
}

// requireUA checks the unit attention n sees next (a TEST UNIT READY), or none.
func requireUA(t *testing.T, m *LUNMap, n *Nexus, want Reason) {
	t.Helper()
	c := run(m, n, 0, make([]byte, 6), nil, 0)
	if want == ReasonNone {
		require.Equal(t, StatusGood, c.Status, "%s: unexpected unit attention % x", n.InitiatorPort, c.SenseData())
		return
	}
	requireSense(t, c, want)
}

func requireConflict(t *testing.T, c *Command) {
	t.Helper()
	require.Equal(t, StatusReservationConflict, c.Status, "sense % x", c.SenseData())
	require.Zero(t, c.SenseLength)
}

// prMap makes a logical unit with A and B registered and, when typ is not 0, A holding a
// reservation of typ; every nexus has consumed its power-on unit attention.
func prMap(t *testing.T, typ byte, mod func(*Config)) (*LogicalUnit, *LUNMap) {
	t.Helper()
	lu := newTestLU(t, 1000, 512, mod)
	m := newTestMap(t, lu)
	for _, n := range []*Nexus{prNexusA, prNexusB, prNexusC} {
		clearPowerOnUA(t, m, n)
	}
	requireGood(t, sendPROut(m, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)))
	requireGood(t, sendPROut(m, prNexusB, prOutRegister, 0, prParams(0, keyB, 0)))
	if typ != 0 {
		requireGood(t, sendPROut(m, prNexusA, prOutReserve, typ, prParams(keyA, 0, 0)))
	}
	return lu, m
}

var prTypes = []byte{
	PRTypeWriteExclusive, PRTypeExclusiveAccess,
	PRTypeWriteExclusiveRegistrantsOnly, PRTypeExclusiveAccessRegistrantsOnly,
	PRTypeWriteExclusiveAllRegistrants, PRTypeExclusiveAccessAllRegistrants,
}

// TestPRConflicts checks which commands each kind of I_T nexus may run under each reservation
// type (SPC-4 5.13.1 table 51, SBC-3 table 13). The expectations are written out per type
// rather than derived from the code's helpers.
func TestPRConflicts(t *testing.T) {
	// For each type: may a registered non-holder (B) and an unregistered nexus (C) read and
	// write? The holder (A) always may.
	type access struct{ regRead, regWrite, unregRead, unregWrite bool }
	want := map[byte]access{
		PRTypeWriteExclusive:                 {true, false, true, false},
		PRTypeExclusiveAccess:                {false, false, false, false},
		PRTypeWriteExclusiveRegistrantsOnly:  {true, true, true, false},
		PRTypeExclusiveAccessRegistrantsOnly: {true, true, false, false},
		PRTypeWriteExclusiveAllRegistrants:   {true, true, true, false},
		PRTypeExclusiveAccessAllRegistrants:  {true, true, false, false},
	}
	reads := map[string][]byte{
		"READ(10)":      cdb10(0x28, 0, 1, 1),
		"READ(16)":      cdb16(0x88, 0, 1, 1),
		"VERIFY(10)":    cdb10(0x2F, 0, 1, 1),
		"MODE SENSE(6)": {0x1A, 0, 0x3F, 0, 0xFF, 0},
	}
	// Commands no reservation conflicts with.
	anyone := map[string][]byte{
		"INQUIRY":                 {0x12, 0, 0, 0, 0xFF, 0},
		"TEST UNIT READY":         make([]byte, 6),
		"READ CAPACITY(10)":       make10(0x25),
		"REPORT LUNS":             {0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0},
		"PERSISTENT RESERVE IN":   prInCDB(0, 64),
		"START STOP UNIT (START)": {0x1B, 0, 0, 0, 0x01, 0},
		"PREVENT ALLOW (allow)":   {0x1E, 0, 0, 0, 0x00, 0},
	}
	writes := map[string][]byte{
		"WRITE(10)":               cdb10(0x2A, 0, 1, 1),
		"WRITE SAME(16)":          cdb16(0x93, 0, 1, 1),
		"SYNCHRONIZE CACHE(10)":   cdb10(0x35, 0, 0, 0),
		"MODE SELECT(6)":          {0x15, 0x10, 0, 0, 0, 0},
		"START STOP UNIT (STOP)":  {0x1B, 0, 0, 0, 0x00, 0},
		"PREVENT ALLOW (prevent)": {0x1E, 0, 0, 0, 0x01, 0},
	}
	for _, typ := range prTypes {
		t.Run(fmt.Sprintf("type %d", typ), func(t *testing.T) {
			_, m := prMap(t, typ, nil)
			w := want[typ]
			for _, role := range []struct {
				n           *Nexus
				read, write bool
				name        string
			}{
				{prNexusA, true, true, "holder"},
				{prNexusB, w.regRead, w.regWrite, "registered"},
				{prNexusC, w.unregRead, w.unregWrite, "unregistered"},
			} {
				check := func(name string, cdb []byte, allowed bool) {
					out := []byte(nil)
					if cdb[0] == 0x2A || cdb[0] == 0x93 {
						out = make([]byte, 512)
					}
					c := run(m, role.n, 0, cdb, out, 512)
					if allowed {
						require.NotEqual(t, StatusReservationConflict, c.Status, "%s from %s", name, role.name)
					} else {
						require.Equal(t, StatusReservationConflict, c.Status, "%s from %s", name, role.name)
					}
				}
				for name, cdb := range reads {
					check(name, cdb, role.read)
				}
				for name, cdb := range writes {
					check(name, cdb, role.write)
				}
				for name, cdb := range anyone {
					check(name, cdb, true)
				}
			}
		})
	}
}

func make10(op byte) []byte { b := make([]byte, 10); b[0] = op; return b }

// TestPRNoReservationNoConflict: registrations alone conflict with nothing.
func TestPRNoReservationNoConflict(t *testing.T) {
	_, m := prMap(t, 0, nil)
	checkGood(t, run(m, prNexusC, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
	checkGood(t, run(m, prNexusB, 0, cdb10(0x28, 0, 1, 1), nil, 512))
}

// TestPROutStateMachine runs each PERSISTENT RESERVE OUT service action from the holder (A), a
// registered non-holder (B) and an unregistered nexus (C) under every reservation type, and
// checks the status, the reservation and keys that result, and the unit attention every nexus
// sees (SPC-4 5.13.7-5.13.11).
func TestPROutStateMachine(t *testing.T) { testPROutStateMachine(t, onePRGateway) }

// prTopology makes the logical unit(s) of a reservations test, A and B registered (keys 0xA
// and 0xB) and A holding a reservation of typ unless it is 0, and returns the three I_T
// nexuses and the LUN map each sends its commands to.
type prTopology func(t *testing.T, typ byte) (a, b, c *Nexus, m func(*Nexus) *LUNMap)

// onePRGateway is the single device server of prMap.
func onePRGateway(t *testing.T, typ byte) (a, b, c *Nexus, m func(*Nexus) *LUNMap) {
	_, lm := prMap(t, typ, nil)
	return prNexusA, prNexusB, prNexusC, func(*Nexus) *LUNMap { return lm }
}

// testPROutStateMachine runs every service action from each kind of I_T nexus under each
// reservation type, through topology.
func testPROutStateMachine(t *testing.T, topology prTopology) {
	type result struct {
		status   Status
		reason   Reason // for CHECK CONDITION
		resKey   uint64 // READ RESERVATION afterwards
		resType  byte
		keys     []uint64 // READ KEYS afterwards
		ua       [3]Reason
		genDelta uint32
	}
	none := ReasonNone
	A, B, C, _ := topology(t, 0) // the nexuses, for the rows; each row makes its own units
	for _, typ := range prTypes {
		ar := prAllRegistrants(typ)
		ro := typ == PRTypeWriteExclusiveRegistrantsOnly || typ == PRTypeExclusiveAccessRegistrantsOnly
		otherType := byte(PRTypeExclusiveAccess)
		if typ == PRTypeExclusiveAccess {
			otherType = PRTypeWriteExclusive
		}
		holderKey := uint64(keyA) // READ RESERVATION's key: zero for all registrants
		if ar {
			holderKey = 0
		}
		same := result{status: StatusGood, resKey: holderKey, resType: typ, keys: []uint64{keyA, keyB}}
		conflict := same
		conflict.status = StatusReservationConflict
		with := func(r result, f func(*result)) result { f(&r); return r }
		releasedUA := none
		if ro || ar {
			releasedUA = ReasonReservationsReleased
		}

		rows := []struct {
			name   string
			from   *Nexus
			sa     byte
			typ    byte
			params []byte
			want   result
		}{
			{"REGISTER from unregistered", C, prOutRegister, 0, prParams(0, keyC, 0),
				with(same, func(r *result) { r.keys = []uint64{keyA, keyB, keyC}; r.genDelta = 1 })},
			{"REGISTER from unregistered with a key", C, prOutRegister, 0, prParams(5, keyC, 0), conflict},
			{"REGISTER from unregistered with service action key 0", C, prOutRegister, 0, prParams(0, 0, 0), same},
			{"REGISTER with the wrong key", B, prOutRegister, 0, prParams(keyA, 0x77, 0), conflict},
			{"REGISTER changes the key", B, prOutRegister, 0, prParams(keyB, 0x77, 0),
				with(same, func(r *result) { r.keys = []uint64{keyA, 0x77}; r.genDelta = 1 })},
			{"REGISTER AND IGNORE EXISTING KEY", B, prOutRegisterAndIgnore, 0, prParams(0x99, 0x77, 0),
				with(same, func(r *result) { r.keys = []uint64{keyA, 0x77}; r.genDelta = 1 })},
			{"holder unregisters", A, prOutRegister, 0, prParams(keyA, 0, 0),
				with(same, func(r *result) {
					r.keys, r.genDelta = []uint64{keyB}, 1
					if !ar {
						r.resKey, r.resType = 0, 0
					}
					if ro {
						r.ua[1] = ReasonReservationsReleased
					}
				})},
			{"RESERVE again from the holder", A, prOutReserve, typ, prParams(keyA, 0, 0), same},
			{"RESERVE another type from the holder", A, prOutReserve, otherType, prParams(keyA, 0, 0), conflict},
			{"RESERVE from a registrant", B, prOutReserve, typ, prParams(keyB, 0, 0),
				func() result {
					if ar {
						return same // every registrant holds it already
					}
					return conflict
				}()},
			{"RESERVE from unregistered", C, prOutReserve, typ, prParams(0, 0, 0), conflict},
			{"RESERVE with the wrong key", A, prOutReserve, typ, prParams(keyB, 0, 0), conflict},
			{"RELEASE from the holder", A, prOutRelease, typ, prParams(keyA, 0, 0),
				with(same, func(r *result) { r.resKey, r.resType = 0, 0; r.ua[1] = releasedUA })},
			{"RELEASE of another type", A, prOutRelease, otherType, prParams(keyA, 0, 0),
				with(same, func(r *result) {
					r.status, r.reason = StatusCheckCondition, ReasonInvalidReleaseOfPersistentReservation
				})},
			{"RELEASE from a registrant", B, prOutRelease, typ, prParams(keyB, 0, 0),
				func() result {
					if ar { // B holds it too: releasing ends it for everyone
						return with(same, func(r *result) { r.resKey, r.resType = 0, 0; r.ua[0] = ReasonReservationsReleased })
					}
					return same
				}()},
			{"RELEASE from unregistered", C, prOutRelease, typ, prParams(0, 0, 0), conflict},
			{"CLEAR from a registrant", B, prOutClear, 0, prParams(keyB, 0, 0),
				result{status: StatusGood, genDelta: 1, ua: [3]Reason{ReasonReservationsPreempted, none, none}}},
			{"CLEAR from unregistered", C, prOutClear, 0, prParams(0, 0, 0), conflict},
			{"CLEAR with the wrong key", B, prOutClear, 0, prParams(keyA, 0, 0), conflict},
			{"PREEMPT the holder's key", B, prOutPreempt, typ, prParams(keyB, keyA, 0),
				with(same, func(r *result) {
					r.keys, r.genDelta = []uint64{keyB}, 1
					r.ua[0] = ReasonRegistrationsPreempted
					if !ar {
						r.resKey = keyB // B now holds it
					}
				})},
			{"PREEMPT key 0", B, prOutPreempt, typ, prParams(keyB, 0, 0),
				func() result {
					if ar { // all registrants: every other registration goes, B holds it
						return with(same, func(r *result) {
							r.keys, r.genDelta = []uint64{keyB}, 1
							r.ua[0] = ReasonRegistrationsPreempted
						})
					}
					return with(same, func(r *result) { r.status, r.reason = StatusCheckCondition, ReasonInvalidFieldInParameterList })
				}()},
			{"PREEMPT a key nobody has", B, prOutPreempt, typ, prParams(keyB, 0x55, 0), conflict},
			{"PREEMPT from unregistered", C, prOutPreempt, typ, prParams(0, keyA, 0), conflict},
			{"PREEMPT AND ABORT the holder's key", B, prOutPreemptAndAbort, typ, prParams(keyB, keyA, 0),
				with(same, func(r *result) {
					r.keys, r.genDelta = []uint64{keyB}, 1
					r.ua[0] = ReasonRegistrationsPreempted
					if !ar {
						r.resKey = keyB
					}
				})},
			{"PREEMPT AND ABORT from unregistered", C, prOutPreemptAndAbort, typ, prParams(0, keyA, 0), conflict},
			{"holder PREEMPTs a registrant", A, prOutPreempt, typ, prParams(keyA, keyB, 0),
				with(same, func(r *result) {
					r.keys, r.genDelta = []uint64{keyA}, 1
					r.ua[1] = ReasonRegistrationsPreempted
				})},
			{"CLEAR from the holder", A, prOutClear, 0, prParams(keyA, 0, 0),
				result{status: StatusGood, genDelta: 1, ua: [3]Reason{none, ReasonReservationsPreempted, none}}},
			{"REGISTER AND IGNORE EXISTING KEY from unregistered", C, prOutRegisterAndIgnore, 0, prParams(0x99, keyC, 0),
				with(same, func(r *result) { r.keys = []uint64{keyA, keyB, keyC}; r.genDelta = 1 })},
			{"holder changes its key", A, prOutRegister, 0, prParams(keyA, 0x77, 0),
				with(same, func(r *result) {
					r.keys, r.genDelta = []uint64{0x77, keyB}, 1
					if !ar {
						r.resKey = 0x77
					}
				})},
			{"REGISTER AND MOVE from the holder", A, prOutRegisterAndMove, 0, moveParams(keyA, keyC, 0, 1, srpTID(C.InitiatorID)),
				func() result {
					if ar {
						return conflict
					}
					return with(same, func(r *result) { r.keys, r.genDelta, r.resKey = []uint64{keyA, keyB, keyC}, 1, keyC })
				}()},
			{"REGISTER AND MOVE from a registrant", B, prOutRegisterAndMove, 0, moveParams(keyB, keyC, 0, 1, srpTID(C.InitiatorID)), conflict},
			{"REGISTER AND MOVE from unregistered", C, prOutRegisterAndMove, 0, moveParams(0, keyC, 0, 1, srpTID(B.InitiatorID)), conflict},
			{"PREEMPT the holder, changing the type", B, prOutPreempt, otherType, prParams(keyB, keyA, 0),
				func() result {
					if ar { // a non-zero key under all registrants only removes registrations
						return with(same, func(r *result) {
							r.keys, r.genDelta = []uint64{keyB}, 1
							r.ua[0] = ReasonRegistrationsPreempted
						})
					}
					return with(same, func(r *result) {
						r.keys, r.genDelta, r.resKey, r.resType = []uint64{keyB}, 1, keyB, otherType
						r.ua[0] = ReasonRegistrationsPreempted
					})
				}()},
		}
		for _, row := range rows {
			t.Run(fmt.Sprintf("type %d/%s", typ, row.name), func(t *testing.T) {
				a, b, c3, m := topology(t, typ)
				require.Equal(t, []*Nexus{A, B, C}, []*Nexus{a, b, c3})
				gen0, _ := readKeys(t, m(A), A)
				c := sendPROut(m(row.from), row.from, row.sa, row.typ, row.params)
				require.Equal(t, row.want.status, c.Status, "sense % x", c.SenseData())
				if row.want.status == StatusCheckCondition {
					requireSense(t, c, row.want.reason)
				}
				gen, keys := readKeys(t, m(C), C)
				require.Equal(t, row.want.keys, keys, "keys")
				require.Equal(t, gen0+row.want.genDelta, gen, "generation")
				k, ty := readReservation(t, m(C), C)
				require.Equal(t, row.want.resType, ty, "reservation type")
				require.Equal(t, row.want.resKey, k, "reservation key")
				for i, n := range []*Nexus{A, B, C} {
					requireUA(t, m(n), n, row.want.ua[i])
				}
			})
		}
	}
}

// TestPRReadFullStatus checks READ FULL STATUS byte for byte, with the SRP TransportIDs
// (SPC-4 6.15.5, 7.6.4.5).
func TestPRReadFullStatus(t *testing.T) {
	_, m := prMap(t, PRTypeWriteExclusiveRegistrantsOnly, nil)
	c := run(m, prNexusC, 0, prInCDB(3, 1024), nil, 1024)
	requireGood(t, c)
	desc := func(key uint64, holder bool, ini [16]byte) []byte {
		d := make([]byte, 48)
		binary.BigEndian.PutUint64(d, key)
		if holder {
			d[12], d[13] = 0x01, 0x05
		}
		binary.BigEndian.PutUint16(d[18:], 1)
		binary.BigEndian.PutUint32(d[20:], 24)
		copy(d[24:], srpTID(ini))
		return d
	}
	want := cat([]byte{0, 0, 0, 2, 0, 0, 0, 96}, desc(keyA, true, prNexusA.InitiatorID), desc(keyB, false, prNexusB.InitiatorID))
	require.Equal(t, want, data(c))
	// Truncated to the allocation length, with the full lengths in the header.
	c = run(m, prNexusC, 0, prInCDB(3, 10), nil, 1024)
	requireData(t, c, want[:10], 10)
}

// TestPRReportCapabilities checks REPORT CAPABILITIES with and without persistence.
func TestPRReportCapabilities(t *testing.T) {
	_, m := prMap(t, 0, nil)
	c := run(m, prNexusC, 0, prInCDB(2, 8), nil, 8)
	requireData(t, c, []byte{0, 8, 0x1C, 0x90, 0xEA, 0x01, 0, 0}, 8)

	var saved []byte
	_, m = prMap(t, 0, func(cfg *Config) {
		cfg.Reservations = NewReservations(func(d []byte) error { saved = d; return nil })
	})
	c = run(m, prNexusC, 0, prInCDB(2, 8), nil, 8)
	requireData(t, c, []byte{0, 8, 0x1D, 0x90, 0xEA, 0x01, 0, 0}, 8)
	requireGood(t, sendPROut(m, prNexusC, prOutRegister, 0, prParams(0, keyC, 0x01)))
	require.NotEmpty(t, saved)
	c = run(m, prNexusC, 0, prInCDB(2, 8), nil, 8)
	requireData(t, c, []byte{0, 8, 0x1D, 0x91, 0xEA, 0x01, 0, 0}, 8) // PTPL_A
}

// TestPRSpecIPT registers another initiator port with SPEC_I_PT, and checks the errors.
func TestPRSpecIPT(t *testing.T) {
	_, m := prMap(t, 0, nil)
	p := cat(prParams(0, keyC, 0x08), []byte{0, 0, 0, 24}, srpTID(prInitiator(0xD4)))
	requireGood(t, sendPROut(m, prNexusC, prOutRegister, 0, p))
	_, keys := readKeys(t, m, prNexusA)
	require.Equal(t, []uint64{keyA, keyB, keyC, keyC}, keys)
	d := &Nexus{InitiatorPort: "D", InitiatorID: prInitiator(0xD4), Port: testPort}
	clearPowerOnUA(t, m, d)
	requireGood(t, sendPROut(m, d, prOutReserve, PRTypeExclusiveAccess, prParams(keyC, 0, 0)))

	_, m = prMap(t, 0, nil)
	// An already registered TransportID.
	p = cat(prParams(0, keyC, 0x08), []byte{0, 0, 0, 24}, srpTID(prNexusA.InitiatorID))
	requireField(t, sendPROut(m, prNexusC, prOutRegister, 0, p), ReasonInvalidFieldInParameterList, false, 28, -1)
	// Another protocol (FC, 0h).
	tid := srpTID(prInitiator(0xD4))
	tid[0] = 0
	p = cat(prParams(0, keyC, 0x08), []byte{0, 0, 0, 24}, tid)
	requireField(t, sendPROut(m, prNexusC, prOutRegister, 0, p), ReasonInvalidFieldInParameterList, false, 28, -1)
	// A length that does not match.
	p = cat(prParams(0, keyC, 0x08), []byte{0, 0, 0, 48}, srpTID(prInitiator(0xD4)))
	requireSense(t, sendPROut(m, prNexusC, prOutRegister, 0, p), ReasonParameterListLengthError)
	// SPEC_I_PT from a registered nexus, and with REGISTER AND IGNORE EXISTING KEY.
	p = cat(prParams(keyA, keyA, 0x08), []byte{0, 0, 0, 24}, srpTID(prInitiator(0xD4)))
	requireField(t, sendPROut(m, prNexusA, prOutRegister, 0, p), ReasonInvalidFieldInParameterList, false, 20, 3)
	requireField(t, sendPROut(m, prNexusC, prOutRegisterAndIgnore, 0, p), ReasonInvalidFieldInParameterList, false, 20, 3)
	_, keys = readKeys(t, m, prNexusA)
	require.Equal(t, []uint64{keyA, keyB}, keys)
}

// TestPRAllTargetPorts: a registration with ALL_TG_PT covers the initiator port through every
// target port.
func TestPRAllTargetPorts(t *testing.T) {
	_, m := prMap(t, 0, nil)
	port2 := &TargetPort{Name: "port2", RelativeID: 2}
	c2 := &Nexus{InitiatorPort: "C via port 2", InitiatorID: prNexusC.InitiatorID, Port: port2}
	clearPowerOnUA(t, m, c2)
	requireGood(t, sendPROut(m, prNexusC, prOutRegister, 0, prParams(0, keyC, 0x04)))
	requireGood(t, sendPROut(m, c2, prOutReserve, PRTypeExclusiveAccess, prParams(keyC, 0, 0)))
	checkGood(t, run(m, prNexusC, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	requireConflict(t, run(m, prNexusA, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	c := run(m, prNexusA, 0, prInCDB(3, 1024), nil, 1024)
	requireGood(t, c)
	d := data(c)[8+2*48:]
	require.Equal(t, byte(0x03), d[12], "ALL_TG_PT and R_HOLDER")
}

// TestPRRegisterAndMove moves the reservation to another I_T nexus (SPC-4 5.13.8).
func TestPRRegisterAndMove(t *testing.T) {
	move := moveParams
	_, m := prMap(t, PRTypeWriteExclusive, nil)
	gen0, _ := readKeys(t, m, prNexusA)
	requireGood(t, sendPROut(m, prNexusA, prOutRegisterAndMove, PRTypeWriteExclusive, move(keyA, keyC, 0, 1, srpTID(prNexusC.InitiatorID))))
	gen, keys := readKeys(t, m, prNexusA)
	require.Equal(t, []uint64{keyA, keyB, keyC}, keys)
	require.Equal(t, gen0+1, gen)
	k, typ := readReservation(t, m, prNexusA)
	require.Equal(t, uint64(keyC), k)
	require.Equal(t, byte(PRTypeWriteExclusive), typ)
	requireConflict(t, run(m, prNexusA, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
	checkGood(t, run(m, prNexusC, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))

	// And back with UNREG: C is no longer registered.
	requireGood(t, sendPROut(m, prNexusC, prOutRegisterAndMove, 0, move(keyC, 0x1234, 0x02, 1, srpTID(prNexusA.InitiatorID))))
	_, keys = readKeys(t, m, prNexusA)
	require.Equal(t, []uint64{keyA, keyB}, keys, "A keeps its own key; C is gone")
	k, _ = readReservation(t, m, prNexusA)
	require.Equal(t, uint64(keyA), k)

	// Errors: not the holder, onto itself, an unknown target port, key 0, all registrants.
	requireConflict(t, sendPROut(m, prNexusB, prOutRegisterAndMove, 0, move(keyB, keyC, 0, 1, srpTID(prNexusC.InitiatorID))))
	requireConflict(t, sendPROut(m, prNexusC, prOutRegisterAndMove, 0, move(0, keyC, 0, 1, srpTID(prNexusB.InitiatorID))))
	requireField(t, sendPROut(m, prNexusA, prOutRegisterAndMove, 0, move(keyA, keyC, 0, 1, srpTID(prNexusA.InitiatorID))),
		ReasonInvalidFieldInParameterList, false, 24, -1)
	requireField(t, sendPROut(m, prNexusA, prOutRegisterAndMove, 0, move(keyA, keyC, 0, 9, srpTID(prNexusC.InitiatorID))),
		ReasonInvalidFieldInParameterList, false, 18, -1)
	requireField(t, sendPROut(m, prNexusA, prOutRegisterAndMove, 0, move(keyA, 0, 0, 1, srpTID(prNexusC.InitiatorID))),
		ReasonInvalidFieldInParameterList, false, 8, -1)
	requireSense(t, sendPROut(m, prNexusA, prOutRegisterAndMove, 0, move(keyA, keyC, 0, 1, srpTID(prNexusC.InitiatorID))[:40]),
		ReasonParameterListLengthError)
	_, m = prMap(t, PRTypeWriteExclusiveAllRegistrants, nil)
	requireConflict(t, sendPROut(m, prNexusA, prOutRegisterAndMove, 0, move(keyA, keyC, 0, 1, srpTID(prNexusC.InitiatorID))))
}

// TestPROutParameterErrors checks the CDB and parameter list checks.
func TestPROutParameterErrors(t *testing.T) {
	_, m := prMap(t, 0, nil)
	requireSense(t, sendPROut(m, prNexusA, prOutRegister, 0, prParams(keyA, 1, 0)[:20]), ReasonParameterListLengthError)
	requireSense(t, sendPROut(m, prNexusA, prOutRegister, 0, cat(prParams(keyA, 1, 0), zeros(4))), ReasonParameterListLengthError)
	requireInvalidCDB(t, sendPROut(m, prNexusA, prOutReserve, 0x13, prParams(keyA, 0, 0)), 2, 7) // scope 1
	requireInvalidCDB(t, sendPROut(m, prNexusA, prOutReserve, 0x02, prParams(keyA, 0, 0)), 2, 3) // type 2
	// APTPL without a place to keep it (PTPL_C 0).
	requireField(t, sendPROut(m, prNexusC, prOutRegister, 0, prParams(0, keyC, 0x01)), ReasonInvalidFieldInParameterList, false, 20, 0)
	// Data-out shorter than the parameter list length.
	c := run(m, prNexusA, 0, prOutCDB(prOutRegister, 0, 24), make([]byte, 10), 0)
	requireInvalidCDB(t, c, 5, -1)
	// An unknown service action: INVALID FIELD IN CDB on the SERVICE ACTION field (SPC-4 4.2.5.1).
	requireInvalidCDB(t, sendPROut(m, prNexusA, 0x08, 0, prParams(keyA, 0, 0)), 1, 4)
}

// requirePreemptedAndAborted opens the gate that holds running, victim's write, and requires
// the PREEMPT AND ABORT pa to succeed once it has, the write aborted, and the victim to hear
// COMMANDS CLEARED BY ANOTHER INITIATOR and REGISTRATIONS PREEMPTED through m, then conflict.
func requirePreemptedAndAborted(t *testing.T, open func(), pa, running *pending, m *LUNMap, victim *Nexus) {
	t.Helper()
	open()
	requireGood(t, pa.wait(t))
	running.wait(t)
	require.True(t, running.c.Aborted())
	requireUA(t, m, victim, ReasonCommandsClearedByAnotherInitiator)
	requireUA(t, m, victim, ReasonRegistrationsPreempted)
	requireConflict(t, run(m, victim, 0, cdb10(0x28, 0, 1, 1), nil, 512))
}

// TestPRPreemptAndAbort: the victim's commands are aborted, it sees COMMANDS CLEARED BY
// ANOTHER INITIATOR and REGISTRATIONS PREEMPTED, and then conflicts.
func TestPRPreemptAndAbort(t *testing.T) {
	lu, m, g := newGateLU(t, 64, nil)
	for _, n := range []*Nexus{prNexusA, prNexusB} {
		clearPowerOnUA(t, m, n)
	}
	requireGood(t, sendPROut(m, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)))
	requireGood(t, sendPROut(m, prNexusB, prOutRegister, 0, prParams(0, keyB, 0)))
	requireGood(t, sendPROut(m, prNexusB, prOutReserve, PRTypeWriteExclusiveRegistrantsOnly, prParams(keyB, 0, 0)))

	open := g.Gate(3 * 512)
	running := start(m, prNexusB, 1, TaskSimple, cdb10(0x2A, 0, 3, 1), fill(512, 3), 0)
	g.RequireEntered(t, 3*512)
	waiting := start(m, prNexusB, 2, TaskOrdered, cdb10(0x2A, 0, 4, 1), fill(512, 4), 0)
	waitTasks(t, lu, 2, 1)

	pa := start(m, prNexusA, 3, TaskHeadOfQueue, prOutCDB(prOutPreemptAndAbort, PRTypeExclusiveAccess, 24), prParams(keyA, keyB, 0), 0)
	testutil.WaitFor(t, "PREEMPT AND ABORT to wait for the running write", func() bool { return lu.aborters() == 1 })
	requireAborted(t, waiting.wait(t))
	requirePreemptedAndAborted(t, open, pa, running, m, prNexusB)
	requireUA(t, m, prNexusA, ReasonNone)
	k, typ := readReservation(t, m, prNexusA)
	require.Equal(t, uint64(keyA), k)
	require.Equal(t, byte(PRTypeExclusiveAccess), typ)
}

// TestPRPersistence: with APTPL the state is saved on every change and a logical unit made from
// the saved data has the same registrations and reservation; a failed save refuses the change;
// APTPL off removes what was saved; corrupt data is refused.
func TestPRPersistence(t *testing.T) {
	var saved []byte
	saves := 0
	var fail error
	persist := func(d []byte) error {
		if fail != nil {
			return fail
		}
		saves++
		saved = d
		return nil
	}
	_, m := prMap(t, 0, func(cfg *Config) { cfg.Reservations = NewReservations(persist) })
	require.Zero(t, saves, "nothing saved without APTPL")
	requireGood(t, sendPROut(m, prNexusA, prOutRegister, 0, prParams(keyA, keyA, 0x01)))
	requireGood(t, sendPROut(m, prNexusA, prOutReserve, PRTypeWriteExclusiveRegistrantsOnly, prParams(keyA, 0, 0)))
	require.Equal(t, 2, saves)
	gen, _ := readKeys(t, m, prNexusA)

	// The "restart": a new logical unit from the saved data.
	r, err := LoadReservations(saved, persist)
	require.NoError(t, err)
	_, m2 := prMap2(t, r)
	gen2, keys := readKeys(t, m2, prNexusC)
	require.Equal(t, gen, gen2)
	require.Equal(t, []uint64{keyA, keyB}, keys)
	k, typ := readReservation(t, m2, prNexusC)
	require.Equal(t, uint64(keyA), k)
	require.Equal(t, byte(PRTypeWriteExclusiveRegistrantsOnly), typ)
	requireConflict(t, run(m2, prNexusC, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
	checkGood(t, run(m2, prNexusB, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))

	// A save that fails leaves the old state in force.
	fail = errors.New("disk full")
	requireSense(t, sendPROut(m2, prNexusB, prOutRegister, 0, prParams(keyB, 0x77, 0x01)), ReasonInternalTargetFailure)
	_, keys = readKeys(t, m2, prNexusC)
	require.Equal(t, []uint64{keyA, keyB}, keys)
	fail = nil

	// APTPL 0 removes the saved state.
	requireGood(t, sendPROut(m2, prNexusB, prOutRegister, 0, prParams(keyB, 0x77, 0)))
	require.Nil(t, saved)

	for name, bad := range map[string]string{
		"truncated":          `{"version":1,"generation":3,"type":5,"registrations":[{"key":"0xa"`,
		"unknown field":      `{"version":1,"generation":3,"type":0,"registrations":[],"extra":1}`,
		"version":            `{"version":2,"generation":3,"type":0,"registrations":[]}`,
		"type":               `{"version":1,"generation":3,"type":2,"registrations":[]}`,
		"zero key":           `{"version":1,"type":0,"registrations":[{"key":"0x0","initiator":"000000000000000000000000000000a1","relative_target_port":1}]}`,
		"short initiator":    `{"version":1,"type":0,"registrations":[{"key":"0x1","initiator":"00a1","relative_target_port":1}]}`,
		"no holder":          `{"version":1,"type":1,"registrations":[{"key":"0x1","initiator":"000000000000000000000000000000a1","relative_target_port":1}]}`,
		"holder without res": `{"version":1,"type":0,"registrations":[{"key":"0x1","initiator":"000000000000000000000000000000a1","relative_target_port":1,"holder":true}]}`,
		"twice":              `{"version":1,"type":0,"registrations":[{"key":"0x1","initiator":"000000000000000000000000000000a1","relative_target_port":1},{"key":"0x2","initiator":"000000000000000000000000000000a1","relative_target_port":1}]}`,
		"trailing data":      `{"version":1,"generation":3,"type":0,"registrations":[]} {}`,
	} {
		_, err := LoadReservations([]byte(bad), nil)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "persistent reservations", name)
	}
}

// prMap2 makes a logical unit over existing reservations r, as a restart or a reload does.
func prMap2(t *testing.T, r *Reservations) (*LogicalUnit, *LUNMap) {
	t.Helper()
	lu := newTestLU(t, 1000, 512, func(cfg *Config) { cfg.Reservations = r })
	m := newTestMap(t, lu)
	for _, n := range []*Nexus{prNexusA, prNexusB, prNexusC} {
		clearPowerOnUA(t, m, n)
	}
	return lu, m
}

// TestPRSharedAcrossReplacement: a logical unit that replaces another with the same
// Reservations (a reload) enforces and reports the same reservation.
func TestPRSharedAcrossReplacement(t *testing.T) {
	lu1, m1 := prMap(t, PRTypeExclusiveAccess, nil)
	_, m2 := prMap2(t, lu1.Reservations())
	requireConflict(t, run(m2, prNexusB, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	requireGood(t, sendPROut(m2, prNexusB, prOutPreempt, PRTypeExclusiveAccess, prParams(keyB, keyA, 0)))
	k, _ := readReservation(t, m1, prNexusC)
	require.Equal(t, uint64(keyB), k)
}

// TestSPC2Reservations checks RESERVE and RELEASE (SPC-2) and how they meet persistent
// reservations (SPC-4 5.13.3).
func TestSPC2Reservations(t *testing.T) {
	reserve6, release6 := []byte{0x16, 0, 0, 0, 0, 0}, []byte{0x17, 0, 0, 0, 0, 0}
	reserve10, release10 := make10(0x56), make10(0x57)
	lu := newTestLU(t, 1000, 512, nil)
	m := newTestMap(t, lu)
	for _, n := range []*Nexus{prNexusA, prNexusB} {
		clearPowerOnUA(t, m, n)
	}
	checkGood(t, run(m, prNexusA, 0, reserve6, nil, 0))
	checkGood(t, run(m, prNexusA, 0, reserve10, nil, 0)) // again, same holder
	requireConflict(t, run(m, prNexusB, 0, reserve10, nil, 0))
	requireConflict(t, run(m, prNexusB, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	requireConflict(t, run(m, prNexusB, 0, make([]byte, 6), nil, 0))
	requireConflict(t, run(m, prNexusB, 0, prInCDB(0, 64), nil, 64))
	checkGood(t, run(m, prNexusB, 0, []byte{0x12, 0, 0, 0, 0xFF, 0}, nil, 255))
	checkGood(t, run(m, prNexusB, 0, release6, nil, 0)) // not the holder: nothing happens
	requireConflict(t, run(m, prNexusB, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	checkGood(t, run(m, prNexusA, 0, cdb10(0x2A, 0, 1, 1), make([]byte, 512), 0))
	checkGood(t, run(m, prNexusA, 0, release10, nil, 0))
	checkGood(t, run(m, prNexusB, 0, cdb10(0x28, 0, 1, 1), nil, 512))

	// The loss of the holder's nexus ends it.
	checkGood(t, run(m, prNexusA, 0, reserve6, nil, 0))
	lu.NexusReset(prNexusA)
	checkGood(t, run(m, prNexusB, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	requireUA(t, m, prNexusA, ReasonITNexusLossOccurred)
	// So does a logical unit reset.
	checkGood(t, run(m, prNexusB, 0, reserve6, nil, 0))
	lu.Reset(prNexusA)
	requireUA(t, m, prNexusA, ReasonBusDeviceResetFunctionOccurred)
	checkGood(t, run(m, prNexusA, 0, cdb10(0x28, 0, 1, 1), nil, 512))
	requireUA(t, m, prNexusB, ReasonBusDeviceResetFunctionOccurred)

	// Third-party reservations are not supported.
	requireInvalidCDB(t, run(m, prNexusA, 0, []byte{0x56, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}, nil, 0), 1, 4)

	// With persistent reservations: the holder's RESERVE and RELEASE succeed and change
	// nothing; anyone else's conflict.
	requireGood(t, sendPROut(m, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)))
	requireConflict(t, run(m, prNexusB, 0, reserve6, nil, 0)) // registrations exist
	requireGood(t, sendPROut(m, prNexusA, prOutReserve, PRTypeExclusiveAccess, prParams(keyA, 0, 0)))
	checkGood(t, run(m, prNexusA, 0, reserve6, nil, 0))
	checkGood(t, run(m, prNexusA, 0, release6, nil, 0))
	requireConflict(t, run(m, prNexusB, 0, release6, nil, 0))
	checkGood(t, run(m, prNexusB, 0, []byte{0x12, 0, 0, 0, 0xFF, 0}, nil, 255))
	k, typ := readReservation(t, m, prNexusA)
	require.Equal(t, uint64(keyA), k)
	require.Equal(t, byte(PRTypeExclusiveAccess), typ)
}

// TestPRReadOnlyMapping: an initiator that may not write cannot register, reserve or fence
// others out (DATA PROTECT, WRITE PROTECTED), and can still look.
func TestPRReadOnlyMapping(t *testing.T) {
	lu := newTestLU(t, 1000, 512, nil)
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu, ReadOnly: true}})
	require.NoError(t, err)
	clearPowerOnUA(t, m, prNexusA)
	requireSense(t, sendPROut(m, prNexusA, prOutRegister, 0, prParams(0, keyA, 0)), ReasonWriteProtected)
	requireSense(t, run(m, prNexusA, 0, []byte{0x16, 0, 0, 0, 0, 0}, nil, 0), ReasonWriteProtected)
	checkGood(t, run(m, prNexusA, 0, []byte{0x17, 0, 0, 0, 0, 0}, nil, 0))
	gen, keys := readKeys(t, m, prNexusA)
	require.Zero(t, gen)
	require.Empty(t, keys)
}
