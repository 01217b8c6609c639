package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/internal/testutil"
)

// Tests of what an initiator for which the logical unit is write-protected (a read-only mapping,
// or a read-only logical unit) may do to state that other initiators share: the mode parameters
// and other nexuses' commands.

// TestWriteProtectedCommandTable pins which commands a write-protected initiator is refused:
// every command that changes the medium, MODE SELECT, which changes the logical unit's mode
// parameters, and the commands that change reservations, which decide what other initiators
// may do. VERIFY carries data-out too but changes nothing (see opWriteProtected).
func TestWriteProtectedCommandTable(t *testing.T) {
	want := []string{
		"MODE SELECT(6)", "MODE SELECT(10)",
		"WRITE(6)", "WRITE(10)", "WRITE(12)", "WRITE(16)",
		"WRITE AND VERIFY(10)", "WRITE AND VERIFY(12)", "WRITE AND VERIFY(16)",
		"UNMAP", "WRITE SAME(10)", "WRITE SAME(16)", "COMPARE AND WRITE", "WRITE ATOMIC(16)", "ORWRITE(16)",
		"SANITIZE OVERWRITE", "SANITIZE BLOCK ERASE", "SANITIZE EXIT FAILURE MODE",
		"PERSISTENT RESERVE OUT REGISTER", "PERSISTENT RESERVE OUT RESERVE",
		"PERSISTENT RESERVE OUT RELEASE", "PERSISTENT RESERVE OUT CLEAR",
		"PERSISTENT RESERVE OUT PREEMPT", "PERSISTENT RESERVE OUT PREEMPT AND ABORT",
		"PERSISTENT RESERVE OUT REGISTER AND IGNORE EXISTING KEY",
		"PERSISTENT RESERVE OUT REGISTER AND MOVE", "RESERVE(6)", "RESERVE(10)",
		"SET TARGET PORT GROUPS",
	}
	var got []string
	for i := range commandTable {
		e := &commandTable[i]
		ops := e.bySA
		if e.plain != nil {
			ops = append([]*opInfo{e.plain}, ops...)
		}
		for _, op := range ops {
			if op.flags&opWriteProtected != 0 {
				got = append(got, op.name)
			}
		}
	}
	require.ElementsMatch(t, want, got)
	for _, opcode := range []byte{opModeSelect6, opModeSelect10} {
		op := lookupByOpcode(opcode, 0, false)
		require.Equal(t, opChangesModePages, op.flags&opWriteProtected, op.name)
	}
}

// TestModeSelectWriteProtected checks that MODE SELECT(6) and (10) from an initiator for which
// the logical unit is write-protected end in CHECK CONDITION, DATA PROTECT, WRITE PROTECTED
// (07h/27h/00h), byte for byte, whatever the parameter list holds; that the mode parameters
// stay as they were and no other nexus hears of a change; and that the same MODE SELECT through
// a read-write mapping of the same logical unit still works.
func TestModeSelectWriteProtected(t *testing.T) {
	fixed := []byte{0x70, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x27, 0x00, 0x00, 0x00, 0x00, 0x00}
	descriptor := []byte{0x72, 0x07, 0x27, 0x00, 0x00, 0x00, 0x00, 0x00}
	noWCE6 := cat([]byte{0x00, 0x00, 0x00, 0x00}, cachingNoWCE)
	noWCE10 := cat([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, cachingNoWCE)
	dSense6 := cat([]byte{0x00, 0x00, 0x00, 0x00}, controlDSensePage)
	for _, tc := range []struct {
		name string
		// luReadOnly makes the logical unit read-only for everyone; otherwise LUN 1 is a
		// read-only mapping of it and LUN 0 a read-write one.
		luReadOnly bool
		dSense     bool // descriptor format sense data
		cdb, param []byte
		want       []byte
	}{
		{"MODE SELECT(6), read-only mapping", false, false, modeSelect6(true, false, byte(len(noWCE6))), noWCE6, fixed},
		{"MODE SELECT(10), read-only mapping", false, false, modeSelect10(uint16(len(noWCE10))), noWCE10, fixed},
		{"MODE SELECT(6) D_SENSE=1, read-only mapping", false, false, modeSelect6(true, false, byte(len(dSense6))), dSense6, fixed},
		{"MODE SELECT(10), read-only mapping, descriptor sense", false, true, modeSelect10(uint16(len(noWCE10))), noWCE10, descriptor},
		{"MODE SELECT(6), empty parameter list, read-only mapping", false, false, modeSelect6(true, false, 0), nil, fixed},
		{"MODE SELECT(6), read-only logical unit", true, false, modeSelect6(true, false, byte(len(noWCE6))), noWCE6, fixed},
		{"MODE SELECT(10), read-only logical unit", true, false, modeSelect10(uint16(len(noWCE10))), noWCE10, fixed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lu := newTestLU(t, 1000, 512, func(cfg *Config) { cfg.ReadOnly = tc.luReadOnly })
			m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu}, {LUN: 1, LU: lu, ReadOnly: true}})
			require.NoError(t, err)
			roLUN := uint16(1)
			if tc.luReadOnly {
				roLUN = 0
			}
			clearPowerOnUA(t, m, testNexus)
			clearPowerOnUA(t, m, otherNexus)
			lu.mode.dSense.Store(tc.dSense)
			before := lu.mode.current()

			c := run(m, testNexus, roLUN, tc.cdb, tc.param, 0)
			require.Equal(t, StatusCheckCondition, c.Status)
			require.Equal(t, tc.want, c.SenseData())
			require.Equal(t, before, lu.mode.current(), "mode parameters changed")
			require.Equal(t, ReasonNone, lu.PendingUA(otherNexus))
			require.Equal(t, ReasonNone, lu.PendingUA(testNexus))
			// MODE SENSE through the same LUN: the caching page still has WCE, and WP is set.
			c = run(m, testNexus, roLUN, modeSense6(true, 0, 0x08, 0, 255), nil, 255)
			requireData(t, c, cat([]byte{0x17, 0x00, 0x90, 0x00}, cachingCurrent), 24)
			if tc.luReadOnly {
				return
			}

			// The same parameter list through the read-write mapping: accepted, and the
			// read-only initiator hears of it like any other.
			c = run(m, otherNexus, 0, tc.cdb, tc.param, 0)
			require.Equal(t, StatusGood, c.Status, "sense % x", c.SenseData())
			if len(tc.param) > 0 {
				require.NotEqual(t, before, lu.mode.current())
				require.Equal(t, ReasonModeParametersChanged, lu.PendingUA(testNexus))
			}
		})
	}
}

// TestTaskManagementWriteProtected checks CLEAR TASK SET and LOGICAL UNIT RESET sent by one
// nexus while another nexus has a command running on the same logical unit, each nexus with
// its own LUN map as the transport gives them. From a read-write mapping they act on every
// nexus (SAM-5); from a write-protected one (read-only mapping or read-only logical unit) only
// on the sender's commands: the other nexus's command completes GOOD, it gets no unit
// attention, and the mode parameters are not reset. The answer is FUNCTION COMPLETE either way.
func TestTaskManagementWriteProtected(t *testing.T) {
	type tmf struct {
		name string
		do   func(m *LUNMap, n *Nexus) TMFResponse
	}
	clearTaskSet := tmf{"CLEAR TASK SET", func(m *LUNMap, n *Nexus) TMFResponse { return m.ClearTaskSet(n, EncodeLUN(0)) }}
	luReset := tmf{"LOGICAL UNIT RESET", func(m *LUNMap, n *Nexus) TMFResponse { return m.LogicalUnitReset(n, EncodeLUN(0)) }}
	for _, tc := range []struct {
		name       string
		fn         tmf
		roMapping  bool // the sender's mapping is read-only
		luReadOnly bool // the logical unit is read-only for everyone
		// What happens to the other nexus: its command aborted, the unit attention it gets
		// (ReasonNone: none), and for the sender.
		otherAborted bool
		otherUA      Reason
		senderUA     Reason
		modeReset    bool
	}{
		{"read-write mapping", clearTaskSet, false, false,
			true, ReasonCommandsClearedByAnotherInitiator, ReasonNone, false},
		{"read-only mapping", clearTaskSet, true, false,
			false, ReasonNone, ReasonNone, false},
		{"read-only logical unit", clearTaskSet, false, true,
			false, ReasonNone, ReasonNone, false},
		{"read-write mapping", luReset, false, false,
			true, ReasonBusDeviceResetFunctionOccurred, ReasonBusDeviceResetFunctionOccurred, true},
		{"read-only mapping", luReset, true, false,
			false, ReasonNone, ReasonBusDeviceResetFunctionOccurred, false},
		{"read-only logical unit", luReset, false, true,
			false, ReasonNone, ReasonBusDeviceResetFunctionOccurred, false},
	} {
		t.Run(tc.fn.name+" from a "+tc.name, func(t *testing.T) {
			lu, otherMap, g := newGateLU(t, 64, func(cfg *Config) { cfg.ReadOnly = tc.luReadOnly })
			senderMap, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu, ReadOnly: tc.roMapping}})
			require.NoError(t, err)
			require.Equal(t, tc.roMapping || tc.luReadOnly, senderMap.Lookup(EncodeLUN(0)).WriteProtected())
			// WCE off, as a MODE SELECT from a read-write initiator would leave it: a reset
			// returns it to the default (on).
			lu.mode.wce.Store(false)

			openOther, openOwn := g.Gate(1*512), g.Gate(2*512)
			other := start(otherMap, otherNexus, 1, TaskSimple, cdb10(0x28, 0, 1, 1), nil, 512)
			g.RequireEntered(t, 1*512)
			own := start(senderMap, testNexus, 1, TaskSimple, cdb10(0x28, 0, 2, 1), nil, 512)
			g.RequireEntered(t, 2*512)

			r := tmfAsync(func() TMFResponse { return tc.fn.do(senderMap, testNexus) })
			testutil.WaitFor(t, "the function to wait for a running command", func() bool { return lu.aborters() == 1 })
			require.True(t, own.c.Aborted())
			require.Equal(t, tc.otherAborted, other.c.Aborted())
			requireTMFBlocked(t, r)
			openOwn()
			own.wait(t)
			if tc.otherAborted {
				requireTMFBlocked(t, r)
				openOther()
				requireTMF(t, r, TMFComplete)
				require.True(t, other.wait(t).Aborted())
			} else {
				// The function is done while the other nexus's command is still running.
				requireTMF(t, r, TMFComplete)
				other.requireRunning(t)
				openOther()
				checkGood(t, other.wait(t))
				require.False(t, other.c.Aborted())
			}

			require.Equal(t, tc.modeReset, lu.writeCacheEnabled(), "WCE reset to its default")
			for _, x := range []struct {
				m  *LUNMap
				n  *Nexus
				ua Reason
			}{{otherMap, otherNexus, tc.otherUA}, {senderMap, testNexus, tc.senderUA}} {
				if x.ua != ReasonNone {
					requireSense(t, turFrom(x.m, x.n), x.ua)
				}
				checkGood(t, turFrom(x.m, x.n))
			}
		})
	}
}
