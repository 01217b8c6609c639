package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
)

var (
	tur          = []byte{0x00, 0, 0, 0, 0, 0}
	stdInquiry36 = []byte{0x12, 0, 0, 0, 36, 0}
	reqSense     = []byte{0x03, 0, 0, 0, 252, 0}
)

// uaFixed is fixed-format sense data of a unit attention with asc/ascq.
func uaFixed(asc, ascq byte) []byte {
	return []byte{0x70, 0, 0x06, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, asc, ascq, 0, 0, 0, 0}
}

func TestUAFirstCommand(t *testing.T) {
	lu := newTestLU(t, 100, 512, nil)
	m := newTestMap(t, lu)

	c := run(m, testNexus, 0, tur, nil, 0)
	require.Equal(t, StatusCheckCondition, c.Status)
	require.Equal(t, uaFixed(0x29, 0x00), c.SenseData())
	requireGood(t, run(m, testNexus, 0, tur, nil, 0))

	// Another nexus has its own.
	c = run(m, otherNexus, 0, []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, 8)
	require.Equal(t, uaFixed(0x29, 0x00), c.SenseData())
	require.Zero(t, c.DataInLength)
	requireGood(t, run(m, otherNexus, 0, tur, nil, 0))
}

// TestUAReportingCommands checks that INQUIRY and REPORT LUNS run despite a pending unit
// attention and leave it pending, and that REQUEST SENSE returns it as parameter data and
// clears it.
func TestUAReportingCommands(t *testing.T) {
	lu := newTestLU(t, 100, 512, nil)
	m := newTestMap(t, lu)

	requireData(t, run(m, testNexus, 0, stdInquiry36, nil, 36), stdInquiryDefault[:36], 36)
	requireGood(t, run(m, testNexus, 0, vpdCDB(0x80, 255), nil, 255))
	requireGood(t, run(m, testNexus, 0, reportLUNsCDB(0, 4096), nil, 4096))
	require.Equal(t, ReasonPowerOnResetOrBusDeviceReset, lu.PendingUA(testNexus))

	c := run(m, testNexus, 0, reqSense, nil, 252)
	requireData(t, c, uaFixed(0x29, 0x00), 18)
	require.Equal(t, ReasonNone, lu.PendingUA(testNexus))
	requireData(t, run(m, testNexus, 0, reqSense, nil, 252),
		[]byte{0x70, 0, 0x00, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x00, 0x00, 0, 0, 0, 0}, 18)
	requireGood(t, run(m, testNexus, 0, tur, nil, 0))

	// Descriptor format, and a truncated REQUEST SENSE clears the condition all the same.
	lu.EstablishUA(testNexus, ReasonCapacityDataHasChanged)
	lu.EstablishUA(testNexus, ReasonModeParametersChanged)
	c = run(m, testNexus, 0, []byte{0x03, 0x01, 0, 0, 252, 0}, nil, 252)
	requireData(t, c, []byte{0x72, 0x06, 0x2A, 0x01, 0, 0, 0, 0}, 8)
	c = run(m, testNexus, 0, []byte{0x03, 0, 0, 0, 4, 0}, nil, 252)
	requireData(t, c, []byte{0x70, 0, 0x06, 0}, 4)
	require.Equal(t, ReasonNone, lu.PendingUA(testNexus))
}

func TestUAPriority(t *testing.T) {
	lu, m := readyMap(t, nil)
	lu.EstablishUA(testNexus, ReasonReportedLUNsDataHasChanged)
	lu.EstablishUA(testNexus, ReasonCapacityDataHasChanged)
	lu.EstablishUA(testNexus, ReasonModeParametersChanged)
	for _, want := range []Reason{ReasonModeParametersChanged, ReasonCapacityDataHasChanged, ReasonReportedLUNsDataHasChanged} {
		requireSense(t, run(m, testNexus, 0, tur, nil, 0), want)
	}
	requireGood(t, run(m, testNexus, 0, tur, nil, 0))

	// A reset is reported before what was pending already.
	lu.EstablishUA(testNexus, ReasonCapacityDataHasChanged)
	require.Equal(t, TMFComplete, m.LogicalUnitReset(otherNexus, EncodeLUN(0)))
	requireSense(t, run(m, testNexus, 0, tur, nil, 0), ReasonBusDeviceResetFunctionOccurred)
	requireSense(t, run(m, testNexus, 0, tur, nil, 0), ReasonCapacityDataHasChanged)
	requireGood(t, run(m, testNexus, 0, tur, nil, 0))
}

func TestUACapacityChange(t *testing.T) {
	lu, m := readyMap(t, nil)
	clearPowerOnUA(t, m, otherNexus)
	mem := lu.bs.(*backstore.Memory)

	changed, err := lu.RefreshCapacity()
	require.NoError(t, err)
	require.False(t, changed)
	requireGood(t, run(m, testNexus, 0, tur, nil, 0))

	require.NoError(t, mem.Resize(2000*512))
	changed, err = lu.RefreshCapacity()
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, uint64(2000), lu.Blocks())

	for _, n := range []*Nexus{testNexus, otherNexus} {
		c := run(m, n, 0, []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, 8)
		require.Equal(t, uaFixed(0x2A, 0x09), c.SenseData())
		c = run(m, n, 0, []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, 8)
		requireData(t, c, []byte{0x00, 0x00, 0x07, 0xCF, 0x00, 0x00, 0x02, 0x00}, 8)
	}
	c := run(m, testNexus, 0, readCap16(32), nil, 32)
	requireData(t, c, cat([]byte{0, 0, 0, 0, 0x00, 0x00, 0x07, 0xCF, 0x00, 0x00, 0x02, 0x00}, zeros(20)), 32)
	c = run(m, testNexus, 0, modeSense6(false, 0, 0x00, 0, 255), nil, 255)
	requireData(t, c, []byte{0x0B, 0x00, 0x10, 0x08, 0x00, 0x00, 0x07, 0xD0, 0x00, 0x00, 0x02, 0x00}, 12)

	// Shrinking.
	require.NoError(t, mem.Resize(10*512))
	changed, err = lu.RefreshCapacity()
	require.NoError(t, err)
	require.True(t, changed)
	requireSense(t, run(m, testNexus, 0, tur, nil, 0), ReasonCapacityDataHasChanged)
	c = run(m, testNexus, 0, []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, 8)
	requireData(t, c, []byte{0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x02, 0x00}, 8)
}

// TestUAReportedLUNsChanged checks LUNMap.EstablishUA with REPORTED LUNS DATA HAS CHANGED and
// its clearing by REPORT LUNS on every logical unit of the map, for that nexus only.
func TestUAReportedLUNsChanged(t *testing.T) {
	m, lus := newMap0_5_300(t)
	for _, n := range []*Nexus{testNexus, otherNexus} {
		for _, lun := range []uint16{0, 5, 300} {
			clearPowerOnUA2(t, m, n, lun)
		}
	}
	m.EstablishUA(testNexus, ReasonReportedLUNsDataHasChanged)
	for _, lu := range lus {
		require.Equal(t, ReasonReportedLUNsDataHasChanged, lu.PendingUA(testNexus))
		require.Equal(t, ReasonNone, lu.PendingUA(otherNexus))
	}

	// Reported by a command on LUN 5 (and cleared there)...
	c := run(m, testNexus, 5, tur, nil, 0)
	require.Equal(t, uaFixed(0x3F, 0x0E), c.SenseData())
	require.Equal(t, ReasonNone, lus[1].PendingUA(testNexus))
	require.Equal(t, ReasonReportedLUNsDataHasChanged, lus[2].PendingUA(testNexus))

	// ...and REPORT LUNS through LUN 0 clears it everywhere else.
	requireGood(t, run(m, testNexus, 0, reportLUNsCDB(0, 4096), nil, 4096))
	for _, lu := range lus {
		require.Equal(t, ReasonNone, lu.PendingUA(testNexus))
	}
	for _, lun := range []uint16{0, 5, 300} {
		requireGood(t, run(m, testNexus, lun, tur, nil, 0))
	}

	// REPORT LUNS through an unmapped LUN clears it too; a failed one does not.
	m.EstablishUA(testNexus, ReasonReportedLUNsDataHasChanged)
	m.EstablishUA(otherNexus, ReasonReportedLUNsDataHasChanged)
	requireInvalidCDB(t, run(m, testNexus, 9, reportLUNsCDB(0, 8), nil, 4096), 6, -1)
	require.Equal(t, ReasonReportedLUNsDataHasChanged, lus[0].PendingUA(testNexus))
	requireGood(t, run(m, testNexus, 9, reportLUNsCDB(0, 4096), nil, 4096))
	for _, lu := range lus {
		require.Equal(t, ReasonNone, lu.PendingUA(testNexus))
		require.Equal(t, ReasonReportedLUNsDataHasChanged, lu.PendingUA(otherNexus))
	}

	// REPORTED LUNS DATA HAS CHANGED only: another pending condition stays.
	lus[0].EstablishUA(testNexus, ReasonCapacityDataHasChanged)
	lus[0].EstablishUA(testNexus, ReasonReportedLUNsDataHasChanged)
	requireGood(t, run(m, testNexus, 0, reportLUNsCDB(0, 4096), nil, 4096))
	require.Equal(t, ReasonCapacityDataHasChanged, lus[0].PendingUA(testNexus))
}

// clearPowerOnUA2 is clearPowerOnUA for any LUN.
func clearPowerOnUA2(t *testing.T, m *LUNMap, n *Nexus, lun uint16) {
	t.Helper()
	requireSense(t, run(m, n, lun, tur, nil, 0), ReasonPowerOnResetOrBusDeviceReset)
	requireGood(t, run(m, n, lun, tur, nil, 0))
}

func TestUANexusLoss(t *testing.T) {
	m, lus := newMap0_5_300(t)
	clearPowerOnUA2(t, m, testNexus, 0)
	clearPowerOnUA2(t, m, testNexus, 5)
	m.NexusReset(testNexus)
	requireSense(t, run(m, testNexus, 0, tur, nil, 0), ReasonITNexusLossOccurred)
	requireSense(t, run(m, testNexus, 5, tur, nil, 0), ReasonITNexusLossOccurred)
	// LUN 300 never saw the nexus: its first command reports POWER ON, which covers it.
	requireSense(t, run(m, testNexus, 300, tur, nil, 0), ReasonPowerOnResetOrBusDeviceReset)
	require.Equal(t, ReasonNone, lus[2].PendingUA(testNexus))
}
