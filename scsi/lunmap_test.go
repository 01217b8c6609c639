package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewLUNMapErrors(t *testing.T) {
	lu := newTestLU(t, 100, 512, nil)
	for _, tc := range []struct {
		name     string
		mappings []Mapping
		err      string
	}{
		{"no logical unit", []Mapping{{LUN: 3}}, "lun 3: no logical unit"},
		{"LUN too large", []Mapping{{LUN: MaxLUN + 1, LU: lu}}, "lun 16384: larger than 16383"},
		{"LUN twice", []Mapping{{LUN: 1, LU: lu}, {LUN: 2, LU: lu}, {LUN: 1, LU: lu}}, "lun 1: mapped twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewLUNMap(tc.mappings)
			require.EqualError(t, err, tc.err)
			require.Nil(t, m)
		})
	}
}

func TestLUNMapLookup(t *testing.T) {
	m, lus := newMap0_5_300(t)
	got := m.Mappings()
	require.Len(t, got, 3)
	require.Equal(t, []uint16{0, 5, 300}, []uint16{got[0].LUN, got[1].LUN, got[2].LUN})
	require.Same(t, lus[2], m.Lookup(EncodeLUN(300)).LU)
	require.Same(t, lus[1], m.Lookup(0x4005000000000000).LU) // flat space addressing of LUN 5
	require.Nil(t, m.Lookup(EncodeLUN(6)))
	require.Nil(t, m.Lookup(ReportLUNsWellKnownLUN))
}

// TestLUNMapRouting checks that each LUN reaches its own logical unit: the unit serial numbers
// differ.
func TestLUNMapRouting(t *testing.T) {
	a := newTestLU(t, 100, 512, func(cfg *Config) { cfg.Serial = "aaaa" })
	b := newTestLU(t, 200, 4096, func(cfg *Config) { cfg.Serial = "bbbb" })
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: a}, {LUN: 260, LU: b}})
	require.NoError(t, err)
	c := run(m, testNexus, 0, vpdCDB(0x80, 255), nil, 255)
	requireData(t, c, cat([]byte{0x00, 0x80, 0x00, 0x04}, []byte("aaaa")), 8)
	c = run(m, testNexus, 260, vpdCDB(0x80, 255), nil, 255)
	requireData(t, c, cat([]byte{0x00, 0x80, 0x00, 0x04}, []byte("bbbb")), 8)
	clearPowerOnUA2(t, m, testNexus, 260)
	c = run(m, testNexus, 260, []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, 8)
	requireData(t, c, []byte{0x00, 0x00, 0x00, 0xC7, 0x00, 0x00, 0x10, 0x00}, 8)
}

// TestLUNMapReadOnly checks a read-only mapping: the header's WP bit, and the framework's refusal
// of commands that change shared state (MODE SELECT too: TestModeSelectWriteProtected).
func TestLUNMapReadOnly(t *testing.T) {
	lu := newTestLU(t, 100, 512, nil)
	m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu}, {LUN: 1, LU: lu, ReadOnly: true}})
	require.NoError(t, err)
	clearPowerOnUA2(t, m, testNexus, 0)
	c := run(m, testNexus, 1, modeSense6(true, 0, 0x08, 0, 4), nil, 4)
	requireData(t, c, []byte{0x17, 0x00, 0x90, 0x00}, 4)
	c = run(m, testNexus, 0, modeSense6(true, 0, 0x08, 0, 4), nil, 4)
	requireData(t, c, []byte{0x17, 0x00, 0x10, 0x00}, 4)
	param := cat([]byte{0x00, 0x00, 0x00, 0x00}, cachingNoWCE)
	requireSense(t, run(m, testNexus, 1, modeSelect6(true, false, byte(len(param))), param, 0), ReasonWriteProtected)
	requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))
	// A write through the read-only mapping, if the SBC half has WRITE(10).
	if lookupCommand([]byte{0x2A}) != nil {
		c = run(m, testNexus, 1, []byte{0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0}, make([]byte, 512), 0)
		requireSense(t, c, ReasonWriteProtected)
	}
}

func TestLUNMapTaskManagement(t *testing.T) {
	m, _ := newMap0_5_300(t)
	clearPowerOnUA2(t, m, testNexus, 5)
	clearPowerOnUA2(t, m, testNexus, 300)
	for _, lun := range []uint64{EncodeLUN(0), EncodeLUN(300)} {
		require.Equal(t, TMFComplete, m.AbortTask(testNexus, lun, 1))
		require.Equal(t, TMFComplete, m.AbortTaskSet(testNexus, lun))
		require.Equal(t, TMFComplete, m.ClearTaskSet(testNexus, lun))
		require.Equal(t, TMFComplete, m.QueryTask(testNexus, lun, 1))
		require.Equal(t, TMFComplete, m.LogicalUnitReset(testNexus, lun))
	}
	for _, lun := range []uint64{EncodeLUN(1), ReportLUNsWellKnownLUN} {
		require.Equal(t, TMFIncorrectLUN, m.AbortTask(testNexus, lun, 1))
		require.Equal(t, TMFIncorrectLUN, m.AbortTaskSet(testNexus, lun))
		require.Equal(t, TMFIncorrectLUN, m.ClearTaskSet(testNexus, lun))
		require.Equal(t, TMFIncorrectLUN, m.QueryTask(testNexus, lun, 1))
		require.Equal(t, TMFIncorrectLUN, m.LogicalUnitReset(testNexus, lun))
	}
	// The resets reached the logical units addressed, not LUN 5.
	requireSense(t, run(m, testNexus, 300, tur, nil, 0), ReasonBusDeviceResetFunctionOccurred)
	requireGood(t, run(m, testNexus, 5, tur, nil, 0))
}

// TestCommandReset checks that a pooled command is clean after Reset: a second command does not
// see the first one's results.
func TestCommandReset(t *testing.T) {
	_, m := readyMap(t, nil)
	c := &Command{Nexus: testNexus, CDB: []byte{0x12, 0, 0x80, 0, 0xFF, 0}, DataIn: make([]byte, 255)}
	m.Execute(c)
	require.Equal(t, StatusCheckCondition, c.Status)
	buf := c.DataIn
	c.Reset()
	c.Nexus, c.CDB, c.DataIn = testNexus, []byte{0x12, 0, 0, 0, 36, 0}, buf[:255]
	m.Execute(c)
	requireData(t, c, stdInquiryDefault[:36], 36)
}
