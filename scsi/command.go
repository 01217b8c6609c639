package scsi

import (
	"sync/atomic"
)

// TargetPort describes the SCSI target port a nexus goes through; VPD page 0x83 reports it.
type TargetPort struct {
	// Name is the SCSI name string of the target port (SPC-4 7.8.6.11), e.g. the SRP target
	// port identifier in hex as the transport formats it.
	Name string
	// RelativeID is the RELATIVE TARGET PORT IDENTIFIER (non-zero).
	RelativeID uint16
	// GroupID is the TARGET PORT GROUP when ALUA is nil; with ALUA the group that holds
	// RelativeID.
	GroupID uint16
	// ALUA is the asymmetric access configuration the port belongs to, shared by all the
	// ports of the device server; nil: no asymmetric access (TPGS 00b).
	ALUA *ALUA
}

// Nexus identifies one I_T nexus: an initiator port talking to a target port. The transport
// creates one per (initiator port, target port) pair and reuses the same pointer for as long as
// the nexus exists, across channels and relogins: unit attentions and task management are keyed
// by it.
type Nexus struct {
	// InitiatorPort names the initiator port, for logs (the SRP initiator port identifier).
	InitiatorPort string
	// InitiatorID is the 16-byte SRP INITIATOR PORT IDENTIFIER: with Port.RelativeID it names
	// the I_T nexus that persistent reservations register, and it is what the SRP TransportID
	// of PERSISTENT RESERVE IN READ FULL STATUS carries (SPC-4 7.6.4.5).
	InitiatorID [16]byte
	// Port is the target port.
	Port *TargetPort
}

// Command is one SCSI command on its way through a logical unit. The transport owns it (and may
// pool it: call Reset before reuse), fills the inputs, calls LUNMap.Execute, and reads the results.
type Command struct {
	// Inputs.

	// Nexus is the I_T nexus the command came through.
	Nexus *Nexus
	// LUN is the eight-byte SAM-5 LUN as a big-endian number.
	LUN uint64
	// Tag identifies the command within its nexus (for ABORT TASK and QUERY TASK).
	Tag uint64
	// Attr is the task attribute.
	Attr TaskAttribute
	// CDB is the command descriptor block, including any additional CDB bytes.
	CDB []byte
	// DataOut is the data-out buffer as received from the initiator: its length is what the
	// initiator sent.
	DataOut []byte
	// DataIn is where data-in goes; its length is the most the initiator accepts.
	DataIn []byte

	// Results.

	// Status is the SCSI status.
	Status Status
	// Sense holds SenseLength bytes of sense data when Status is CHECK CONDITION.
	Sense       [MaxSenseLength]byte
	SenseLength int
	// DataInLength is how many bytes of DataIn hold data to send.
	DataInLength int
	// TransferLength is the number of bytes the CDB asks to move in its data direction (the
	// allocation length, the parameter list length, or blocks × block size). The transport
	// compares it with the buffer it was given to report overflow and underflow residuals.
	TransferLength int

	// Internal state.

	lu       *LogicalUnit // the LU running the command, nil when none
	lunMap   *LUNMap      // the map the command came through (REPORT LUNS)
	readOnly bool         // the LUN is mapped read-only for this initiator
	aborted  atomic.Bool
	queued   bool // in lu.tasks
	running  bool // allowed to run
	prev     *Command
	next     *Command
	wake     chan struct{}
	io       asyncIO // the asynchronous course (async.go)
}

// Reset clears the results and internal state so that a pooled Command can be reused. It keeps
// the buffers and the wake channel.
func (c *Command) Reset() {
	wake := c.wake
	*c = Command{DataIn: c.DataIn[:0], DataOut: c.DataOut[:0]}
	c.wake = wake
	if wake != nil {
		select {
		case <-wake:
		default:
		}
	}
}

// Aborted reports whether a task management function aborted the command. The transport must not
// send a response for an aborted command, nor touch its initiator memory again.
func (c *Command) Aborted() bool { return c.aborted.Load() }

// SenseData returns the sense data of the command, empty unless CHECK CONDITION.
func (c *Command) SenseData() []byte { return c.Sense[:c.SenseLength] }

// DataInResidual compares what the CDB asked for with the data-in buffer. An overflow is data the
// initiator's buffer was too small for (SRP DIOVER); otherwise n is the part of the buffer left
// unused (SRP DIUNDER).
func (c *Command) DataInResidual() (overflow bool, n int) {
	if c.TransferLength > len(c.DataIn) {
		return true, c.TransferLength - len(c.DataIn)
	}
	return false, len(c.DataIn) - c.DataInLength
}

// DataOutResidual compares what the CDB asked for with the data-out the initiator sent: an
// overflow (DOOVER) when it sent too little, an underflow (DOUNDER) when it sent more.
func (c *Command) DataOutResidual() (overflow bool, n int) {
	if c.TransferLength > len(c.DataOut) {
		return true, c.TransferLength - len(c.DataOut)
	}
	return false, len(c.DataOut) - c.TransferLength
}

// fault is why a decoder refused a command: the reason and, when the reason names a field, the
// field pointer of the sense-key specific bytes. The zero fault (reason ReasonNone) means the
// decoder found nothing wrong. Decoders return a fault instead of failing the command
// themselves, so that every handler shows in one place where it fails: the idiom is
//
//	if c.failOn(checkSomething(c.CDB)) {
//		return
//	}
//
// It is turned into SenseInfo only when the command fails.
type fault uint32

// The layout of a fault: the reason in the low byte, then the field pointer. A fault is one
// integer so that returning one through the decoders costs a register: a struct of small
// fields was stored byte by byte and reloaded whole, a store-forwarding stall on every command.
const (
	faultHasField fault = 1 << 8  // the field pointer is valid
	faultInCDB    fault = 1 << 9  // it points into the CDB, else into the parameter list
	faultHasBit   fault = 1 << 10 // the bit pointer is valid
	faultBitShift       = 11      // 3 bits
	faultPtrShift       = 16      // 16 bits: the byte
)

// faultOf is a fault with reason and no field pointer.
func faultOf(r Reason) fault { return fault(r) }

// reason is why the command fails; ReasonNone for the zero fault.
func (f fault) reason() Reason { return Reason(f & 0xFF) }

// senseInfo is the sense data detail of f: its field pointer, if it has one.
func (f fault) senseInfo() SenseInfo {
	if f&faultHasField == 0 {
		return SenseInfo{}
	}
	return SenseInfo{FieldPointerValid: true, InCDB: f&faultInCDB != 0, FieldPointer: uint16(f >> faultPtrShift),
		BitPointerValid: f&faultHasBit != 0, BitPointer: uint8(f>>faultBitShift) & 7}
}

// cdbFieldFault is INVALID FIELD IN CDB pointing at byte byteOff (and bit, when bit >= 0) of the
// CDB, so that the initiator's log names the offending field.
func cdbFieldFault(byteOff int, bit int) fault {
	return fieldFault(ReasonInvalidFieldInCDB, true, byteOff, bit)
}

// paramFieldFault is INVALID FIELD IN PARAMETER LIST pointing at byte byteOff (and bit, when
// bit >= 0) of the parameter list.
func paramFieldFault(byteOff int, bit int) fault {
	return fieldFault(ReasonInvalidFieldInParameterList, false, byteOff, bit)
}

// fieldFault is reason with the field pointer of the sense-key specific bytes (SPC-4 4.5.2.4.2)
// on byteOff and, when bit >= 0, bit, in the CDB (inCDB) or the parameter list.
func fieldFault(reason Reason, inCDB bool, byteOff int, bit int) fault {
	f := fault(reason) | faultHasField | fault(uint16(byteOff))<<faultPtrShift
	if inCDB {
		f |= faultInCDB
	}
	if bit >= 0 {
		f |= faultHasBit | fault(bit&7)<<faultBitShift
	}
	return f
}

// fail ends the command with CHECK CONDITION for reason, in the LU's sense format.
func (c *Command) fail(reason Reason) { c.failInfo(reason, SenseInfo{}) }

// failWith ends the command with CHECK CONDITION for the fault a decoder returned.
func (c *Command) failWith(f fault) { c.failInfo(f.reason(), f.senseInfo()) }

// failOn ends the command with CHECK CONDITION for f when f is a fault, and reports whether it
// did: true means the command failed.
func (c *Command) failOn(f fault) bool {
	if f == 0 {
		return false
	}
	c.failWith(f)
	return true
}

// failInfo ends the command with CHECK CONDITION for reason with detail.
func (c *Command) failInfo(reason Reason, info SenseInfo) {
	descriptor := c.lu != nil && c.lu.descriptorSense()
	c.Status = StatusCheckCondition
	c.SenseLength = BuildSense(c.Sense[:], descriptor, reason, info)
	c.DataInLength = 0
}

// invalidCDBField ends the command with cdbFieldFault(byteOff, bit).
func (c *Command) invalidCDBField(byteOff int, bit int) { c.failWith(cdbFieldFault(byteOff, bit)) }

// invalidParamField ends the command with paramFieldFault(byteOff, bit).
func (c *Command) invalidParamField(byteOff int, bit int) {
	c.failWith(paramFieldFault(byteOff, bit))
}

// putDataIn copies data (the full parameter data of a command, whose header lengths describe all
// of it) into DataIn, truncated to the allocation length and to the buffer. TransferLength
// becomes what the CDB lets the device server return, so that a buffer smaller than that shows
// as an overflow and a larger one as an underflow.
func (c *Command) putDataIn(data []byte, allocationLength int) {
	n := min(len(data), allocationLength)
	c.TransferLength = n
	c.DataInLength = copy(c.DataIn, data[:n])
}
