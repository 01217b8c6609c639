package scsi

import "math/bits"

// SPC-4 operation codes handled in this package (SPC-4 Annex E), and the SBC-3 READ CAPACITY
// commands, which answer from the logical unit's geometry rather than from the medium.
const (
	opTestUnitReady          = 0x00
	opRequestSense           = 0x03
	opInquiry                = 0x12
	opModeSelect6            = 0x15
	opModeSense6             = 0x1A
	opPreventAllowMedium     = 0x1E
	opReadCapacity10         = 0x25
	opModeSelect10           = 0x55
	opModeSense10            = 0x5A
	opServiceActionIn16      = 0x9E
	opReportLUNs             = 0xA0
	opMaintenanceIn          = 0xA3
	saReadCapacity16         = 0x10 // SERVICE ACTION IN(16)
	saReportSupportedOpcodes = 0x0C // MAINTENANCE IN
	saReportSupportedTMFs    = 0x0D // MAINTENANCE IN
)

// CDB usage data (SPC-4 6.35.3) of the commands below: a bit set for every CDB bit the device
// server evaluates. The handlers check the CDB against the same data (checkCDBUsage), so what
// REPORT SUPPORTED OPERATION CODES says and what the device server does cannot drift apart.
// The CONTROL byte shows 07h: NACA is evaluated (and refused), as are the obsolete LINK and
// FLAG bits (refused: linked commands do not exist in SAM-5).
var (
	usageTestUnitReady  = []byte{opTestUnitReady, 0x00, 0x00, 0x00, 0x00, 0x07}
	usageRequestSense   = []byte{opRequestSense, 0x01, 0x00, 0x00, 0xFF, 0x07}
	usageInquiry        = []byte{opInquiry, 0x01, 0xFF, 0xFF, 0xFF, 0x07}
	usageModeSelect6    = []byte{opModeSelect6, 0x11, 0x00, 0x00, 0xFF, 0x07}
	usageModeSense6     = []byte{opModeSense6, 0x08, 0xFF, 0xFF, 0xFF, 0x07}
	usagePreventAllow   = []byte{opPreventAllowMedium, 0x00, 0x00, 0x00, 0x03, 0x07}
	usageReadCapacity10 = []byte{opReadCapacity10, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x01, 0x07}
	usageModeSelect10   = []byte{opModeSelect10, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0x07}
	usageModeSense10    = []byte{opModeSense10, 0x18, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0x07}
	usageReadCapacity16 = []byte{opServiceActionIn16, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x07}
	usageReportLUNs     = []byte{opReportLUNs, 0x00, 0xFF, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}
	usageReportOpcodes  = []byte{opMaintenanceIn, 0x1F, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}
	usageReportTMFs     = []byte{opMaintenanceIn, 0x1F, 0x80, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}
)

// spcCommands are the primary commands (SPC-4) every logical unit supports.
var spcCommands = []opInfo{
	{name: "TEST UNIT READY", opcode: opTestUnitReady, cdbLength: 6,
		usage: usageTestUnitReady, flags: opPRAllowed, run: testUnitReady},
	{name: "REQUEST SENSE", opcode: opRequestSense, cdbLength: 6,
		usage: usageRequestSense, flags: opReportsNoUA | opPRAllowed | opSPC2Allowed | opAllowedWhenInaccessible, run: requestSense},
	{name: "INQUIRY", opcode: opInquiry, cdbLength: 6,
		usage: usageInquiry, flags: opReportsNoUA | opPRAllowed | opSPC2Allowed | opAllowedWhenInaccessible, run: inquiry},
	{name: "MODE SELECT(6)", opcode: opModeSelect6, cdbLength: 6,
		usage: usageModeSelect6, flags: opChangesModePages | opAllowedInStandby, run: modeSelect},
	{name: "MODE SENSE(6)", opcode: opModeSense6, cdbLength: 6,
		usage: usageModeSense6, flags: opPRReads | opAllowedInStandby, run: modeSense},
	{name: "PREVENT ALLOW MEDIUM REMOVAL", opcode: opPreventAllowMedium, cdbLength: 6,
		usage: usagePreventAllow, flags: opPRByCDB, run: preventAllowMediumRemoval},
	{name: "READ CAPACITY(10)", opcode: opReadCapacity10, cdbLength: 10,
		usage: usageReadCapacity10, flags: opPRAllowed, run: readCapacity10},
	{name: "MODE SELECT(10)", opcode: opModeSelect10, cdbLength: 10,
		usage: usageModeSelect10, flags: opChangesModePages | opAllowedInStandby, run: modeSelect},
	{name: "MODE SENSE(10)", opcode: opModeSense10, cdbLength: 10,
		usage: usageModeSense10, flags: opPRReads | opAllowedInStandby, run: modeSense},
	{name: "READ CAPACITY(16)", opcode: opServiceActionIn16, serviceAction: saReadCapacity16, hasSA: true,
		cdbLength: 16, usage: usageReadCapacity16, flags: opPRAllowed, run: readCapacity16},
	{name: "REPORT LUNS", opcode: opReportLUNs, cdbLength: 12,
		usage: usageReportLUNs, flags: opReportsNoUA | opPRAllowed | opSPC2Allowed | opAllowedWhenInaccessible, run: reportLUNs},
	{name: "REPORT SUPPORTED OPERATION CODES", opcode: opMaintenanceIn, serviceAction: saReportSupportedOpcodes,
		hasSA: true, cdbLength: 12, usage: usageReportOpcodes, flags: opPRAllowed, run: reportSupportedOpcodes},
	{name: "REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS", opcode: opMaintenanceIn, serviceAction: saReportSupportedTMFs,
		hasSA: true, cdbLength: 12, usage: usageReportTMFs, flags: opPRAllowed, run: reportSupportedTMFs},
	{name: "REPORT TARGET PORT GROUPS", opcode: opMaintenanceIn, serviceAction: saReportTargetPortGroups,
		hasSA: true, cdbLength: 12, usage: usageReportTPGs, flags: opPRAllowed | opAllowedWhenInaccessible, run: reportTargetPortGroups},
	// SET TARGET PORT GROUPS runs through a standby or unavailable port (SPC-4 5.15.2.4.4,
	// 5.15.2.4.5): it is how an application client makes one active again. A reservation
	// conflicts with it as with a write, and an initiator that may not write may not change
	// what every other initiator may do either.
	{name: "SET TARGET PORT GROUPS", opcode: opMaintenanceOut, serviceAction: saSetTargetPortGroups,
		hasSA: true, cdbLength: 12, usage: usageSetTPGs, flags: opChangesReservations | opAllowedWhenInaccessible, run: setTargetPortGroups},
}

// Bits of the CONTROL byte (SAM-5 5.2). controlReserved must be zero: LINK (bit 0) and the
// obsolete FLAG (bit 1), since linked commands are not supported, and the reserved bits 5:3.
// NACA (bit 2) must be zero too: auto contingent allegiance is not supported (NORMACA is 0 in
// the standard INQUIRY data). The vendor specific bits 7:6 are ignored by every command.
const (
	controlReserved = 0x3B
	controlNACA     = 0x04
)

// checkCDBUsage checks that every bit of the CDB between the operation code and the CONTROL
// byte that the command's CDB usage data does not mark is zero (reserved and obsolete fields),
// and returns INVALID FIELD IN CDB pointing at the first offending byte and its highest
// offending bit when one is not. The operation code byte is not checked (the lookup matched
// it), nor the CONTROL byte (checkControl, for every command).
func checkCDBUsage(cdb, usage []byte) fault {
	for i := 1; i < len(usage)-1; i++ {
		if x := cdb[i] &^ usage[i]; x != 0 {
			return cdbFieldFault(i, bits.Len8(x)-1)
		}
	}
	return 0
}

// checkForm checks the CDB of a command that has a 6-byte and a 10-byte form (MODE SENSE, MODE
// SELECT, RESERVE, RELEASE) against the usage data of its form: ten when the operation code is
// op10. ok false: c has failed.
func (c *Command) checkForm(op10 byte, usage6, usage10 []byte) (ten, ok bool) {
	ten = c.CDB[0] == op10
	usage := usage6
	if ten {
		usage = usage10
	}
	return ten, !c.failOn(checkCDBUsage(c.CDB, usage))
}

// checkControl checks the CONTROL byte of every command, at off: NACA first (so that a CDB asking
// for ACA hears about that), then the other bits of controlReserved, pointing at the highest
// offending one.
func checkControl(cdb []byte, off int) fault {
	if cdb[off]&controlNACA != 0 {
		return cdbFieldFault(off, 2)
	}
	if x := cdb[off] & controlReserved; x != 0 {
		return cdbFieldFault(off, bits.Len8(x)-1)
	}
	return 0
}

// testUnitReady reports GOOD: the medium is always ready.
func testUnitReady(lu *LogicalUnit, c *Command) {
	c.failOn(checkCDBUsage(c.CDB, usageTestUnitReady))
}

// preventAllowMediumRemoval accepts PREVENT 00b (allow) and 01b (prevent) and does nothing:
// the medium is not removable (RMB is 0), so there is nothing to lock. 10b and 11b were for
// medium changers and are obsolete in SPC-4.
func preventAllowMediumRemoval(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usagePreventAllow)) {
		return
	}
	if c.CDB[4]&0x03 > 1 {
		c.invalidCDBField(4, 1)
	}
}

// executeWithoutLU answers a command addressed to a LUN that is not mapped (SPC-4 3.1.51,
// "incorrect logical unit"), or to the REPORT LUNS well-known logical unit.
//
// For an incorrect LUN, INQUIRY returns data with peripheral qualifier 011b and GOOD, REPORT
// LUNS works (Linux sends it to LUN 0 even when nothing is mapped there), REQUEST SENSE returns
// LOGICAL UNIT NOT SUPPORTED as its parameter data with GOOD, and anything else ends in CHECK
// CONDITION with LOGICAL UNIT NOT SUPPORTED.
//
// The REPORT LUNS well-known logical unit (SPC-4 8.2) supports INQUIRY, REPORT LUNS, REQUEST
// SENSE and TEST UNIT READY; anything else is INVALID COMMAND OPERATION CODE.
func executeWithoutLU(m *LUNMap, c *Command) {
	wlun := c.LUN == ReportLUNsWellKnownLUN
	op := lookupCommand(c.CDB)
	supported := false
	if op != nil {
		switch op.opcode {
		case opInquiry, opReportLUNs, opRequestSense:
			supported = true
		case opTestUnitReady:
			supported = wlun
		}
	}
	if !supported {
		if wlun {
			c.invalidOpcode()
		} else {
			c.fail(ReasonLogicalUnitNotSupported)
		}
		return
	}
	if len(c.CDB) < op.cdbLength || c.Attr == TaskACA {
		c.fail(ReasonInvalidFieldInCommandIU)
		return
	}
	if c.failOn(checkControl(c.CDB, op.cdbLength-1)) {
		return
	}
	op.run(nil, c)
}

// dataInWriter writes parameter data into c.DataIn at increasing offsets, keeping what lies
// beyond the allocation length or the buffer out, while counting the full length. It lets
// long parameter data (REPORT LUNS with thousands of LUNs, the list of every supported command)
// be produced without building it in a temporary buffer first.
type dataInWriter struct {
	c     *Command
	limit int // min(allocation length, len(DataIn))
	alloc int
	off   int // full length so far
}

func newDataInWriter(c *Command, allocationLength int) dataInWriter {
	return dataInWriter{c: c, limit: min(allocationLength, len(c.DataIn)), alloc: allocationLength}
}

// write appends b.
func (w *dataInWriter) write(b []byte) {
	if w.off < w.limit {
		copy(w.c.DataIn[w.off:w.limit], b)
	}
	w.off += len(b)
}

// patch rewrites b at offset off, already written (a length field known only at the end).
func (w *dataInWriter) patch(off int, b []byte) {
	if off < w.limit {
		copy(w.c.DataIn[off:w.limit], b)
	}
}

// finish sets the result lengths as putDataIn does.
func (w *dataInWriter) finish() {
	n := min(w.off, w.alloc)
	w.c.TransferLength = n
	w.c.DataInLength = min(n, w.limit)
}
