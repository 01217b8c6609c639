package scsi

// handler executes one command on a logical unit. It sets the results on c: leaving Status GOOD
// means success; every failure goes through c.fail and friends.
type handler func(lu *LogicalUnit, c *Command)

// opFlags describe how the framework treats a command before its handler runs.
type opFlags uint8

const (
	// opReportsNoUA marks INQUIRY, REPORT LUNS and REQUEST SENSE, which run despite a pending
	// unit attention (SPC-4 5.14).
	opReportsNoUA opFlags = 1 << iota
	// opWritesMedium marks commands refused with WRITE PROTECTED on a read-only mapping.
	opWritesMedium
)

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
	flags opFlags
	run   handler
}

// commandTable lists every supported command. It is put together from the SPC and SBC halves so
// that each lives next to its handlers.
var commandTable = buildCommandTable(spcCommands, sbcCommands)

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
