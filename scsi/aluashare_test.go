package scsi

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
)

func stpgCDB(plen uint32) []byte {
	cdb := []byte{opMaintenanceOut, saSetTargetPortGroups, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(cdb[6:], plen)
	return cdb
}

// stpgParams is a SET TARGET PORT GROUPS parameter list: the reserved header, then one
// descriptor per group (SPC-4 6.36).
func stpgParams(gs ...groupState) []byte {
	p := make([]byte, stpgHeader, stpgHeader+stpgDescriptor*len(gs))
	for _, g := range gs {
		p = append(p, byte(g.state), 0, byte(g.id>>8), byte(g.id))
	}
	return p
}

func sendSTPG(m *LUNMap, n *Nexus, gs ...groupState) *Command {
	p := stpgParams(gs...)
	return run(m, n, 0, stpgCDB(uint32(len(p))), p, 0)
}

// aluaGatewayPorts are the target ports of two gateways in front of one logical unit, each
// gateway with its own ALUA (the same groups, from its own configuration): group 1 holds the
// first's port, group 2 the second's.
func aluaGatewayPorts(t testing.TB) (p1, p2 *TargetPort) {
	groups := []PortGroup{
		{ID: 1, State: ActiveOptimized, Ports: []uint16{1}},
		{ID: 2, State: ActiveNonOptimized, Ports: []uint16{2}},
	}
	a1, err := NewALUA(groups)
	require.NoError(t, err)
	a2, err := NewALUA(groups)
	require.NoError(t, err)
	return &TargetPort{Name: "gw1", RelativeID: 1, ALUA: a1}, &TargetPort{Name: "gw2", RelativeID: 2, ALUA: a2}
}

// rtpgStates reads REPORT TARGET PORT GROUPS through n: the raw parameter data, and each
// group's state and STATUS CODE.
func rtpgStates(t testing.TB, m *LUNMap, n *Nexus) (raw []byte, states map[uint16][2]byte) {
	t.Helper()
	c := run(m, n, 0, rtpgCDB(rtpgFormatExtended, 512), nil, 512)
	requireGood(t, c)
	d := data(c)
	states = map[uint16][2]byte{}
	for off := rtpgExtendedHeader; off < len(d); off += 8 + 4*int(d[off+7]) {
		states[binary.BigEndian.Uint16(d[off+2:])] = [2]byte{d[off] & 0x0F, d[off+5]}
	}
	return d, states
}

// aluaTopology is two device servers sharing one logical unit's reservations: the maps of
// each and, for the stale checks, a way to mark the second's copy stale or fresh.
type aluaTopology func(t *testing.T) (m1, m2 *LUNMap, r2 *Reservations)

func memALUAGateways(t *testing.T) (m1, m2 *LUNMap, r2 *Reservations) {
	cl := &memPRCluster{}
	g1, g2 := cl.newGateway(t), cl.newGateway(t)
	return g1.newMap(t, 1000), g2.newMap(t, 1000), g2.r
}

// gatewayNexus is the I_T nexus of the initiator whose ID ends in id through gateway port p,
// its power-on unit attention at m already reported.
func gatewayNexus(t testing.TB, m *LUNMap, name string, id byte, p *TargetPort) *Nexus {
	t.Helper()
	n := &Nexus{InitiatorPort: name, InitiatorID: prInitiator(id), Port: p}
	clearPowerOnUA(t, m, n)
	return n
}

// xThroughBoth is two gateways in memory and initiator X's I_T nexus through each.
func xThroughBoth(t *testing.T) (m1, m2 *LUNMap, x, z *Nexus) {
	m1, m2, _ = memALUAGateways(t)
	p1, p2 := aluaGatewayPorts(t)
	return m1, m2, gatewayNexus(t, m1, "X via 1", 0x11, p1), gatewayNexus(t, m2, "X via 2", 0x11, p2)
}

// TestSTPGTwoGateways: SET TARGET PORT GROUPS through one gateway changes the states that
// both report and enforce, and every I_T nexus but the one it came through, on either gateway,
// gets ASYMMETRIC ACCESS STATE CHANGED.
func TestSTPGTwoGateways(t *testing.T) { testSTPGTwoGateways(t, memALUAGateways, true) }

func testSTPGTwoGateways(t *testing.T, topo aluaTopology, stale bool) {
	m1, m2, r2 := topo(t)
	p1, p2 := aluaGatewayPorts(t)
	x := gatewayNexus(t, m1, "X via 1", 0x11, p1)
	y := gatewayNexus(t, m1, "Y via 1", 0x22, p1)
	z := gatewayNexus(t, m2, "X via 2", 0x11, p2)
	read := cdb10(0x28, 0, 1, 1)

	// TPGS 11b: implicit and explicit.
	for _, tc := range []struct {
		m *LUNMap
		n *Nexus
	}{{m1, x}, {m2, z}} {
		c := run(tc.m, tc.n, 0, []byte{0x12, 0, 0, 0, 36, 0}, nil, 36)
		requireGood(t, c)
		require.Equal(t, byte(0x30), data(c)[5]&0x30, "TPGS")
	}
	raw1, st := rtpgStates(t, m1, x)
	raw2, _ := rtpgStates(t, m2, z)
	require.Equal(t, raw1, raw2)
	require.Equal(t, map[uint16][2]byte{1: {0x0, 0}, 2: {0x1, 0}}, st, "the configured states")

	// Through the first gateway: its group standby, the second's active/optimized.
	requireGood(t, sendSTPG(m1, x, groupState{1, Standby}, groupState{2, ActiveOptimized}))
	require.Equal(t, ReasonNone, pendingUA(m1, x), "not the I_T nexus it came through")
	require.Equal(t, ReasonAsymmetricAccessStateChanged, pendingUA(m1, y))
	// (Through RADOS the other gateway learns of the change from its notification, which
	// SET TARGET PORT GROUPS does not wait for.)
	testutil.WaitFor(t, "ASYMMETRIC ACCESS STATE CHANGED through the other gateway", func() bool {
		return pendingUA(m2, z) == ReasonAsymmetricAccessStateChanged
	})
	requireSense(t, run(m2, z, 0, read, nil, 512), ReasonAsymmetricAccessStateChanged)
	raw1, st = rtpgStates(t, m1, x)
	raw2, _ = rtpgStates(t, m2, z)
	require.Equal(t, raw1, raw2, "the same through both gateways")
	require.Equal(t, map[uint16][2]byte{1: {byte(Standby), statusExplicit}, 2: {byte(ActiveOptimized), statusExplicit}}, st)
	requireGood(t, run(m2, z, 0, read, nil, 512))
	requireSense(t, run(m1, x, 0, read, nil, 512), ReasonLUNotAccessibleTargetPortInStandby)

	// Through the standby port, which runs SET TARGET PORT GROUPS: its group alone
	// active/optimized, as Linux's ALUA handler asks; the group that was active/optimized
	// becomes active/non-optimized.
	requireSense(t, sendSTPG(m1, y, groupState{1, ActiveOptimized}), ReasonAsymmetricAccessStateChanged)
	requireGood(t, sendSTPG(m1, y, groupState{1, ActiveOptimized}))
	require.Equal(t, ReasonAsymmetricAccessStateChanged, pendingUA(m1, x))
	testutil.WaitFor(t, "ASYMMETRIC ACCESS STATE CHANGED through the other gateway", func() bool {
		return pendingUA(m2, z) == ReasonAsymmetricAccessStateChanged
	})
	requireSense(t, run(m1, x, 0, read, nil, 512), ReasonAsymmetricAccessStateChanged)
	requireGood(t, run(m1, x, 0, read, nil, 512))
	requireSense(t, run(m2, z, 0, read, nil, 512), ReasonAsymmetricAccessStateChanged)
	_, st = rtpgStates(t, m2, z)
	require.Equal(t, map[uint16][2]byte{1: {byte(ActiveOptimized), statusExplicit}, 2: {byte(ActiveNonOptimized), statusExplicit}}, st)
	raw1, _ = rtpgStates(t, m1, x)
	raw2, _ = rtpgStates(t, m2, z)
	require.Equal(t, raw1, raw2)

	// Setting the states in force again changes nothing anyone is told of.
	requireGood(t, sendSTPG(m2, z, groupState{1, ActiveOptimized}))
	require.Equal(t, ReasonNone, pendingUA(m1, x))
	require.Equal(t, ReasonNone, pendingUA(m1, y))

	if !stale {
		return
	}
	// A gateway whose copy is stale cannot know the states: its port is unavailable, and says so.
	r2.SetFresh(false)
	_, st = rtpgStates(t, m2, z)
	require.Equal(t, byte(Unavailable), st[2][0], "its own group, through it")
	require.Equal(t, byte(ActiveOptimized), st[1][0])
	requireSense(t, run(m2, z, 0, read, nil, 512), ReasonLUNotAccessibleTargetPortUnavailable)
	requireSense(t, sendSTPG(m2, z, groupState{2, Standby}), ReasonLUNotAccessibleTargetPortUnavailable)
	c := run(m2, z, 0, []byte{0x03, 0, 0, 0, 18, 0}, nil, 18) // REQUEST SENSE
	requireGood(t, c)
	require.Equal(t, []byte{0x04, 0x0C}, data(c)[12:14], "REQUEST SENSE: TARGET PORT IN UNAVAILABLE STATE")
	_, st = rtpgStates(t, m1, x)
	require.Equal(t, byte(ActiveNonOptimized), st[2][0], "the other gateway still knows")
	r2.SetFresh(true)
	requireGood(t, run(m2, z, 0, read, nil, 512))
}

// pendingUA is the unit attention n would see next at LUN 0 of m.
func pendingUA(m *LUNMap, n *Nexus) Reason { return m.Mappings()[0].LU.PendingUA(n) }

// TestSTPGLateGateway: a gateway that starts after the change loads the states with the
// reservations; one that missed the notifications (a cut watch) learns of them from the next
// version it applies, its I_T nexuses told.
func TestSTPGLateGateway(t *testing.T) {
	cl := &memPRCluster{}
	g1, g2 := cl.newGateway(t), cl.newGateway(t)
	g2.deaf = true
	p1, p2 := aluaGatewayPorts(t)
	m1, m2 := g1.newMap(t, 1000), g2.newMap(t, 1000)
	x := gatewayNexus(t, m1, "X via 1", 0x11, p1)
	z := gatewayNexus(t, m2, "X via 2", 0x11, p2)
	requireGood(t, sendSTPG(m1, x, groupState{2, Standby}))
	_, st := rtpgStates(t, m2, z)
	require.Equal(t, byte(ActiveNonOptimized), st[2][0], "not told yet")

	data, v, _ := g2.Load()
	require.NoError(t, g2.r.Apply(data, v))
	requireSense(t, run(m2, z, 0, cdb10(0x28, 0, 1, 1), nil, 512), ReasonAsymmetricAccessStateChanged)
	requireSense(t, run(m2, z, 0, cdb10(0x28, 0, 1, 1), nil, 512), ReasonLUNotAccessibleTargetPortInStandby)

	g3 := cl.newGateway(t)
	m3 := g3.newMap(t, 1000)
	requireSense(t, run(m3, z, 0, rtpgCDB(rtpgFormatExtended, 512), nil, 512), ReasonPowerOnResetOrBusDeviceReset)
	raw1, _ := rtpgStates(t, m1, x)
	raw3, _ := rtpgStates(t, m3, z)
	require.Equal(t, raw1, raw3)

	// More changes than the state keeps effects of: worked out from the states.
	g2.deaf = true
	for i := range prMaxEvents + 1 {
		requireGood(t, sendPROut(m1, x, prOutRegisterAndIgnore, 0, prParams(0, uint64(i+1), 0)))
	}
	requireGood(t, sendSTPG(m1, x, groupState{2, ActiveOptimized}))
	data, v, _ = g2.Load()
	require.NoError(t, g2.r.Apply(data, v))
	requireSense(t, run(m2, z, 0, cdb10(0x28, 0, 1, 1), nil, 512), ReasonAsymmetricAccessStateChanged)
	requireGood(t, run(m2, z, 0, cdb10(0x28, 0, 1, 1), nil, 512))
}

// TestSTPGDemotion: a group made active/optimized takes that state from the groups that had
// it, and from them alone: a standby group stays standby, a group the list names keeps what
// the list says.
func TestSTPGDemotion(t *testing.T) {
	m1, m2, x, z := xThroughBoth(t)
	states := func() map[uint16][2]byte {
		run(m1, x, 0, rtpgCDB(rtpgFormatExtended, 512), nil, 512) // reports a pending unit attention, if any
		_, st := rtpgStates(t, m1, x)
		return st
	}
	requireGood(t, sendSTPG(m2, z, groupState{2, ActiveOptimized}))
	require.Equal(t, map[uint16][2]byte{1: {byte(ActiveNonOptimized), statusExplicit}, 2: {byte(ActiveOptimized), statusExplicit}}, states())
	requireGood(t, sendSTPG(m1, x, groupState{1, Standby}))
	requireSense(t, sendSTPG(m2, z, groupState{2, ActiveOptimized}), ReasonAsymmetricAccessStateChanged)
	requireGood(t, sendSTPG(m2, z, groupState{2, ActiveOptimized}))
	require.Equal(t, byte(Standby), states()[1][0], "not active/optimized before: not demoted")
	requireGood(t, sendSTPG(m1, x, groupState{1, ActiveOptimized}, groupState{2, ActiveOptimized}))
	require.Equal(t, map[uint16][2]byte{1: {byte(ActiveOptimized), statusExplicit}, 2: {byte(ActiveOptimized), statusExplicit}}, states(), "both named: both")
}

// TestSTPGParameterList: each malformed list fails with the field it got wrong, and changes
// nothing.
func TestSTPGParameterList(t *testing.T) {
	m1, m2, x, z := xThroughBoth(t)
	before, _ := rtpgStates(t, m1, x)
	for _, tc := range []struct {
		name  string
		p     []byte
		plen  uint32
		field int // -1: PARAMETER LIST LENGTH ERROR
	}{
		{"transitioning", stpgParams(groupState{1, Transitioning}), 8, 4},
		{"offline", stpgParams(groupState{1, 0x0E}), 8, 4},
		{"logical block dependent", stpgParams(groupState{1, 0x04}), 8, 4},
		{"reserved bits of byte 0", []byte{0, 0, 0, 0, 0x10, 0, 0, 1}, 8, 4},
		{"reserved byte 1", []byte{0, 0, 0, 0, 0, 1, 0, 1}, 8, 5},
		{"no such group", stpgParams(groupState{1, Standby}, groupState{9, Standby}), 12, 10},
		{"a group twice", stpgParams(groupState{1, Standby}, groupState{1, ActiveOptimized}), 12, 10},
		{"a part of a descriptor", append(stpgParams(groupState{1, Standby}), 0, 0), 10, -1},
		{"a header only in part", []byte{0, 0}, 2, -1},
		{"more descriptors than groups", stpgParams(groupState{1, Standby}, groupState{2, Standby}, groupState{1, Standby}), 16, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m1, x, 0, stpgCDB(tc.plen), tc.p, 0)
			if tc.field < 0 {
				requireSense(t, c, ReasonParameterListLengthError)
				return
			}
			s := requireSense(t, c, ReasonInvalidFieldInParameterList)
			require.True(t, s.FieldPointerValid && !s.InCDB)
			require.Equal(t, uint16(tc.field), s.FieldPointer)
		})
	}
	after, _ := rtpgStates(t, m2, z)
	require.Equal(t, before, after)
	require.Equal(t, ReasonNone, pendingUA(m2, z))
	requireGood(t, run(m1, x, 0, stpgCDB(0), nil, 0)) // no descriptor: nothing to do
}

// TestSTPGNotShared: where the states are the configuration's alone, TPGS stays 01b and
// MAINTENANCE OUT is not supported, SET TARGET PORT GROUPS or another service action.
func TestSTPGNotShared(t *testing.T) {
	_, n1, _ := aluaNexuses(t, ActiveOptimized, Standby)
	_, m := readyALUAMap(t, n1)
	c := run(m, n1, 0, []byte{0x12, 0, 0, 0, 36, 0}, nil, 36)
	requireGood(t, c)
	require.Equal(t, byte(0x10), data(c)[5]&0x30, "TPGS")
	requireSense(t, sendSTPG(m, n1, groupState{1, Standby}), ReasonInvalidCommandOperationCode)
	requireSense(t, run(m, n1, 0, []byte{opMaintenanceOut, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, 0), ReasonInvalidCommandOperationCode)
}

// TestSTPGReservationConflict: under a reservation SET TARGET PORT GROUPS conflicts as a write
// does, through either gateway: only the holder changes the states.
func TestSTPGReservationConflict(t *testing.T) {
	m1, m2, _ := memALUAGateways(t)
	p1, p2 := aluaGatewayPorts(t)
	x := gatewayNexus(t, m1, "X via 1", 0x11, p1)
	w := gatewayNexus(t, m2, "W via 2", 0x44, p2)
	requireGood(t, sendPROut(m1, x, prOutRegister, 0, prParams(0, keyA, 0)))
	requireGood(t, sendPROut(m1, x, prOutReserve, PRTypeWriteExclusive, prParams(keyA, 0, 0)))
	require.Equal(t, StatusReservationConflict, sendSTPG(m2, w, groupState{1, Standby}).Status)
	requireGood(t, sendSTPG(m1, x, groupState{2, Standby}))
}

// FuzzSTPGParams: any parameter list is either refused with a field inside it, or names
// groups of the configuration, each once, in states an application client may set, as SPC-4
// 6.36 reads, checked independently.
func FuzzSTPGParams(f *testing.F) {
	f.Add(stpgParams(groupState{1, Standby}, groupState{2, ActiveOptimized})[stpgHeader:])
	f.Add([]byte{0x0F, 0, 0, 1})
	f.Add([]byte{0x01, 0, 0, 2, 0x01, 0, 0, 2})
	p1, _ := aluaGatewayPorts(f)
	base := p1.ALUA.snap.Load()
	f.Fuzz(func(t *testing.T, d []byte) {
		d = d[:len(d)/stpgDescriptor*stpgDescriptor]
		set, flt := parseSTPG(d, base)
		ok := true
		seen := map[uint16]bool{}
		for off := 0; off < len(d); off += 4 {
			st, id := d[off], binary.BigEndian.Uint16(d[off+2:])
			if st > 3 || d[off+1] != 0 || id < 1 || id > 2 || seen[id] {
				ok = false
				break
			}
			seen[id] = true
		}
		if !ok {
			require.NotZero(t, flt)
			return
		}
		require.Zero(t, flt)
		require.Len(t, set, len(d)/stpgDescriptor)
	})
}
