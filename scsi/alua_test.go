package scsi

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// aluaNexuses makes an ALUA configuration with group 1 (relative port 1, served here) and group
// 2 (relative ports 2, served here, and 7, a remote port), and a nexus through each local port.
func aluaNexuses(t testing.TB, s1, s2 AccessState) (*ALUA, *Nexus, *Nexus) {
	t.Helper()
	a, err := NewALUA([]PortGroup{
		{ID: 1, State: s1, Preferred: true, Ports: []uint16{1}},
		{ID: 2, State: s2, Ports: []uint16{2, 7}},
	})
	require.NoError(t, err)
	p1 := &TargetPort{Name: "port-a", RelativeID: 1, ALUA: a}
	p2 := &TargetPort{Name: "port-b", RelativeID: 2, ALUA: a}
	return a, &Nexus{InitiatorPort: "i", Port: p1}, &Nexus{InitiatorPort: "i", Port: p2}
}

func rtpgCDB(format byte, alloc uint32) []byte {
	cdb := []byte{opMaintenanceIn, format<<5 | saReportTargetPortGroups, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(cdb[6:], alloc)
	return cdb
}

// readyALUAMap maps a logical unit at LUN 0 and clears the power-on unit attention of each nexus.
func readyALUAMap(t testing.TB, ns ...*Nexus) (*LogicalUnit, *LUNMap) {
	t.Helper()
	lu := newTestLU(t, 1000, 512, nil)
	m := newTestMap(t, lu)
	for _, n := range ns {
		c := run(m, n, 0, make([]byte, 6), nil, 0)
		requireSense(t, c, ReasonPowerOnResetOrBusDeviceReset)
	}
	return lu, m
}

func TestReportTargetPortGroups(t *testing.T) {
	_, n1, n2 := aluaNexuses(t, ActiveOptimized, Standby)
	_, m := readyALUAMap(t, n1, n2)
	descs := []byte{
		// Group 1: PREF, active/optimized; T_SUP U_SUP S_SUP AN_SUP AO_SUP; one port.
		0x80, 0x8F, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
		0x00, 0x00, 0x00, 0x01,
		// Group 2: standby; two ports, 2 and 7.
		0x02, 0x8F, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02,
		0x00, 0x00, 0x00, 0x02,
		0x00, 0x00, 0x00, 0x07,
	}
	for _, tc := range []struct {
		name   string
		n      *Nexus
		format byte
		alloc  uint32
		want   []byte
	}{
		{"extended", n1, 1, 512, cat([]byte{0, 0, 0, 32, 0x10, 0x00, 0, 0}, descs)},
		{"length only", n1, 0, 512, cat([]byte{0, 0, 0, 28}, descs)},
		{"from the standby port", n2, 1, 512, cat([]byte{0, 0, 0, 32, 0x10, 0x00, 0, 0}, descs)},
		{"truncated", n1, 1, 10, []byte{0, 0, 0, 32, 0x10, 0x00, 0, 0, 0x80, 0x8F}},
		{"header only", n1, 0, 4, []byte{0, 0, 0, 28}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m, tc.n, 0, rtpgCDB(tc.format, tc.alloc), nil, 512)
			requireGood(t, c)
			require.Equal(t, tc.want, data(c))
			require.Equal(t, len(tc.want), c.TransferLength)
		})
	}

	t.Run("reserved format", func(t *testing.T) {
		c := run(m, n1, 0, rtpgCDB(2, 512), nil, 512)
		s := requireSense(t, c, ReasonInvalidFieldInCDB)
		require.Equal(t, uint16(1), s.FieldPointer)
	})
	t.Run("without ALUA", func(t *testing.T) {
		_, m := readyMap(t, nil)
		c := run(m, testNexus, 0, rtpgCDB(1, 512), nil, 512)
		requireInvalidCDB(t, c, 1, 4) // an unsupported service action of MAINTENANCE IN
	})
}

func TestALUAInquiry(t *testing.T) {
	_, n1, n2 := aluaNexuses(t, ActiveOptimized, Standby)
	_, m := readyALUAMap(t, n1, n2, testNexus)

	// TPGS 01b: implicit asymmetric access only.
	c := run(m, n2, 0, []byte{opInquiry, 0, 0, 0, 96, 0}, nil, 96)
	requireGood(t, c)
	require.Equal(t, byte(0x18), data(c)[5], "TPGS 01b, 3PC")
	c = run(m, testNexus, 0, []byte{opInquiry, 0, 0, 0, 96, 0}, nil, 96)
	requireGood(t, c)
	require.Equal(t, byte(0x08), data(c)[5], "TPGS 00b, 3PC")

	// VPD page 0x83: relative port 2 in target port group 2, even through a standby port.
	c = run(m, n2, 0, vpdCDB(0x83, 1024), nil, 1024)
	requireGood(t, c)
	d := data(c)
	require.Equal(t, []byte{0x01, 0x14, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02}, d[64:72])
	require.Equal(t, []byte{0x01, 0x15, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02}, d[72:80])

	// REPORT SUPPORTED OPERATION CODES lists REPORT TARGET PORT GROUPS with ALUA.
	c = run(m, n1, 0, rsocCDB(false, 3, opMaintenanceIn, saReportTargetPortGroups, 64), nil, 64)
	requireGood(t, c)
	require.Equal(t, cat([]byte{0, supportStandard, 0, 12}, usageReportTPGs), data(c))
	c = run(m, testNexus, 0, rsocCDB(false, 3, opMaintenanceIn, saReportTargetPortGroups, 64), nil, 64)
	requireGood(t, c)
	require.Equal(t, []byte{0, supportNotSupported, 0, 0}, data(c))
}

// TestALUAStateEnforcement runs each kind of command through a port in each access state and
// checks which run and which get NOT READY with the state's additional sense code.
func TestALUAStateEnforcement(t *testing.T) {
	cdbs := []struct {
		name string
		cdb  []byte
		// standby and unavailable: whether the command runs in those states.
		standby, unavailable bool
	}{
		{"INQUIRY", []byte{opInquiry, 0, 0, 0, 96, 0}, true, true},
		{"REPORT LUNS", []byte{opReportLUNs, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, true, true},
		{"REQUEST SENSE", []byte{opRequestSense, 0, 0, 0, 18, 0}, true, true},
		{"REPORT TARGET PORT GROUPS", rtpgCDB(1, 512), true, true},
		{"MODE SENSE(6)", []byte{opModeSense6, 0, 0x3F, 0, 255, 0}, true, false},
		{"MODE SENSE(10)", []byte{opModeSense10, 0, 0x3F, 0, 0, 0, 0, 1, 0, 0}, true, false},
		{"TEST UNIT READY", []byte{opTestUnitReady, 0, 0, 0, 0, 0}, false, false},
		{"READ CAPACITY(10)", []byte{opReadCapacity10, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false, false},
		{"READ(10)", []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, false, false},
		{"WRITE(10)", []byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, false, false},
		{"SYNCHRONIZE CACHE(10)", []byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false, false},
		{"REPORT SUPPORTED OPERATION CODES", rsocCDB(false, 0, 0, 0, 4096), false, false},
	}
	for _, st := range []struct {
		state  AccessState
		reason Reason
	}{
		{ActiveOptimized, ReasonNone},
		{ActiveNonOptimized, ReasonNone},
		{Standby, ReasonLUNotAccessibleTargetPortInStandby},
		{Unavailable, ReasonLUNotAccessibleTargetPortUnavailable},
		{Transitioning, ReasonLUNotAccessibleAsymmetricAccessStateTransition},
	} {
		for _, tc := range cdbs {
			t.Run(st.state.String()+"/"+tc.name, func(t *testing.T) {
				_, n1, n2 := aluaNexuses(t, ActiveOptimized, st.state)
				_, m := readyALUAMap(t, n1, n2)
				var out []byte
				if tc.name == "WRITE(10)" {
					out = make([]byte, 512)
				}
				c := run(m, n2, 0, tc.cdb, out, 4096)
				allowed := st.reason == ReasonNone ||
					(st.state == Standby && tc.standby) || (st.state != Standby && tc.unavailable)
				if allowed {
					requireGood(t, c)
				} else {
					requireSense(t, c, st.reason)
				}
				// The active port is never limited.
				requireGood(t, run(m, n1, 0, tc.cdb, out, 4096))
			})
		}
	}
}

// TestALUARequestSense: through a port that cannot reach the medium REQUEST SENSE reports why, as
// parameter data with GOOD status, after any pending unit attention.
func TestALUARequestSense(t *testing.T) {
	_, n1, n2 := aluaNexuses(t, ActiveOptimized, Unavailable)
	lu, m := readyALUAMap(t, n1, n2)
	lu.EstablishUA(nil, ReasonAsymmetricAccessStateChanged)
	for _, want := range []Reason{ReasonAsymmetricAccessStateChanged, ReasonLUNotAccessibleTargetPortUnavailable,
		ReasonLUNotAccessibleTargetPortUnavailable} {
		c := run(m, n2, 0, []byte{opRequestSense, 0, 0, 0, 18, 0}, nil, 18)
		requireGood(t, c)
		s, ok := ParseSense(data(c))
		require.True(t, ok)
		require.Equal(t, []byte{byte(want.Key()), want.ASC(), want.ASCQ()}, []byte{byte(s.Key), s.ASC, s.ASCQ}, "want %v", want)
	}
	c := run(m, n1, 0, []byte{opRequestSense, 0, 0, 0, 18, 0}, nil, 18)
	requireGood(t, c)
	s, ok := ParseSense(data(c))
	require.True(t, ok)
	require.Equal(t, byte(0x2A), s.ASC) // the unit attention, then nothing
	c = run(m, n1, 0, []byte{opRequestSense, 0, 0, 0, 18, 0}, nil, 18)
	s, _ = ParseSense(data(c))
	require.Equal(t, SenseNoSense, s.Key)
}

// TestALUASetGroups changes the states as a reload does: SetGroups reports the change, the
// caller's unit attention comes before NOT READY, the new state applies to the next command, and
// the changed group's STATUS CODE says an implicit transition altered it.
func TestALUASetGroups(t *testing.T) {
	a, n1, n2 := aluaNexuses(t, ActiveOptimized, Standby)
	lu, m := readyALUAMap(t, n1, n2)
	requireSense(t, run(m, n2, 0, make([]byte, 6), nil, 0), ReasonLUNotAccessibleTargetPortInStandby)

	changed, err := a.SetGroups([]PortGroup{
		{ID: 1, State: Standby, Ports: []uint16{1}},
		{ID: 2, State: ActiveOptimized, Preferred: true, Ports: []uint16{2, 7}},
	})
	require.NoError(t, err)
	require.True(t, changed)
	lu.EstablishUA(nil, ReasonAsymmetricAccessStateChanged)

	for _, n := range []*Nexus{n1, n2} {
		requireSense(t, run(m, n, 0, make([]byte, 6), nil, 0), ReasonAsymmetricAccessStateChanged)
	}
	requireSense(t, run(m, n1, 0, make([]byte, 6), nil, 0), ReasonLUNotAccessibleTargetPortInStandby)
	requireGood(t, run(m, n2, 0, make([]byte, 6), nil, 0))

	c := run(m, n1, 0, rtpgCDB(1, 512), nil, 512)
	requireGood(t, c)
	d := data(c)
	require.Equal(t, []byte{0x02, 0x8F, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01}, d[8:16])
	require.Equal(t, []byte{0x80, 0x8F, 0x00, 0x02, 0x00, 0x02, 0x00, 0x02}, d[20:28])

	// The same groups again: nothing changed, and the status codes stay.
	changed, err = a.SetGroups(a.Groups())
	require.NoError(t, err)
	require.False(t, changed)
	c = run(m, n1, 0, rtpgCDB(1, 512), nil, 512)
	require.Equal(t, d, data(c))

	// A port moved to a group in the same state is no change of state; a removed one is.
	changed, err = a.SetGroups([]PortGroup{
		{ID: 1, State: Standby, Ports: []uint16{1}},
		{ID: 3, State: ActiveOptimized, Ports: []uint16{2, 7}},
	})
	require.NoError(t, err)
	require.False(t, changed)
	changed, err = a.SetGroups([]PortGroup{
		{ID: 1, State: Standby, Ports: []uint16{1}},
		{ID: 3, State: ActiveOptimized, Ports: []uint16{2}},
	})
	require.NoError(t, err)
	require.True(t, changed)
	st, g, ok := a.PortState(2)
	require.True(t, ok)
	require.Equal(t, ActiveOptimized, st)
	require.Equal(t, uint16(3), g)
	_, _, ok = a.PortState(7)
	require.False(t, ok)
}

func TestALUAGroupsInvalid(t *testing.T) {
	many := make([]PortGroup, MaxPortGroups+1)
	for i := range many {
		many[i] = PortGroup{ID: uint16(i), Ports: []uint16{uint16(i + 1)}}
	}
	manyPorts := make([]uint16, MaxPortsInAllGroup+1)
	for i := range manyPorts {
		manyPorts[i] = uint16(i + 1)
	}
	for _, tc := range []struct {
		name   string
		groups []PortGroup
		err    string
	}{
		{"none", nil, "no target port group"},
		{"duplicate group", []PortGroup{{ID: 1, Ports: []uint16{1}}, {ID: 1, Ports: []uint16{2}}}, "target port group 1 is listed twice"},
		{"no ports", []PortGroup{{ID: 1}}, "target port group 1 has no target port"},
		{"port 0", []PortGroup{{ID: 1, Ports: []uint16{0}}}, "relative target port identifier 0 is reserved"},
		{"port in two groups", []PortGroup{{ID: 1, Ports: []uint16{1}}, {ID: 2, Ports: []uint16{3, 1}}}, "relative target port 1 is in target port groups 1 and 2"},
		{"bad state", []PortGroup{{ID: 1, State: 0x4, Ports: []uint16{1}}}, "not an asymmetric access state"},
		{"too many groups", many, "at most 32"},
		{"too many ports", []PortGroup{{ID: 1, Ports: manyPorts}}, "at most 128"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewALUA([]PortGroup{{ID: 9, Ports: []uint16{1}}})
			require.NoError(t, err)
			_, err = a.SetGroups(tc.groups)
			require.ErrorContains(t, err, tc.err)
			st, g, ok := a.PortState(1) // unchanged
			require.True(t, ok)
			require.Equal(t, ActiveOptimized, st)
			require.Equal(t, uint16(9), g)
		})
	}
}

func TestParseAccessState(t *testing.T) {
	for _, s := range []AccessState{ActiveOptimized, ActiveNonOptimized, Standby, Unavailable, Transitioning} {
		got, err := ParseAccessState(s.String())
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	_, err := ParseAccessState("offline")
	require.Error(t, err)
}

// TestALUANoAllocation: the access state check and REPORT TARGET PORT GROUPS allocate nothing.
func TestALUANoAllocation(t *testing.T) {
	_, n1, n2 := aluaNexuses(t, ActiveOptimized, Standby)
	_, m := readyALUAMap(t, n1, n2)
	read := &Command{Nexus: n1, CDB: []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, DataIn: make([]byte, 512)}
	rtpg := &Command{Nexus: n2, CDB: rtpgCDB(0, 512), DataIn: make([]byte, 512)}
	allocs := testing.AllocsPerRun(100, func() {
		for _, c := range []*Command{read, rtpg} {
			cdb, in, n := c.CDB, c.DataIn, c.Nexus
			c.Reset()
			c.CDB, c.DataIn, c.Nexus = cdb, in, n
			m.Execute(c)
		}
	})
	require.Zero(t, allocs)
	requireGood(t, read)
	requireGood(t, rtpg)
}

// TestALUAPortState: a port's state and group are found whatever its relative identifier,
// below and above the identifiers looked up by array index, and follow SetGroups; a port in no
// group is not found.
func TestALUAPortState(t *testing.T) {
	a, err := NewALUA([]PortGroup{
		{ID: 10, State: ActiveOptimized, Ports: []uint16{1, lowPortIDs}},
		{ID: 20, State: Standby, Ports: []uint16{lowPortIDs - 1, 300}},
	})
	require.NoError(t, err)
	type want struct {
		state AccessState
		group uint16
		ok    bool
	}
	check := func(cases map[uint16]want) {
		t.Helper()
		for rel, w := range cases {
			st, g, ok := a.PortState(rel)
			require.Equal(t, w, want{st, g, ok}, "port %d", rel)
		}
	}
	check(map[uint16]want{
		0: {}, 1: {ActiveOptimized, 10, true}, 2: {},
		lowPortIDs - 1: {Standby, 20, true}, lowPortIDs: {ActiveOptimized, 10, true},
		lowPortIDs + 1: {}, 300: {Standby, 20, true}, 65535: {},
	})
	_, err = a.SetGroups([]PortGroup{
		{ID: 10, State: Unavailable, Ports: []uint16{lowPortIDs - 1, 300}},
		{ID: 30, State: ActiveNonOptimized, Ports: []uint16{2}},
	})
	require.NoError(t, err)
	check(map[uint16]want{
		1: {}, 2: {ActiveNonOptimized, 30, true},
		lowPortIDs - 1: {Unavailable, 10, true}, lowPortIDs: {}, 300: {Unavailable, 10, true},
	})
}
