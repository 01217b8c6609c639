package scsi

// handler executes one command on a logical unit. It sets the results on c: leaving Status GOOD
// means success; every failure goes through c.fail and friends.
type handler func(lu *LogicalUnit, c *Command)

// opFlags describe how the framework treats a command before its handler runs.
type opFlags uint16

const (
	// opReportsNoUA marks INQUIRY, REPORT LUNS and REQUEST SENSE, which run despite a pending
	// unit attention (SPC-4 5.14).
	opReportsNoUA opFlags = 1 << iota
	// opWritesMedium marks commands that change the medium.
	opWritesMedium
	// opChangesModePages marks MODE SELECT: the mode parameters are the logical unit's, shared
	// by every nexus (a change reaches the others as MODE PARAMETERS CHANGED), so an initiator
	// that may not write must not change them either (WCE decides whether other initiators'
	// writes reach stable storage before they complete).
	opChangesModePages
	// opPRAllowed marks the commands a persistent reservation never conflicts with (SPC-4
	// 5.13.1 table 51, SBC-3 table 13): those that only describe the logical unit, and the
	// reservation commands, whose handlers apply their own rules.
	opPRAllowed
	// opPRReads marks commands that read: a non-holder may run them under a write exclusive
	// reservation but not under an exclusive access one. A command with neither flag (nor
	// opPRByCDB) is treated as a write and conflicts with both, so that a command added
	// without a thought for reservations fails safe.
	opPRReads
	// opPRByCDB marks commands whose conflict depends on the CDB (prAllowedByCDB).
	opPRByCDB
	// opSPC2Allowed marks the commands an SPC-2 reservation held by another I_T nexus lets
	// through (SPC-2 5.5.1): INQUIRY, REPORT LUNS, REQUEST SENSE and RELEASE.
	opSPC2Allowed
	// opChangesReservations marks PERSISTENT RESERVE OUT and RESERVE(6)/(10): reservations
	// decide what every other initiator may do (a PREEMPT fences them), so an initiator that
	// may not write must not change them either.
	opChangesReservations
	// opAllowedInStandby marks the commands a logical unit runs through a target port in
	// the standby asymmetric access state (SPC-4 5.15.2.4.4): INQUIRY, REPORT LUNS, REQUEST
	// SENSE, REPORT TARGET PORT GROUPS, MODE SENSE and MODE SELECT (and persistent
	// reservations, LOG SENSE and the diagnostics, when supported). Every other command gets
	// NOT READY, LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE.
	opAllowedInStandby
	// opAllowedInUnavailable marks the commands run through a port that is unavailable or
	// transitioning (SPC-4 5.15.2.4.5 and 5.15.2.4.6): INQUIRY, REPORT LUNS, REQUEST SENSE
	// and REPORT TARGET PORT GROUPS. They are allowed in standby too.
	opAllowedInUnavailable
	// opMayBlock marks commands that can wait long even on a logical unit whose backstore never
	// blocks (NonBlocking): EXTENDED COPY reaches other logical units' backstores and copies up
	// to 256 MiB, SANITIZE waits for its operation. LogicalUnit.NonBlockingFor says no for them.
	opMayBlock
	// opUntracked marks READ and WRITE (6, 10, 12, 16), which never wait for anything a task
	// management function holds: a SIMPLE one on a logical unit that never blocks may run
	// outside the task set's list (taskSet.enterUntracked).
	opUntracked
)

// opAllowedWhenInaccessible marks the commands every access state runs.
const opAllowedWhenInaccessible = opAllowedInStandby | opAllowedInUnavailable

// opWriteProtected are the commands refused with DATA PROTECT, WRITE PROTECTED when the
// logical unit is write-protected for the command (LogicalUnit.writeProtected: a read-only
// logical unit or backstore, or a read-only mapping): everything that changes state another
// initiator shares.
//
// LIO refuses every command whose data direction is DMA_TO_DEVICE on a read-only LUN mapping
// (transport_lookup_cmd_lun, drivers/target/target_core_device.c). The data-out commands of
// this package are the writes (WRITE, WRITE AND VERIFY, WRITE SAME, COMPARE AND WRITE, UNMAP,
// WRITE ATOMIC, ORWRITE), MODE SELECT(6)/(10), VERIFY with BYTCHK 01b or 11b, and EXTENDED COPY. All but
// VERIFY and EXTENDED COPY are refused here, as in LIO. VERIFY is not: it only compares the
// data-out buffer with the medium (SBC-3 VERIFY (10)), which changes nothing and tells the
// initiator no more than READ does. EXTENDED COPY may copy out of a logical unit the initiator
// only reads; its copy manager refuses a destination write-protected for the initiator
// (xcopyrun.go), whichever logical unit received it. Deciding by what
// a command does rather than by its data direction keeps the rule in this table, where REPORT
// SUPPORTED OPERATION CODES and the tests read it, and does not depend on the transport
// reporting a data direction.
const opWriteProtected = opWritesMedium | opChangesModePages | opChangesReservations

// opInfo describes one supported command: how to run it and what REPORT SUPPORTED OPERATION
// CODES says of it.
type opInfo struct {
	name          string
	opcode        byte
	serviceAction uint16 // meaningful when hasSA
	hasSA         bool
	cdbLength     int
	// usage is the CDB USAGE DATA of REPORT SUPPORTED OPERATION CODES (SPC-4 6.35.3): cdbLength
	// bytes, the first the operation code, then a bit set for every CDB bit the device server
	// evaluates.
	usage []byte
	// ignored are the bits outside usage that the device server ignores rather than refuses:
	// obsolete fields an initiator may still set. The usage data shows them as zero, as SPC-4
	// 6.35.3 asks for a bit the device server ignores; every other bit that usage leaves out is
	// refused with INVALID FIELD IN CDB (and so are the bits of controlReserved in the CONTROL
	// byte, whose vendor specific bits every command ignores).
	ignored []cdbField
	flags   opFlags
	run     handler
}

// commandTable lists every supported command. It is put together from the SPC and SBC halves so
// that each lives next to its handlers.
var commandTable = buildCommandTable(spcCommands, sbcCommands, prCommands, copyCommands, atomicCommands, sanitizeCommands, orWriteCommands)

// opEntry holds the commands of one operation code: one without service actions, or several.
type opEntry struct {
	plain *opInfo
	bySA  []*opInfo
}

func buildCommandTable(lists ...[]opInfo) *[256]opEntry {
	var t [256]opEntry
	for _, l := range lists {
		for i := range l {
			op := &l[i]
			if len(op.usage) != op.cdbLength || op.usage[0] != op.opcode {
				panic("scsi: bad CDB usage data for " + op.name)
			}
			for _, f := range op.ignored {
				if f.off <= 0 || f.off >= op.cdbLength-1 || op.usage[f.off]&f.mask != 0 {
					panic("scsi: ignored CDB bits inside the CDB usage data of " + op.name)
				}
			}
			e := &t[op.opcode]
			if op.hasSA {
				e.bySA = append(e.bySA, op)
			} else {
				if e.plain != nil {
					panic("scsi: duplicate command " + op.name)
				}
				e.plain = op
			}
		}
	}
	return &t
}

// serviceActionOf returns the service action field of a CDB whose operation code uses one: the
// low five bits of byte 1 for the 12- and 16-byte service action commands (SPC-4 4.2.5.2).
func serviceActionOf(cdb []byte) uint16 {
	if len(cdb) < 2 {
		return 0xFFFF
	}
	return uint16(cdb[1] & 0x1F)
}

// Where the SERVICE ACTION field starts, for the field pointer: byte 1, bit 4 (bits 4:0) in every
// service action command this package supports (SPC-4 4.2.5.2; the variable-length CDBs, whose
// service action is bytes 8-9, are not supported).
const (
	saFieldOff = 1
	saFieldBit = 4
)

// lookupCommand finds the command a CDB asks for, or nil when it is not supported.
func lookupCommand(cdb []byte) *opInfo {
	e := &commandTable[cdb[0]]
	if e.plain != nil {
		return e.plain
	}
	if len(e.bySA) == 0 {
		return nil
	}
	sa := serviceActionOf(cdb)
	for _, op := range e.bySA {
		if op.serviceAction == sa {
			return op
		}
	}
	return nil
}

// lookupByOpcode finds a command by operation code and service action (REPORT SUPPORTED
// OPERATION CODES).
func lookupByOpcode(opcode byte, sa uint16, withSA bool) *opInfo {
	e := &commandTable[opcode]
	if !withSA {
		return e.plain
	}
	for _, op := range e.bySA {
		if op.serviceAction == sa {
			return op
		}
	}
	return nil
}
