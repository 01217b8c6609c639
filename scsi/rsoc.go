package scsi

import (
	"encoding/binary"
	"slices"
)

// REPORTING OPTIONS of REPORT SUPPORTED OPERATION CODES (SPC-4 table 297).
const (
	rsocAllCommands   = 0x0 // every command, all_commands parameter data
	rsocOneCommand    = 0x1 // one operation code without service actions
	rsocOneCommandSA  = 0x2 // one operation code and service action
	rsocOneCommandAny = 0x3 // one operation code, with its service action if it has any
)

// SUPPORT values of the one_command parameter data (SPC-4 table 300).
const (
	supportNotSupported = 0x1
	supportStandard     = 0x3
)

// rsocTable is commandTable. REPORT SUPPORTED OPERATION CODES is itself in the table, so it
// reaches the table through this variable, set by init, rather than directly (which would be an
// initialization cycle).
var rsocTable *[256]opEntry

func init() { rsocTable = commandTable }

// withSA returns the command of the entry with service action sa, or nil.
func (e *opEntry) withSA(sa uint16) *opInfo {
	for _, op := range e.bySA {
		if op.serviceAction == sa {
			return op
		}
	}
	return nil
}

// offers reports whether the logical unit runs op rather than answering INVALID COMMAND
// OPERATION CODE: UNMAP is in the table but exists only with thin provisioning, WRITE ATOMIC(16)
// only where the backstore makes atomic writes, REPORT TARGET
// PORT GROUPS only through a port with asymmetric access (TPGS not 00b, SPC-4 6.37), SET TARGET
// PORT GROUPS only where the states are shared (TPGS 11b, aluashare.go).
func (lu *LogicalUnit) offers(op *opInfo, c *Command) bool {
	switch {
	case op.opcode == opUnmap:
		return lu.supportsUnmap()
	case op.opcode == opWriteAtomic16:
		return lu.supportsAtomic()
	case op.opcode == opSanitize && op.serviceAction == saSanitizeBlockErase:
		return lu.supportsBlockErase()
	case op.opcode == opMaintenanceIn && op.serviceAction == saReportTargetPortGroups:
		return c.alua() != nil
	case op.opcode == opMaintenanceOut && op.serviceAction == saSetTargetPortGroups:
		return lu.sharedALUA(c)
	}
	return true
}

// commandTimeoutsDescriptorLength is the length of a command timeouts descriptor (SPC-4
// 6.35.4). Its timeouts are zero: this device server does not specify any.
const commandTimeoutsDescriptorLength = 12

// reportSupportedOpcodes handles REPORT SUPPORTED OPERATION CODES (SPC-4 6.35) from the command
// table, so it reports exactly the commands the device server runs, with their CDB usage data.
// Linux asks for single commands (reporting option 1, and 3 when there is a service action) to
// learn whether WRITE SAME is supported.
func reportSupportedOpcodes(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageReportOpcodes)) {
		return
	}
	rctd := c.CDB[2]&0x80 != 0
	option := c.CDB[2] & 0x07
	opcode := c.CDB[3]
	sa := binary.BigEndian.Uint16(c.CDB[4:6])
	alloc := int(binary.BigEndian.Uint32(c.CDB[6:10]))

	var op *opInfo
	e := &rsocTable[opcode]
	switch option {
	case rsocAllCommands:
		reportAllCommands(lu, c, rctd, alloc)
		return
	case rsocOneCommand:
		// SPC-4: an operation code with service actions cannot be asked for without one.
		if len(e.bySA) > 0 {
			c.invalidCDBField(3, -1)
			return
		}
		op = e.plain
	case rsocOneCommandSA:
		// And one without service actions cannot be asked for with one.
		if e.plain != nil {
			c.invalidCDBField(3, -1)
			return
		}
		op = e.withSA(sa)
	case rsocOneCommandAny:
		// The REQUESTED SERVICE ACTION is ignored for an operation code without service actions.
		op = e.plain
		if op == nil {
			op = e.withSA(sa)
		}
	default:
		c.invalidCDBField(2, 2)
		return
	}

	var buf [4 + 32 + commandTimeoutsDescriptorLength]byte
	if op == nil || !lu.offers(op, c) {
		// SUPPORT 001b: not supported; CDB SIZE 0 and no usage data.
		buf[1] = supportNotSupported
		c.putDataIn(buf[:4], alloc)
		return
	}
	buf[1] = supportStandard
	n := 4 + copy(buf[4:], op.usage)
	binary.BigEndian.PutUint16(buf[2:], uint16(len(op.usage)))
	if rctd {
		buf[1] |= 0x80 // CTDP
		binary.BigEndian.PutUint16(buf[n:], commandTimeoutsDescriptorLength-2)
		n += commandTimeoutsDescriptorLength
	}
	c.putDataIn(buf[:n], alloc)
}

// reportAllCommands writes the all_commands parameter data: a command descriptor for every
// supported command in operation code and service action order, each followed by a command
// timeouts descriptor when RCTD is set.
func reportAllCommands(lu *LogicalUnit, c *Command, rctd bool, alloc int) {
	w := newDataInWriter(c, alloc)
	var hdr [4]byte
	w.write(hdr[:]) // COMMAND DATA LENGTH, patched below
	var d [8 + commandTimeoutsDescriptorLength]byte
	n := 8
	if rctd {
		n += commandTimeoutsDescriptorLength
		d[5] |= 0x02 // CTDP
		binary.BigEndian.PutUint16(d[8:], commandTimeoutsDescriptorLength-2)
	}
	describe := func(op *opInfo) {
		if !lu.offers(op, c) {
			return
		}
		d[0] = op.opcode
		binary.BigEndian.PutUint16(d[2:], op.serviceAction)
		d[5] &^= 0x01
		if op.hasSA {
			d[5] |= 0x01 // SERVACTV
		}
		binary.BigEndian.PutUint16(d[6:], uint16(op.cdbLength))
		w.write(d[:n])
	}
	for i := range rsocTable {
		e := &rsocTable[i]
		if e.plain != nil {
			describe(e.plain)
		}
		if len(e.bySA) > 0 {
			sorted := slices.Clone(e.bySA)
			slices.SortFunc(sorted, func(a, b *opInfo) int { return int(a.serviceAction) - int(b.serviceAction) })
			for _, op := range sorted {
				describe(op)
			}
		}
	}
	binary.BigEndian.PutUint32(hdr[:], uint32(w.off-4))
	w.patch(0, hdr[:])
	w.finish()
}

// TMFSet is a set of task management functions, as the bits of REPORT SUPPORTED TASK MANAGEMENT
// FUNCTIONS parameter data (SPC-4 table 302): byte 0 in the high 8 bits, byte 1 in the low 8.
type TMFSet uint16

// Task management functions.
const (
	TMFAbortTask      TMFSet = 0x80 << 8 // ATS
	TMFAbortTaskSet   TMFSet = 0x40 << 8 // ATSS
	TMFClearACA       TMFSet = 0x20 << 8 // CACAS
	TMFClearTaskSet   TMFSet = 0x10 << 8 // CTSS
	TMFLogicalUnitRst TMFSet = 0x08 << 8 // LURS
	TMFQueryTask      TMFSet = 0x04 << 8 // QTS
	TMFITNexusReset   TMFSet = 0x01      // ITNRS

	// TMFLogicalUnitSupports is what this package implements: everything but CLEAR ACA (NORMACA
	// is 0, so there is never an ACA condition to clear), QUERY TASK SET and QUERY
	// ASYNCHRONOUS EVENT. A transport that cannot carry some of them narrows the set with
	// Config.TaskManagement.
	TMFLogicalUnitSupports = TMFAbortTask | TMFAbortTaskSet | TMFClearTaskSet | TMFLogicalUnitRst |
		TMFQueryTask | TMFITNexusReset
)

// reportSupportedTMFs handles REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (SPC-4 6.36): the basic
// 4-byte parameter data, or the extended 16-byte data when REPD is set, whose TMFTMOV is 0 (no
// task management timeouts are reported).
func reportSupportedTMFs(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageReportTMFs)) {
		return
	}
	repd := c.CDB[2]&0x80 != 0
	alloc := int(binary.BigEndian.Uint32(c.CDB[6:10]))
	set := TMFLogicalUnitSupports
	if lu.cfg.TaskManagement != 0 {
		set &= lu.cfg.TaskManagement
	}
	var buf [16]byte
	buf[0] = byte(set >> 8)
	buf[1] = byte(set)
	n := 4
	if repd {
		buf[3] = 0x0C // ADDITIONAL DATA LENGTH
		n = 16
	}
	c.putDataIn(buf[:n], alloc)
}
