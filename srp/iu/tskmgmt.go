package iu

import "encoding/binary"

// SRP_TSK_MGMT (struct srp_tsk_mgmt, 48 bytes), initiator to target; answered by an SRP_RSP
// whose 4-byte response data carries a TskMgmtRspCode:
//
//	    +--------+--------+--------+--------+--------+--------+--------+--------+
//	 0  | OPCODE | SOLNOT |                    reserved                         |
//	    +--------+--------+-----------------------------------------------------+
//	 8  |                                 TAG                                   |
//	    +-----------------------------------+-----------------------------------+
//	16  |             reserved              |  LOGICAL UNIT NUMBER ...          |
//	    +-----------------------------------+-----------------+--------+--------+
//	24  |  ... LOGICAL UNIT NUMBER          |    reserved     |  FUNC  |  rsvd  |
//	    +-----------------------------------+-----------------+--------+--------+
//	32  |                      TAG OF TASK TO BE MANAGED                        |
//	    +-----------------------------------------------------------------------+
//	40  |                               reserved                                |
//	    +-----------------------------------------------------------------------+
//
// The LUN is only 4-byte aligned, which is why the kernel struct is packed. The first 16 bytes
// are the common header (hdr.go), its WORD reserved.
const (
	tskMgmtReserved2 = 16
	tskMgmtLUN       = 20
	tskMgmtReserved3 = 28
	tskMgmtFunc      = 30
	tskMgmtReserved4 = 31
	tskMgmtTaskTag   = 32
	tskMgmtReserved5 = 40
)

// TskMgmtFunc is the TASK MANAGEMENT FUNCTION of SRP_TSK_MGMT.
type TskMgmtFunc uint8

// Task management functions, exactly the set SRP r16a and include/scsi/srp.h define. No SRP
// code for I_T NEXUS RESET, QUERY TASK or the other later SAM functions could be sourced (the
// SRP-2 drafts were not readable; see srp/tmf.go), so none is invented here: SRP r16a answers
// every other value with TskMgmtFuncNotSupp, and so does the target. ib_srp sends only
// TskAbortTask (SCSI error handler abort) and TskLUNReset (device reset).
const (
	TskAbortTask    TskMgmtFunc = 0x01 // SRP_TSK_ABORT_TASK
	TskAbortTaskSet TskMgmtFunc = 0x02 // SRP_TSK_ABORT_TASK_SET
	TskClearTaskSet TskMgmtFunc = 0x04 // SRP_TSK_CLEAR_TASK_SET
	TskLUNReset     TskMgmtFunc = 0x08 // SRP_TSK_LUN_RESET
	TskClearACA     TskMgmtFunc = 0x40 // SRP_TSK_CLEAR_ACA
)

// String returns the SAM name of the function.
func (f TskMgmtFunc) String() string {
	return nameOr(tskMgmtFuncNames, f, "task management function %#02x")
}

var tskMgmtFuncNames = map[TskMgmtFunc]string{
	TskAbortTask: "ABORT TASK", TskAbortTaskSet: "ABORT TASK SET", TskClearTaskSet: "CLEAR TASK SET",
	TskLUNReset: "LOGICAL UNIT RESET", TskClearACA: "CLEAR ACA",
}

// TskMgmtRspCode is the RSP CODE in byte 3 of the 4-byte response data of the SRP_RSP that
// answers an SRP_TSK_MGMT (SRP r16a table 24). ib_srp reads byte 3 when RESPONSE DATA LIST
// LENGTH is at least 4 and treats a LUN reset as successful only for TskMgmtSuccess.
type TskMgmtRspCode uint8

// Task management response codes (LIO's SRP_TSK_MGMT_*, illumos' SRP_TM_*).
const (
	TskMgmtSuccess     TskMgmtRspCode = 0x00 // task management function complete
	TskMgmtReqInvalid  TskMgmtRspCode = 0x02 // request fields invalid
	TskMgmtFuncNotSupp TskMgmtRspCode = 0x04 // task management function not supported
	TskMgmtFailed      TskMgmtRspCode = 0x05 // task management function failed
)

// TskMgmtRspDataSize is the length of the response data that carries a TskMgmtRspCode.
const TskMgmtRspDataSize = 4

// ResponseData returns the 4-byte response data for RspFields.RespData (three reserved bytes
// then the code). It returns an array so that building a TM response allocates nothing.
func (c TskMgmtRspCode) ResponseData() [TskMgmtRspDataSize]byte {
	return [TskMgmtRspDataSize]byte{0, 0, 0, byte(c)}
}

// TskMgmtFields is the content of an SRP_TSK_MGMT.
type TskMgmtFields struct {
	// SolNot holds SCSOLNT / UCSOLNT (byte 1).
	SolNot uint8
	// Tag identifies this request; echo it in the SRP_RSP.
	Tag Tag
	// LUN is the 8-byte SAM LUN as a big-endian integer (byte 20 most significant).
	LUN uint64
	// Func is the task management function.
	Func TskMgmtFunc
	// TaskTag is the TAG of the SRP_CMD to abort (ABORT TASK). For LUN RESET ib_srp stores
	// garbage here (0xFFFFFFFF in host order); ignore it for other functions.
	TaskTag Tag
}

// TskMgmt is a view of SRP_TSK_MGMT.
type TskMgmt []byte

// Validate checks length and opcode.
func (b TskMgmt) Validate() error { return checkIU(b, OpTskMgmt, hdrOpcode, TskMgmtSize) }

// SolNot returns byte 1 (SCSOLNT, UCSOLNT).
func (b TskMgmt) SolNot() uint8 { return b[hdrSolNot] }

// Tag returns the TAG of this request.
func (b TskMgmt) Tag() Tag { return hdrTagOf(b) }

// LUN returns the LOGICAL UNIT NUMBER as a big-endian integer.
func (b TskMgmt) LUN() uint64 { return binary.BigEndian.Uint64(b[tskMgmtLUN:]) }

// Func returns the TASK MANAGEMENT FUNCTION.
func (b TskMgmt) Func() TskMgmtFunc { return TskMgmtFunc(b[tskMgmtFunc]) }

// TaskTag returns the TAG OF TASK TO BE MANAGED.
func (b TskMgmt) TaskTag() Tag { return Tag(binary.BigEndian.Uint64(b[tskMgmtTaskTag:])) }

// Fields returns all fields. Call Validate first.
func (b TskMgmt) Fields() TskMgmtFields {
	return TskMgmtFields{
		SolNot:  b.SolNot(),
		Tag:     b.Tag(),
		LUN:     b.LUN(),
		Func:    b.Func(),
		TaskTag: b.TaskTag(),
	}
}

// Encode writes the 48-byte SRP_TSK_MGMT into b and returns TskMgmtSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b TskMgmt) Encode(f *TskMgmtFields) int {
	_ = b[TskMgmtSize-1] // the one bounds check; panics if b is short
	putHdr(b, OpTskMgmt, f.SolNot, 0, f.Tag)
	clear(b[tskMgmtReserved2:tskMgmtLUN])
	binary.BigEndian.PutUint64(b[tskMgmtLUN:], f.LUN)
	clear(b[tskMgmtReserved3:tskMgmtFunc])
	b[tskMgmtFunc] = byte(f.Func)
	b[tskMgmtReserved4] = 0
	binary.BigEndian.PutUint64(b[tskMgmtTaskTag:], uint64(f.TaskTag))
	clear(b[tskMgmtReserved5:TskMgmtSize])
	return TskMgmtSize
}
