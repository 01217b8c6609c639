package iu

import (
	"encoding/binary"
	"fmt"
)

// SRP_I_LOGOUT (struct srp_i_logout, 16 bytes), initiator to target. ib_srp never sends it (it
// disconnects with a CM DREQ), but another initiator may:
//
//	   +--------+--------+--------+--------+--------+--------+--------+--------+
//	0  | OPCODE |                        reserved                              |
//	   +--------+--------------------------------------------------------------+
//	8  |                                 TAG                                   |
//	   +-----------------------------------------------------------------------+
//
// SRP_CRED_RSP and SRP_AER_RSP have the same layout; the three share these offsets.
const (
	opTagOpcode = 0
	opTagTag    = 8
	opTagSize   = 16
)

// ILogoutFields is the content of an SRP_I_LOGOUT.
type ILogoutFields struct {
	Tag Tag
}

// ILogout is a view of SRP_I_LOGOUT.
type ILogout []byte

// Validate checks length and opcode.
func (b ILogout) Validate() error { return checkIU(b, OpILogout, opTagOpcode, ILogoutSize) }

// Tag returns the TAG.
func (b ILogout) Tag() Tag { return Tag(binary.BigEndian.Uint64(b[opTagTag:])) }

// Fields returns all fields. Call Validate first.
func (b ILogout) Fields() ILogoutFields { return ILogoutFields{Tag: b.Tag()} }

// Encode writes the 16-byte SRP_I_LOGOUT into b and returns ILogoutSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b ILogout) Encode(f *ILogoutFields) int { return encodeOpcodeTag(b, OpILogout, f.Tag) }

// encodeOpcodeTag writes the 16-byte IUs that carry nothing but an opcode and a TAG
// (SRP_I_LOGOUT, SRP_CRED_RSP, SRP_AER_RSP).
func encodeOpcodeTag(b []byte, op Opcode, tag Tag) int {
	_ = b[opTagSize-1] // the one bounds check; panics if b is short
	b[opTagOpcode] = byte(op)
	clear(b[opTagOpcode+1 : opTagTag])
	binary.BigEndian.PutUint64(b[opTagTag:], uint64(tag))
	return opTagSize
}

// SRP_T_LOGOUT (struct srp_t_logout, 16 bytes), target to initiator. ib_srp only logs "Got
// target logout request"; to really end a session the target sends a CM DREQ:
//
//	   +--------+--------+--------+--------+--------+--------+--------+--------+
//	0  | OPCODE | SOLNOT |    reserved     |              REASON               |
//	   +--------+--------+-----------------+-----------------------------------+
//	8  |                                 TAG                                   |
//	   +-----------------------------------------------------------------------+
const (
	tLogoutOpcode   = 0
	tLogoutSolNot   = 1
	tLogoutReserved = 2
	tLogoutReason   = 4
	tLogoutTag      = 8
)

// TLogoutReason is the REASON of SRP_T_LOGOUT.
type TLogoutReason uint32

// Target logout reasons (SRP r16a; names as illumos' srp.h, the Linux header has none).
// Value 5 is not defined there.
const (
	TLogoutNoReason                 TLogoutReason = 0 // no reason specified
	TLogoutInactive                 TLogoutReason = 1 // inactive RDMA channel (reclaiming resources)
	TLogoutInvalidIUType            TLogoutReason = 2 // invalid information unit type code received
	TLogoutUnexpectedInitiatorRsp   TLogoutReason = 3 // initiator response with no corresponding request
	TLogoutMultiChannelAction       TLogoutReason = 4 // disconnected by a multi-channel action of a new login
	TLogoutUnsupportedDataOutFormat TLogoutReason = 6 // unsupported data-out descriptor format
	TLogoutUnsupportedDataInFormat  TLogoutReason = 7 // unsupported data-in descriptor format
	TLogoutInvalidIULength          TLogoutReason = 8 // invalid IU length
)

// String describes the reason for logs.
func (r TLogoutReason) String() string {
	switch r {
	case TLogoutNoReason:
		return "no reason specified"
	case TLogoutInactive:
		return "inactive RDMA channel"
	case TLogoutInvalidIUType:
		return "invalid IU type"
	case TLogoutUnexpectedInitiatorRsp:
		return "initiator response without request"
	case TLogoutMultiChannelAction:
		return "multi-channel action of a new login"
	case TLogoutUnsupportedDataOutFormat:
		return "unsupported data-out descriptor format"
	case TLogoutUnsupportedDataInFormat:
		return "unsupported data-in descriptor format"
	case TLogoutInvalidIULength:
		return "invalid IU length"
	}
	return fmt.Sprintf("SRP_T_LOGOUT reason %d", uint32(r))
}

// TLogoutFields is the content of an SRP_T_LOGOUT.
type TLogoutFields struct {
	// SolNot holds the SOLNT bit (byte 1).
	SolNot uint8
	Reason TLogoutReason
	Tag    Tag
}

// TLogout is a view of SRP_T_LOGOUT.
type TLogout []byte

// Validate checks length and opcode.
func (b TLogout) Validate() error { return checkIU(b, OpTLogout, tLogoutOpcode, TLogoutSize) }

// SolNot returns byte 1 (SOLNT in bit 0).
func (b TLogout) SolNot() uint8 { return b[tLogoutSolNot] }

// Reason returns the REASON.
func (b TLogout) Reason() TLogoutReason {
	return TLogoutReason(binary.BigEndian.Uint32(b[tLogoutReason:]))
}

// Tag returns the TAG.
func (b TLogout) Tag() Tag { return Tag(binary.BigEndian.Uint64(b[tLogoutTag:])) }

// Fields returns all fields. Call Validate first.
func (b TLogout) Fields() TLogoutFields {
	return TLogoutFields{SolNot: b.SolNot(), Reason: b.Reason(), Tag: b.Tag()}
}

// Encode writes the 16-byte SRP_T_LOGOUT into b and returns TLogoutSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b TLogout) Encode(f *TLogoutFields) int {
	_ = b[TLogoutSize-1] // the one bounds check; panics if b is short
	b[tLogoutOpcode] = byte(OpTLogout)
	b[tLogoutSolNot] = f.SolNot
	clear(b[tLogoutReserved:tLogoutReason])
	binary.BigEndian.PutUint32(b[tLogoutReason:], uint32(f.Reason))
	binary.BigEndian.PutUint64(b[tLogoutTag:], uint64(f.Tag))
	return TLogoutSize
}
