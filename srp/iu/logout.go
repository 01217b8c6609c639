package iu

// SRP_I_LOGOUT (struct srp_i_logout, 16 bytes), initiator to target. ib_srp never sends it (it
// disconnects with a CM DREQ), but another initiator may:
//
//	   +--------+--------+--------+--------+--------+--------+--------+--------+
//	0  | OPCODE |                        reserved                              |
//	   +--------+--------------------------------------------------------------+
//	8  |                                 TAG                                   |
//	   +-----------------------------------------------------------------------+
//
// SRP_CRED_RSP and SRP_AER_RSP have the same layout; the three share one view, tagIU (hdr.go).

// ILogoutFields is the content of an SRP_I_LOGOUT.
type ILogoutFields struct {
	Tag Tag
}

func (ILogoutFields) opcode() Opcode { return OpILogout }

// ILogout is a view of SRP_I_LOGOUT: Validate, Tag, Fields and Encode (16 bytes, ILogoutSize).
type ILogout = tagIU[ILogoutFields]

// SRP_T_LOGOUT (struct srp_t_logout, 16 bytes), target to initiator. ib_srp only logs "Got
// target logout request"; to really end a session the target sends a CM DREQ:
//
//	   +--------+--------+--------+--------+--------+--------+--------+--------+
//	0  | OPCODE | SOLNOT |    reserved     |              REASON               |
//	   +--------+--------+-----------------+-----------------------------------+
//	8  |                                 TAG                                   |
//	   +-----------------------------------------------------------------------+
//
// It is the common header alone (hdr.go), with the REASON as its WORD.

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
	return nameOr(tLogoutReasonNames, r, "SRP_T_LOGOUT reason %d")
}

var tLogoutReasonNames = map[TLogoutReason]string{
	TLogoutNoReason: "no reason specified", TLogoutInactive: "inactive RDMA channel",
	TLogoutInvalidIUType: "invalid IU type", TLogoutUnexpectedInitiatorRsp: "initiator response without request",
	TLogoutMultiChannelAction:       "multi-channel action of a new login",
	TLogoutUnsupportedDataOutFormat: "unsupported data-out descriptor format",
	TLogoutUnsupportedDataInFormat:  "unsupported data-in descriptor format",
	TLogoutInvalidIULength:          "invalid IU length",
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
func (b TLogout) Validate() error { return checkIU(b, OpTLogout, hdrOpcode, TLogoutSize) }

// SolNot returns byte 1 (SOLNT in bit 0).
func (b TLogout) SolNot() uint8 { return b[hdrSolNot] }

// Reason returns the REASON.
func (b TLogout) Reason() TLogoutReason { return TLogoutReason(hdrWordOf(b)) }

// Tag returns the TAG.
func (b TLogout) Tag() Tag { return hdrTagOf(b) }

// Fields returns all fields. Call Validate first.
func (b TLogout) Fields() TLogoutFields {
	return TLogoutFields{SolNot: b.SolNot(), Reason: b.Reason(), Tag: b.Tag()}
}

// Encode writes the 16-byte SRP_T_LOGOUT into b and returns TLogoutSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b TLogout) Encode(f *TLogoutFields) int {
	_ = b[TLogoutSize-1] // the one bounds check; panics if b is short
	putHdr(b, OpTLogout, f.SolNot, uint32(f.Reason), f.Tag)
	return TLogoutSize
}
