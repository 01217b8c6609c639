package iu

import (
	"encoding/binary"
	"fmt"
)

// SRP_RSP (struct srp_rsp, 36 bytes + response data + sense data), target to initiator; ends
// every SRP_CMD and SRP_TSK_MGMT and returns credits:
//
//	    +--------+--------+--------+--------+--------+--------+--------+--------+
//	 0  | OPCODE | SOLNOT |    reserved     |       REQUEST LIMIT DELTA         |
//	    +--------+--------+-----------------+-----------------------------------+
//	 8  |                                 TAG                                   |
//	    +-----------------+--------+--------+-----------------------------------+
//	16  |    reserved     | FLAGS  | STATUS |  DATA-OUT RESIDUAL COUNT          |
//	    +-----------------+--------+--------+-----------------------------------+
//	24  |  DATA-IN RESIDUAL COUNT           |  SENSE DATA LIST LENGTH           |
//	    +-----------------------------------+-----------------------------------+
//	32  |  RESPONSE DATA LIST LENGTH        |  RESPONSE DATA, then SENSE DATA   |
//	    +-----------------------------------+-----------------------------------+
//
// ib_srp copies sense data from 36 + RESPONSE DATA LIST LENGTH when SNSVALID is set, reports
// the DIUNDER residual (else the DOUNDER one) to SCSI and ignores the overflow flags. The first
// 16 bytes are the common header (hdr.go), with the REQUEST LIMIT DELTA as its WORD.
const (
	rspReserved2  = 16
	rspFlags      = 18
	rspStatus     = 19
	rspDataOutRes = 20
	rspDataInRes  = 24
	rspSenseLen   = 28
	rspRespLen    = 32
	rspData       = 36
)

// RspFlags is the FLAGS byte of SRP_RSP.
type RspFlags uint8

// SRP_RSP flags (SRP_RSP_FLAG_* in include/scsi/srp.h).
const (
	RSPVALID RspFlags = 1 << 0 // response data present
	SNSVALID RspFlags = 1 << 1 // sense data present
	DOOVER   RspFlags = 1 << 2 // data-out overflow: DATA-OUT RESIDUAL COUNT valid
	DOUNDER  RspFlags = 1 << 3 // data-out underflow: DATA-OUT RESIDUAL COUNT valid
	DIOVER   RspFlags = 1 << 4 // data-in overflow: DATA-IN RESIDUAL COUNT valid
	DIUNDER  RspFlags = 1 << 5 // data-in underflow: DATA-IN RESIDUAL COUNT valid
)

// RspFields is the content of an SRP_RSP.
type RspFields struct {
	// SolNot holds the SOLNT bit (byte 1).
	SolNot uint8
	// ReqLimDelta returns credits: at least 1 for the request being answered, plus any owed
	// for commands that ended without a response (aborted ones).
	ReqLimDelta uint32
	// Tag is the TAG of the SRP_CMD or SRP_TSK_MGMT being answered, unchanged.
	Tag Tag
	// Flags holds the residual flags. RSPVALID and SNSVALID are derived by Encode from whether
	// RespData and SenseData are empty, whatever is set here.
	Flags RspFlags
	// Status is the SCSI status byte.
	Status uint8
	// DataOutResCnt and DataInResCnt are the residual counts (meaningful with the matching
	// OVER/UNDER flag).
	DataOutResCnt uint32
	DataInResCnt  uint32
	// RespData is the response data (4 bytes for a task management response).
	RespData []byte
	// SenseData is the SCSI sense data.
	SenseData []byte
}

// Rsp is a view of SRP_RSP.
type Rsp []byte

// Validate checks length and opcode, that response and sense data fit in the IU, and that
// RSPVALID / SNSVALID are set exactly when the corresponding length is non-zero (the form
// Encode produces, and the form LIO and SCST send).
func (b Rsp) Validate() error {
	if err := checkIU(b, OpRsp, hdrOpcode, RspMinSize); err != nil {
		return err
	}
	resp, sense := uint64(b.RespDataLen()), uint64(b.SenseDataLen())
	if rspData+resp+sense > uint64(len(b)) {
		return fmt.Errorf("srp: SRP_RSP of %d bytes with %d bytes of response data and %d bytes of sense data: %w",
			len(b), resp, sense, ErrInconsistent)
	}
	if f := b.Flags(); (f&RSPVALID != 0) != (resp != 0) || (f&SNSVALID != 0) != (sense != 0) {
		return fmt.Errorf("srp: SRP_RSP flags %#02x disagree with response data length %d / sense data length %d: %w",
			uint8(f), resp, sense, ErrInconsistent)
	}
	return nil
}

// SolNot returns byte 1 (SOLNT in bit 0).
func (b Rsp) SolNot() uint8 { return b[hdrSolNot] }

// ReqLimDelta returns the REQUEST LIMIT DELTA.
func (b Rsp) ReqLimDelta() uint32 { return hdrWordOf(b) }

// Tag returns the TAG.
func (b Rsp) Tag() Tag { return hdrTagOf(b) }

// Flags returns the FLAGS byte.
func (b Rsp) Flags() RspFlags { return RspFlags(b[rspFlags]) }

// Status returns the SCSI STATUS.
func (b Rsp) Status() uint8 { return b[rspStatus] }

// DataOutResCnt returns the DATA-OUT RESIDUAL COUNT.
func (b Rsp) DataOutResCnt() uint32 { return binary.BigEndian.Uint32(b[rspDataOutRes:]) }

// DataInResCnt returns the DATA-IN RESIDUAL COUNT.
func (b Rsp) DataInResCnt() uint32 { return binary.BigEndian.Uint32(b[rspDataInRes:]) }

// SenseDataLen returns the SENSE DATA LIST LENGTH.
func (b Rsp) SenseDataLen() uint32 { return binary.BigEndian.Uint32(b[rspSenseLen:]) }

// RespDataLen returns the RESPONSE DATA LIST LENGTH.
func (b Rsp) RespDataLen() uint32 { return binary.BigEndian.Uint32(b[rspRespLen:]) }

// RespData returns the response data in place. Call Validate first.
func (b Rsp) RespData() []byte { return b[rspData : rspData+int(b.RespDataLen())] }

// SenseData returns the sense data in place (after the response data). Call Validate first.
func (b Rsp) SenseData() []byte {
	start := rspData + int(b.RespDataLen())
	return b[start : start+int(b.SenseDataLen())]
}

// Fields returns all fields; RespData and SenseData are copies. Call Validate first.
func (b Rsp) Fields() RspFields {
	return RspFields{
		SolNot:        b.SolNot(),
		ReqLimDelta:   b.ReqLimDelta(),
		Tag:           b.Tag(),
		Flags:         b.Flags(),
		Status:        b.Status(),
		DataOutResCnt: b.DataOutResCnt(),
		DataInResCnt:  b.DataInResCnt(),
		RespData:      cloneBytes(b.RespData()),
		SenseData:     cloneBytes(b.SenseData()),
	}
}

// RspLen returns the length of the SRP_RSP that Encode writes for f, so that the caller can
// check it against the initiator's MAXIMUM TARGET-TO-INITIATOR IU LENGTH (and truncate the
// sense data) before encoding.
func RspLen(f *RspFields) int { return rspData + len(f.RespData) + len(f.SenseData) }

// Encode writes the SRP_RSP, response data and then sense data into b and returns the IU
// length (36 + len(RespData) + len(SenseData)). It sets RSPVALID and SNSVALID from whether
// RespData and SenseData are present. It allocates nothing, so the data path can build each
// response straight in a registered send buffer; slice b to the initiator's maximum
// target-to-initiator IU length to get ErrShort instead of an oversize SEND.
func (b Rsp) Encode(f *RspFields) (int, error) {
	n := RspLen(f)
	if err := checkBuf(b, OpRsp, n); err != nil {
		return 0, err
	}
	if uint64(len(f.RespData)) > maxUint32 || uint64(len(f.SenseData)) > maxUint32 {
		return 0, fmt.Errorf("srp: SRP_RSP with %d bytes of response data and %d of sense data: %w",
			len(f.RespData), len(f.SenseData), ErrInvalidField)
	}
	return b.encode(f, n), nil
}

// EncodeStatus writes an SRP_RSP without response data or sense data (a command that ended
// with GOOD, BUSY, TASK SET FULL, ... or CHECK CONDITION without sense), which is what Encode
// writes for such fields, in five stores instead of a field at a time: this is the response to
// nearly every command. flags carries the residual flags (RSPVALID and SNSVALID are cleared);
// doRes and diRes are the residual counts. It returns RspMinSize, and panics if b is shorter,
// as encoding/binary's Put functions do.
func (b Rsp) EncodeStatus(tag Tag, delta uint32, status uint8, flags RspFlags, doRes, diRes uint32) int {
	_ = b[RspMinSize-1] // the one bounds check
	flags &^= RSPVALID | SNSVALID
	putHdr(b, OpRsp, 0, delta, tag)
	// Bytes 16-23: reserved, FLAGS, STATUS, DATA-OUT RESIDUAL COUNT.
	binary.BigEndian.PutUint64(b[rspReserved2:], uint64(flags)<<40|uint64(status)<<32|uint64(doRes))
	// Bytes 24-35: DATA-IN RESIDUAL COUNT, SENSE DATA LIST LENGTH 0, RESPONSE DATA LIST LENGTH 0.
	binary.BigEndian.PutUint64(b[rspDataInRes:], uint64(diRes)<<32)
	binary.BigEndian.PutUint32(b[rspRespLen:], 0)
	return RspMinSize
}

// TskMgmtRspSize is the length of the SRP_RSP that answers an SRP_TSK_MGMT: the fixed part
// and the 4 bytes of response data carrying the TskMgmtRspCode, no sense data.
const TskMgmtRspSize = RspMinSize + TskMgmtRspDataSize

// EncodeTskMgmt writes the SRP_RSP that answers the SRP_TSK_MGMT tag with code (RSPVALID,
// status GOOD, no residuals) and gives back delta credits; it returns TskMgmtRspSize. That
// size is fixed and below any MAXIMUM TARGET-TO-INITIATOR IU LENGTH a login accepts, so it
// cannot fail: it panics if b is shorter, as encoding/binary's Put functions do.
func (b Rsp) EncodeTskMgmt(tag Tag, delta uint32, code TskMgmtRspCode) int {
	_ = b[TskMgmtRspSize-1] // the one bounds check; panics if b is short
	rd := code.ResponseData()
	return b.encode(&RspFields{ReqLimDelta: delta, Tag: tag, RespData: rd[:]}, TskMgmtRspSize)
}

// encode writes f as an n-byte SRP_RSP (n = RspLen(f), which the caller checked fits b).
func (b Rsp) encode(f *RspFields, n int) int {
	flags := f.Flags &^ (RSPVALID | SNSVALID)
	if len(f.RespData) > 0 {
		flags |= RSPVALID
	}
	if len(f.SenseData) > 0 {
		flags |= SNSVALID
	}
	putHdr(b, OpRsp, f.SolNot, f.ReqLimDelta, f.Tag)
	clear(b[rspReserved2:rspFlags])
	b[rspFlags] = byte(flags)
	b[rspStatus] = f.Status
	binary.BigEndian.PutUint32(b[rspDataOutRes:], f.DataOutResCnt)
	binary.BigEndian.PutUint32(b[rspDataInRes:], f.DataInResCnt)
	binary.BigEndian.PutUint32(b[rspSenseLen:], uint32(len(f.SenseData)))
	binary.BigEndian.PutUint32(b[rspRespLen:], uint32(len(f.RespData)))
	copy(b[rspData:], f.RespData)
	copy(b[rspData+len(f.RespData):n], f.SenseData)
	return n
}
