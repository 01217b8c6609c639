package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Tests of what an initiator for which the logical unit is write-protected (a read-only mapping,
// or a read-only logical unit) may do to state that other initiators share.

// TestWriteProtectedCommandTable pins which commands a write-protected initiator is refused:
// every command that changes the medium, and MODE SELECT, which changes the logical unit's
// mode parameters. VERIFY carries data-out too but changes nothing (see opWriteProtected).
func TestWriteProtectedCommandTable(t *testing.T) {
	want := []string{
		"MODE SELECT(6)", "MODE SELECT(10)",
		"WRITE(6)", "WRITE(10)", "WRITE(12)", "WRITE(16)",
		"WRITE AND VERIFY(10)", "WRITE AND VERIFY(16)",
		"UNMAP", "WRITE SAME(10)", "WRITE SAME(16)", "COMPARE AND WRITE",
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
		require.Equal(t, opChangesModePages, op.flags, op.name)
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
