package scsi

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// Helpers shared by the SPC tests.

// data returns the data-in bytes a command produced.
func data(c *Command) []byte { return c.DataIn[:c.DataInLength] }

// cat joins byte slices; expected parameter data is written as its fields, one piece each.
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// zeros returns n zero bytes.
func zeros(n int) []byte { return make([]byte, n) }

// requireGood checks that c completed with GOOD and no sense data.
func requireGood(t testing.TB, c *Command) {
	t.Helper()
	require.Equal(t, StatusGood, c.Status, "status; sense % x", c.SenseData())
	require.Zero(t, c.SenseLength)
}

// requireData checks that c completed with GOOD, produced want and asked to move transfer bytes.
func requireData(t testing.TB, c *Command, want []byte, transfer int) {
	t.Helper()
	requireGood(t, c)
	require.Equal(t, want, data(c))
	require.Equal(t, transfer, c.TransferLength, "TransferLength")
}

// requireField checks that c ended with reason and a field pointer at byte (and bit, -1: no
// bit pointer) of the CDB (inCDB) or of the parameter list.
func requireField(t testing.TB, c *Command, reason Reason, inCDB bool, byteOff, bit int) {
	t.Helper()
	s := requireSense(t, c, reason)
	require.True(t, s.FieldPointerValid, "SKSV")
	require.Equal(t, inCDB, s.InCDB, "C/D")
	require.Equal(t, uint16(byteOff), s.FieldPointer, "field pointer")
	if bit < 0 {
		require.False(t, s.BitPointerValid, "BPV")
	} else {
		require.True(t, s.BitPointerValid, "BPV")
		require.Equal(t, uint8(bit), s.BitPointer, "bit pointer")
	}
	require.Zero(t, c.DataInLength)
}

// requireInvalidCDB checks INVALID FIELD IN CDB at byte and bit.
func requireInvalidCDB(t testing.TB, c *Command, byteOff, bit int) {
	t.Helper()
	requireField(t, c, ReasonInvalidFieldInCDB, true, byteOff, bit)
}

// cdbCase is a CDB of a table test: byteOff -1 expects GOOD, any other INVALID FIELD IN CDB at
// byteOff and bit (-1: no bit pointer).
type cdbCase struct {
	name         string
	cdb          []byte
	byteOff, bit int
}

// requireCDBCase checks that c, the command of tc, ended as tc expects.
func requireCDBCase(t testing.TB, c *Command, tc cdbCase) {
	t.Helper()
	if tc.byteOff < 0 {
		requireGood(t, c)
		return
	}
	requireInvalidCDB(t, c, tc.byteOff, tc.bit)
}

// readyMap makes a 1000-block LU of 512-byte blocks at LUN 0 with the power-on unit attention
// of testNexus consumed.
func readyMap(t testing.TB, mod func(*Config)) (*LogicalUnit, *LUNMap) {
	t.Helper()
	lu := newTestLU(t, 1000, 512, mod)
	m := newTestMap(t, lu)
	clearPowerOnUA(t, m, testNexus)
	return lu, m
}

// TestCDBControlByte checks the CONTROL byte: NACA is refused (no ACA), the vendor-specific
// bits are ignored.
func TestCDBControlByte(t *testing.T) {
	_, m := readyMap(t, nil)
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0x00, 0, 0, 0, 0, 0x04}, nil, 0), 5, 2)
	requireGood(t, run(m, testNexus, 0, []byte{0x00, 0, 0, 0, 0, 0xC0}, nil, 0))
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0x12, 0, 0, 0, 36, 0x01}, nil, 36), 5, 0)
}

func TestTestUnitReady(t *testing.T) {
	_, m := readyMap(t, nil)
	c := run(m, testNexus, 0, []byte{0x00, 0, 0, 0, 0, 0}, nil, 0)
	requireGood(t, c)
	require.Zero(t, c.TransferLength)
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0x00, 0x01, 0, 0, 0, 0}, nil, 0), 1, 0)
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0x00, 0, 0, 0x80, 0, 0}, nil, 0), 3, 7)
}

func TestPreventAllowMediumRemoval(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, tc := range []cdbCase{
		{"allow", []byte{0x1E, 0, 0, 0, 0x00, 0}, -1, 0},
		{"prevent", []byte{0x1E, 0, 0, 0, 0x01, 0}, -1, 0},
		{"prevent 10b (obsolete)", []byte{0x1E, 0, 0, 0, 0x02, 0}, 4, 1},
		{"prevent 11b (obsolete)", []byte{0x1E, 0, 0, 0, 0x03, 0}, 4, 1},
		{"reserved byte 4 bits", []byte{0x1E, 0, 0, 0, 0x04, 0}, 4, 2},
		{"reserved byte 3", []byte{0x1E, 0, 0, 0x01, 0x00, 0}, 3, 0},
		{"reserved byte 1", []byte{0x1E, 0x20, 0, 0, 0x00, 0}, 1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCDBCase(t, run(m, testNexus, 0, tc.cdb, nil, 0), tc)
		})
	}
}

// TestShortCDB checks that a CDB shorter than its command is refused before the handler reads
// beyond it.
func TestShortCDB(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, cdb := range [][]byte{
		{0x12, 0, 0},
		{0x1A, 0, 0x3F, 0, 0xFF},
		{0x25, 0, 0, 0, 0, 0},
		{0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20},
		{0xA0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0},
		{0xA3, 0x0C, 0, 0, 0, 0},
	} {
		c := run(m, testNexus, 0, cdb, nil, 512)
		requireSense(t, c, ReasonInvalidFieldInCommandIU)
		// Through an unmapped LUN too, for the commands that work there.
		c = run(m, testNexus, 9, cdb, nil, 512)
		require.Equal(t, StatusCheckCondition, c.Status)
	}
}

// TestUnsupportedOpcode checks INVALID COMMAND OPERATION CODE, without a field pointer, for
// operation codes the device server does not implement, including those none of whose service
// actions it implements (SPC-4 4.2.5.1).
func TestUnsupportedOpcode(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, cdb := range [][]byte{
		{0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0},                // MAINTENANCE OUT: SET TARGET PORT GROUPS
		{0x9F, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},       // SERVICE ACTION OUT(16)
		{0xC0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},          // vendor specific
		{0x4D, 0, 0, 0, 0, 0, 0, 0, 0x10, 0},                         // LOG SENSE
		{0x1D, 0, 0, 0, 0, 0},                                        // SEND DIAGNOSTIC
		{0x3C, 0x02, 0, 0, 0, 0, 0, 0, 0x10, 0},                      // READ BUFFER
		{0x7F, 0, 0, 0, 0, 0, 0, 0x18, 0x0D, 0, 0, 0, 0, 0, 0, 0, 0}, // variable length
	} {
		c := run(m, testNexus, 0, cdb, nil, 512)
		s := requireSense(t, c, ReasonInvalidCommandOperationCode)
		require.False(t, s.FieldPointerValid)
	}
}

// TestUnsupportedServiceAction checks that a service action the device server does not implement,
// of an operation code some of whose service actions it does, is INVALID FIELD IN CDB with the
// field pointer on the SERVICE ACTION field (byte 1, bit 4) (SPC-4 4.2.5.1), in both sense
// formats, and that no command of the table is answered so by mistake.
func TestUnsupportedServiceAction(t *testing.T) {
	cdbs := map[string][]byte{
		"PERSISTENT RESERVE IN SA 04h":    {0x5E, 0x04, 0, 0, 0, 0, 0, 0x10, 0x00, 0},
		"PERSISTENT RESERVE IN SA 1Fh":    {0x5E, 0x1F, 0, 0, 0, 0, 0, 0x10, 0x00, 0},
		"PERSISTENT RESERVE OUT SA 08h":   {0x5F, 0x08, 0, 0, 0, 0, 0, 0, 0x18, 0},
		"SERVICE ACTION IN(16) SA 1Fh":    {0x9E, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0},
		"SERVICE ACTION IN(16) SA 13h":    {0x9E, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0},
		"MAINTENANCE IN REPORT TIMESTAMP": {0xA3, 0x0F, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0},
		// Without ALUA, REPORT TARGET PORT GROUPS is not supported (TPGS 00b).
		"MAINTENANCE IN REPORT TARGET PORT GROUPS": {0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0},
	}
	for _, desc := range []bool{false, true} {
		lu, m := readyMap(t, nil)
		lu.mode.dSense.Store(desc)
		for name, cdb := range cdbs {
			c := run(m, testNexus, 0, cdb, make([]byte, 24), 512)
			t.Run(name, func(t *testing.T) {
				s := requireSense(t, c, ReasonInvalidFieldInCDB)
				require.True(t, s.FieldPointerValid && s.InCDB && s.BitPointerValid, "SKSV, C/D, BPV: %+v", s)
				require.Equal(t, uint16(1), s.FieldPointer)
				require.Equal(t, uint8(4), s.BitPointer)
				require.Equal(t, desc, c.Sense[0] == SenseCurrentDescriptor)
			})
		}
	}
}

// TestIncorrectLUN checks the answers for a LUN that is not mapped (SPC-4 "incorrect logical
// unit") and for the REPORT LUNS well-known logical unit.
func TestIncorrectLUN(t *testing.T) {
	_, m := readyMap(t, nil)
	unmapped := EncodeLUN(7)

	stdPQ3 := cat(
		[]byte{0x7F, 0x00, 0x06, 0x12, 0x5B, 0x00, 0x00, 0x02},
		[]byte("SRPTGT  srptarget disk  0001"),
		zeros(22),
		[]byte{0x00, 0xA0, 0x09, 0x40, 0x04, 0x60},
		zeros(32),
	)
	stdWLUN := bytes.Clone(stdPQ3)
	stdWLUN[0] = 0x1E

	for _, tc := range []struct {
		name   string
		lun    uint64
		cdb    []byte
		want   []byte // GOOD with this data, or
		reason Reason // CHECK CONDITION with this
	}{
		{"INQUIRY", unmapped, []byte{0x12, 0, 0, 0, 0xFF, 0}, stdPQ3, 0},
		{"INQUIRY short allocation", unmapped, []byte{0x12, 0, 0, 0, 1, 0}, []byte{0x7F}, 0},
		{"INQUIRY VPD 0x00", unmapped, []byte{0x12, 1, 0x00, 0, 0xFF, 0}, []byte{0x7F, 0x00, 0x00, 0x01, 0x00}, 0},
		{"REQUEST SENSE fixed", unmapped, []byte{0x03, 0, 0, 0, 0xFF, 0},
			[]byte{0x70, 0, 0x05, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x25, 0x00, 0, 0, 0, 0}, 0},
		{"REQUEST SENSE descriptor", unmapped, []byte{0x03, 1, 0, 0, 0xFF, 0},
			[]byte{0x72, 0x05, 0x25, 0x00, 0, 0, 0, 0}, 0},
		{"TEST UNIT READY", unmapped, []byte{0x00, 0, 0, 0, 0, 0}, nil, ReasonLogicalUnitNotSupported},
		{"READ(10)", unmapped, []byte{0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, nil, ReasonLogicalUnitNotSupported},
		{"MODE SENSE(6)", unmapped, []byte{0x1A, 0, 0x3F, 0, 0xFF, 0}, nil, ReasonLogicalUnitNotSupported},
		{"unknown opcode", unmapped, []byte{0xFF, 0, 0, 0, 0, 0}, nil, ReasonLogicalUnitNotSupported},
		{"bus identifier", 0x0100000000000000, []byte{0x12, 0, 0, 0, 0xFF, 0}, stdPQ3, 0},

		{"W-LUN INQUIRY", ReportLUNsWellKnownLUN, []byte{0x12, 0, 0, 0, 0xFF, 0}, stdWLUN, 0},
		{"W-LUN VPD 0x00", ReportLUNsWellKnownLUN, []byte{0x12, 1, 0x00, 0, 0xFF, 0}, []byte{0x1E, 0x00, 0x00, 0x01, 0x00}, 0},
		{"W-LUN TEST UNIT READY", ReportLUNsWellKnownLUN, []byte{0x00, 0, 0, 0, 0, 0}, []byte{}, 0},
		{"W-LUN REQUEST SENSE", ReportLUNsWellKnownLUN, []byte{0x03, 0, 0, 0, 0xFF, 0},
			[]byte{0x70, 0, 0x00, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x00, 0x00, 0, 0, 0, 0}, 0},
		{"W-LUN MODE SENSE", ReportLUNsWellKnownLUN, []byte{0x1A, 0, 0x3F, 0, 0xFF, 0}, nil, ReasonInvalidCommandOperationCode},
		{"W-LUN READ CAPACITY", ReportLUNsWellKnownLUN, []byte{0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil, ReasonInvalidCommandOperationCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Command{Nexus: testNexus, LUN: tc.lun, CDB: tc.cdb, DataIn: make([]byte, 512)}
			m.Execute(c)
			if tc.want == nil {
				s := requireSense(t, c, tc.reason)
				require.Equal(t, uint8(SenseCurrentFixed), s.ResponseCode)
				return
			}
			requireGood(t, c)
			require.Equal(t, tc.want, data(c))
		})
	}

	t.Run("errors are checked", func(t *testing.T) {
		c := &Command{Nexus: testNexus, LUN: unmapped, CDB: []byte{0x12, 0, 0x80, 0, 0xFF, 0}, DataIn: make([]byte, 512)}
		m.Execute(c)
		requireInvalidCDB(t, c, 2, -1)
		c = &Command{Nexus: testNexus, LUN: unmapped, CDB: []byte{0x12, 1, 0x80, 0, 0xFF, 0}, DataIn: make([]byte, 512)}
		m.Execute(c)
		requireInvalidCDB(t, c, 2, -1)
		c = &Command{Nexus: testNexus, LUN: unmapped, CDB: []byte{0x12, 0, 0, 0, 0xFF, 0x04}, DataIn: make([]byte, 512)}
		m.Execute(c)
		requireInvalidCDB(t, c, 5, 2)
		c = &Command{Nexus: testNexus, LUN: unmapped, Attr: TaskACA, CDB: []byte{0x12, 0, 0, 0, 0xFF, 0}, DataIn: make([]byte, 512)}
		m.Execute(c)
		requireSense(t, c, ReasonInvalidFieldInCommandIU)
		c = &Command{Nexus: testNexus, LUN: unmapped, CDB: []byte{}, DataIn: make([]byte, 512)}
		m.Execute(c)
		requireSense(t, c, ReasonInvalidFieldInCommandIU)
	})
}
