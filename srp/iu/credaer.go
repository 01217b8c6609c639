package iu

import (
	"encoding/binary"
	"fmt"
)

// SRP_CRED_REQ (struct srp_cred_req, 16 bytes), target to initiator: grants credits outside an
// SRP_RSP. ib_srp adds the delta and answers at once with SRP_CRED_RSP, which consumes no
// credit (so the target must keep a spare receive for it):
//
//	   +--------+--------+--------+--------+--------+--------+--------+--------+
//	0  | OPCODE | SOLNOT |    reserved     |       REQUEST LIMIT DELTA         |
//	   +--------+--------+-----------------+-----------------------------------+
//	8  |                                 TAG                                   |
//	   +-----------------------------------------------------------------------+
//
// SRP_CRED_RSP and SRP_AER_RSP (16 bytes), initiator to target, are an opcode, 7 reserved
// bytes and the TAG of the request they answer, laid out as SRP_I_LOGOUT (logout.go).
//
// SRP_CRED_REQ is the common header alone (hdr.go), with the REQUEST LIMIT DELTA as its WORD.

// CredReqFields is the content of an SRP_CRED_REQ.
type CredReqFields struct {
	// SolNot holds the SOLNT bit (byte 1).
	SolNot      uint8
	ReqLimDelta uint32
	// Tag is chosen by the target; the SRP_CRED_RSP echoes it.
	Tag Tag
}

// CredReq is a view of SRP_CRED_REQ.
type CredReq []byte

// Validate checks length and opcode.
func (b CredReq) Validate() error { return checkIU(b, OpCredReq, hdrOpcode, CredReqSize) }

// SolNot returns byte 1 (SOLNT in bit 0).
func (b CredReq) SolNot() uint8 { return b[hdrSolNot] }

// ReqLimDelta returns the REQUEST LIMIT DELTA.
func (b CredReq) ReqLimDelta() uint32 { return hdrWordOf(b) }

// Tag returns the TAG.
func (b CredReq) Tag() Tag { return hdrTagOf(b) }

// Fields returns all fields. Call Validate first.
func (b CredReq) Fields() CredReqFields {
	return CredReqFields{SolNot: b.SolNot(), ReqLimDelta: b.ReqLimDelta(), Tag: b.Tag()}
}

// Encode writes the 16-byte SRP_CRED_REQ into b and returns CredReqSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b CredReq) Encode(f *CredReqFields) int {
	_ = b[CredReqSize-1] // the one bounds check; panics if b is short
	putHdr(b, OpCredReq, f.SolNot, f.ReqLimDelta, f.Tag)
	return CredReqSize
}

// CredRspFields is the content of an SRP_CRED_RSP.
type CredRspFields struct {
	Tag Tag
}

func (CredRspFields) opcode() Opcode { return OpCredRsp }

// CredRsp is a view of SRP_CRED_RSP: Validate, Tag (of the SRP_CRED_REQ being answered), Fields
// and Encode (16 bytes, CredRspSize).
type CredRsp = tagIU[CredRspFields]

// SRP_AER_REQ (struct srp_aer_req, 36 bytes + sense data), target to initiator: an
// asynchronous event report with sense data for one LUN. ib_srp only logs "ignoring AER for
// LUN ..." and answers with SRP_AER_RSP; use unit attentions to tell Linux about changes:
//
//	    +--------+--------+--------+--------+--------+--------+--------+--------+
//	 0  | OPCODE | SOLNOT |    reserved     |       REQUEST LIMIT DELTA         |
//	    +--------+--------+-----------------+-----------------------------------+
//	 8  |                                 TAG                                   |
//	    +-----------------------------------+-----------------------------------+
//	16  |             reserved              |  LOGICAL UNIT NUMBER ...          |
//	    +-----------------------------------+-----------------------------------+
//	24  |  ... LOGICAL UNIT NUMBER          |  SENSE DATA LIST LENGTH           |
//	    +-----------------------------------+-----------------------------------+
//	32  |             reserved              |  SENSE DATA ...                   |
//	    +-----------------------------------+-----------------------------------+
//
// The first 16 bytes are the common header (hdr.go), with the REQUEST LIMIT DELTA as its WORD.
const (
	aerReqReserved2 = 16
	aerReqLUN       = 20
	aerReqSenseLen  = 28
	aerReqReserved3 = 32
	aerReqSense     = 36
)

// AerReqFields is the content of an SRP_AER_REQ.
type AerReqFields struct {
	// SolNot holds the SOLNT bit (byte 1).
	SolNot      uint8
	ReqLimDelta uint32
	Tag         Tag
	// LUN is the 8-byte SAM LUN as a big-endian integer.
	LUN uint64
	// SenseData is the SCSI sense data (its length is the SENSE DATA LIST LENGTH).
	SenseData []byte
}

// AerReq is a view of SRP_AER_REQ.
type AerReq []byte

// Validate checks length and opcode, and that the sense data fits in the IU.
func (b AerReq) Validate() error {
	if err := checkIU(b, OpAerReq, hdrOpcode, AerReqMinSize); err != nil {
		return err
	}
	if n := uint64(b.SenseDataLen()); n > uint64(len(b)-aerReqSense) {
		return fmt.Errorf("srp: SRP_AER_REQ of %d bytes with %d bytes of sense data: %w",
			len(b), n, ErrInconsistent)
	}
	return nil
}

// SolNot returns byte 1 (SOLNT in bit 0).
func (b AerReq) SolNot() uint8 { return b[hdrSolNot] }

// ReqLimDelta returns the REQUEST LIMIT DELTA.
func (b AerReq) ReqLimDelta() uint32 { return hdrWordOf(b) }

// Tag returns the TAG.
func (b AerReq) Tag() Tag { return hdrTagOf(b) }

// LUN returns the LOGICAL UNIT NUMBER as a big-endian integer.
func (b AerReq) LUN() uint64 { return binary.BigEndian.Uint64(b[aerReqLUN:]) }

// SenseDataLen returns the SENSE DATA LIST LENGTH.
func (b AerReq) SenseDataLen() uint32 { return binary.BigEndian.Uint32(b[aerReqSenseLen:]) }

// SenseData returns the sense data in place. Call Validate first.
func (b AerReq) SenseData() []byte { return b[aerReqSense : aerReqSense+int(b.SenseDataLen())] }

// Fields returns all fields; SenseData is a copy. Call Validate first.
func (b AerReq) Fields() AerReqFields {
	return AerReqFields{
		SolNot:      b.SolNot(),
		ReqLimDelta: b.ReqLimDelta(),
		Tag:         b.Tag(),
		LUN:         b.LUN(),
		SenseData:   cloneBytes(b.SenseData()),
	}
}

// Encode writes the SRP_AER_REQ with its sense data into b and returns its length
// (36 + len(f.SenseData)).
func (b AerReq) Encode(f *AerReqFields) (int, error) {
	n := aerReqSense + len(f.SenseData)
	if err := checkBuf(b, OpAerReq, n); err != nil {
		return 0, err
	}
	if uint64(len(f.SenseData)) > maxUint32 {
		return 0, fmt.Errorf("srp: SRP_AER_REQ sense data of %d bytes: %w", len(f.SenseData), ErrInvalidField)
	}
	putHdr(b, OpAerReq, f.SolNot, f.ReqLimDelta, f.Tag)
	clear(b[aerReqReserved2:aerReqLUN])
	binary.BigEndian.PutUint64(b[aerReqLUN:], f.LUN)
	binary.BigEndian.PutUint32(b[aerReqSenseLen:], uint32(len(f.SenseData)))
	clear(b[aerReqReserved3:aerReqSense])
	copy(b[aerReqSense:n], f.SenseData)
	return n, nil
}

// AerRspFields is the content of an SRP_AER_RSP.
type AerRspFields struct {
	Tag Tag
}

func (AerRspFields) opcode() Opcode { return OpAerRsp }

// AerRsp is a view of SRP_AER_RSP: Validate, Tag (of the SRP_AER_REQ being answered), Fields
// and Encode (16 bytes, AerRspSize).
type AerRsp = tagIU[AerRspFields]

const maxUint32 = 1<<32 - 1

// cloneBytes copies b; nil and empty both give nil so that decoded Fields compare equal to the
// Fields they were encoded from when a variable part is absent.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
