package iu

import (
	"encoding/binary"
	"fmt"
)

// SRP_LOGIN_REQ travels in the private data of the connection manager's REQ, in one of two
// layouts with the same fields:
//
// The IB CM form (struct srp_login_req, 64 bytes), sent by ib_srp for add_target with dgid=:
//
//	      +--------+--------+--------+--------+--------+--------+--------+--------+
//	   0  | OPCODE |                        reserved                              |
//	      +--------+--------------------------------------------------------------+
//	   8  |                                 TAG                                   |
//	      +-----------------------------------+-----------------------------------+
//	  16  | REQUESTED MAX IT IU LENGTH        |             reserved              |
//	      +-----------------+--------+--------+-----------------+-----------------+
//	  24  | REQ BUF FORMATS | FLAGS  | rsvd   | IMM DATA OFFSET |    reserved     |
//	      +-----------------+--------+--------+-----------------+-----------------+
//	  32  |                 INITIATOR PORT IDENTIFIER (16 bytes)                  |
//	  48  |                 TARGET PORT IDENTIFIER (16 bytes)                     |
//	      +-----------------------------------------------------------------------+
//
// The RDMA/CM form (struct srp_login_req_rdma, 56 bytes), sent for add_target with dest=:
// RDMA/CM over IB and RoCE takes 36 of the 92 bytes of REQ private data for its own header,
// so the reserved bytes were dropped and the fields reordered:
//
//	      +--------+--------+--------+--------+--------+--------+--------+--------+
//	   0  |                                 TAG                                   |
//	      +-----------------+--------+--------+-----------------------------------+
//	   8  | REQ BUF FORMATS | FLAGS  | OPCODE | REQUESTED MAX IT IU LENGTH        |
//	      +-----------------+--------+--------+-----------------------------------+
//	  16  |                 INITIATOR PORT IDENTIFIER (16 bytes)                  |
//	  32  |                 TARGET PORT IDENTIFIER (16 bytes)                     |
//	      +-----------------+-----------------------------------------------------+
//	  48  | IMM DATA OFFSET |                    reserved                         |
//	      +-----------------+-----------------------------------------------------+

// loginReqLayout holds the field offsets of one login request form.
type loginReqLayout struct {
	size, opcode, tag, itIULen, bufFmt, flags, immOff, initiator, target int
	// reserved lists [start, end) byte ranges the encoder zeroes.
	reserved [][2]int
}

var (
	loginReqIB = loginReqLayout{
		size: LoginReqSize, opcode: 0, tag: 8, itIULen: 16, bufFmt: 24, flags: 26, immOff: 28,
		initiator: 32, target: 48,
		reserved: [][2]int{{1, 8}, {20, 24}, {27, 28}, {30, 32}},
	}
	loginReqRDMA = loginReqLayout{
		size: LoginReqRDMASize, opcode: 11, tag: 0, itIULen: 12, bufFmt: 8, flags: 10, immOff: 48,
		initiator: 16, target: 32,
		reserved: [][2]int{{50, 56}},
	}
)

// LoginReqFlags is the REQ FLAGS byte of SRP_LOGIN_REQ.
type LoginReqFlags uint8

// REQ FLAGS values and bits. Bits 1:0 are the MULTI-CHANNEL ACTION (values 2 and 3 are
// reserved; rejecting them is the login engine's decision). ib_srp sends MultiChanSingle for
// its first channel and MultiChanMulti for the others, ORed with ImmedRequested when its
// use_imm_data parameter is on (the default since Linux 5.0).
const (
	MultiChanSingle     LoginReqFlags = 0    // SRP_MULTICHAN_SINGLE: terminate the nexus' other channels
	MultiChanMulti      LoginReqFlags = 1    // SRP_MULTICHAN_MULTI: add this channel to the nexus
	MultiChanActionMask LoginReqFlags = 0x03 // MULTI-CHANNEL ACTION field
	LOSOLNT             LoginReqFlags = 0x10 // solicit the SEND carrying SRP_T_LOGOUT
	CRSOLNT             LoginReqFlags = 0x20 // solicit the SEND carrying SRP_CRED_REQ
	AESOLNT             LoginReqFlags = 0x40 // solicit the SEND carrying SRP_AER_REQ
	ImmedRequested      LoginReqFlags = 0x80 // SRP_IMMED_REQUESTED (SRP-2): initiator wants immediate data
)

// MultiChanAction returns the MULTI-CHANNEL ACTION field (MultiChanSingle or MultiChanMulti;
// 2 and 3 are reserved).
func (f LoginReqFlags) MultiChanAction() LoginReqFlags { return f & MultiChanActionMask }

// LoginReqFields is the content of an SRP_LOGIN_REQ, the same for both wire forms.
type LoginReqFields struct {
	// Tag is echoed in SRP_LOGIN_RSP / SRP_LOGIN_REJ. ib_srp sends 0.
	Tag Tag
	// ReqITIULen is the largest IU the initiator wants to send (REQUESTED MAXIMUM
	// INITIATOR-TO-TARGET IU LENGTH); 8260 from ib_srp with immediate data.
	ReqITIULen uint32
	// ReqBufFmt lists the descriptor formats the initiator will use (always direct+indirect
	// from ib_srp).
	ReqBufFmt BufFmt
	// ReqFlags holds the multi-channel action, solicited-notification and IMMED bits.
	ReqFlags LoginReqFlags
	// ImmDataOffset (SRP-2) is where immediate data starts in an SRP_CMD, counted from IU byte
	// 0. Meaningful only with ImmedRequested; ib_srp sends 68.
	ImmDataOffset uint16
	// InitiatorPortID and TargetPortID together identify the I_T nexus.
	InitiatorPortID PortID
	TargetPortID    PortID
}

func (l *loginReqLayout) validate(b []byte) error {
	return checkIU(b, OpLoginReq, l.opcode, l.size)
}

func (l *loginReqLayout) fields(b []byte) LoginReqFields {
	f := LoginReqFields{
		Tag:           Tag(binary.BigEndian.Uint64(b[l.tag:])),
		ReqITIULen:    binary.BigEndian.Uint32(b[l.itIULen:]),
		ReqBufFmt:     BufFmt(binary.BigEndian.Uint16(b[l.bufFmt:])),
		ReqFlags:      LoginReqFlags(b[l.flags]),
		ImmDataOffset: binary.BigEndian.Uint16(b[l.immOff:]),
	}
	copy(f.InitiatorPortID[:], b[l.initiator:])
	copy(f.TargetPortID[:], b[l.target:])
	return f
}

func (l *loginReqLayout) encode(b []byte, f *LoginReqFields) int {
	_ = b[l.size-1] // the one bounds check; panics if b is short
	for _, r := range l.reserved {
		clear(b[r[0]:r[1]])
	}
	b[l.opcode] = byte(OpLoginReq)
	binary.BigEndian.PutUint64(b[l.tag:], uint64(f.Tag))
	binary.BigEndian.PutUint32(b[l.itIULen:], f.ReqITIULen)
	binary.BigEndian.PutUint16(b[l.bufFmt:], uint16(f.ReqBufFmt))
	b[l.flags] = byte(f.ReqFlags)
	binary.BigEndian.PutUint16(b[l.immOff:], f.ImmDataOffset)
	copy(b[l.initiator:l.initiator+16], f.InitiatorPortID[:])
	copy(b[l.target:l.target+16], f.TargetPortID[:])
	return l.size
}

// LoginReq is a view of the 64-byte IB CM form of SRP_LOGIN_REQ (struct srp_login_req).
type LoginReq []byte

// Validate checks the length (at least 64 bytes: IB CM REQ private data is 92 bytes, the rest
// is padding) and the opcode.
func (b LoginReq) Validate() error { return loginReqIB.validate(b) }

// Fields returns all fields. Call Validate first.
func (b LoginReq) Fields() LoginReqFields { return loginReqIB.fields(b) }

// Encode writes the 64-byte IB CM form into b and returns LoginReqSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b LoginReq) Encode(f *LoginReqFields) int { return loginReqIB.encode(b, f) }

// LoginReqRDMA is a view of the 56-byte RDMA/CM form of SRP_LOGIN_REQ
// (struct srp_login_req_rdma).
type LoginReqRDMA []byte

// Validate checks the length (at least 56 bytes, as LIO and SCST require) and the opcode at
// byte 11.
func (b LoginReqRDMA) Validate() error { return loginReqRDMA.validate(b) }

// Fields returns all fields. Call Validate first.
func (b LoginReqRDMA) Fields() LoginReqFields { return loginReqRDMA.fields(b) }

// Encode writes the 56-byte RDMA/CM form into b and returns LoginReqRDMASize. It panics if b
// is shorter, as encoding/binary's Put functions do.
func (b LoginReqRDMA) Encode(f *LoginReqFields) int { return loginReqRDMA.encode(b, f) }

// ParseLoginReq decodes the private data of a connection request in either form, telling them
// apart by length: exactly 56 bytes is the RDMA/CM form (the kernel hands RDMA/CM listeners
// 92 - 36 = 56 bytes over IB/RoCE, and iWARP carries exactly what the initiator sent); 64 bytes
// or more is the IB CM form (IB CM REQ private data is 92 bytes, zero-padded). A listener that
// knows its transport should call Parse[LoginReq] or Parse[LoginReqRDMA] instead.
func ParseLoginReq(b []byte) (LoginReqFields, error) {
	switch {
	case len(b) == LoginReqRDMASize:
		return Parse[LoginReqRDMA](b)
	case len(b) >= LoginReqSize:
		return Parse[LoginReq](b)
	case len(b) < LoginReqRDMASize:
		return LoginReqFields{}, fmt.Errorf("srp: SRP_LOGIN_REQ of %d bytes, need %d or %d: %w",
			len(b), LoginReqRDMASize, LoginReqSize, ErrShort)
	default:
		return LoginReqFields{}, fmt.Errorf("srp: SRP_LOGIN_REQ of %d bytes matches neither the %d-byte RDMA/CM nor the %d-byte IB CM form: %w",
			len(b), LoginReqRDMASize, LoginReqSize, ErrInconsistent)
	}
}

// SRP_LOGIN_RSP (struct srp_login_rsp, 52 bytes) is the private data of the CM REP:
//
//	    +--------+--------+--------+--------+--------+--------+--------+--------+
//	 0  | OPCODE |        reserved          |       REQUEST LIMIT DELTA         |
//	    +--------+--------------------------+-----------------------------------+
//	 8  |                                 TAG                                   |
//	    +-----------------------------------+-----------------------------------+
//	16  | MAXIMUM IT IU LENGTH              | MAXIMUM TI IU LENGTH              |
//	    +-----------------+--------+--------+-----------------------------------+
//	24  | SUP BUF FORMATS | FLAGS  |            reserved (25 bytes) ...         |
//	    +-----------------+--------+--------------------------------------------+
//	32  |                        ... reserved ...            (ends at byte 52)  |
//	    +-----------------------------------------------------------------------+
//
// The first 16 bytes are the common header (hdr.go), with the REQUEST LIMIT DELTA as its WORD.
const (
	loginRspMaxITIULen = 16
	loginRspMaxTIIULen = 20
	loginRspBufFmt     = 24
	loginRspFlags      = 26
	loginRspReserved2  = 27
)

// LoginRspFlags is the RSP FLAGS byte of SRP_LOGIN_RSP.
type LoginRspFlags uint8

// RSP FLAGS values and bits. ib_srp ignores the multi-channel result and only looks at
// LoginRspImmedSupp.
const (
	LoginRspMultiChanNoChan     LoginRspFlags = 0x0  // SRP_LOGIN_RSP_MULTICHAN_NO_CHAN: no existing channels
	LoginRspMultiChanTerminated LoginRspFlags = 0x1  // SRP_LOGIN_RSP_MULTICHAN_TERMINATED: existing channels terminated
	LoginRspMultiChanMaintained LoginRspFlags = 0x2  // SRP_LOGIN_RSP_MULTICHAN_MAINTAINED: existing channels maintained
	LoginRspMultiChanMask       LoginRspFlags = 0x3  // MULTI-CHANNEL RESULT field
	LoginRspSOLNT               LoginRspFlags = 0x10 // SOLNT: target supports solicited notification (r16a)
	LoginRspImmedSupp           LoginRspFlags = 0x80 // SRP_LOGIN_RSP_IMMED_SUPP (SRP-2): immediate data granted
)

// MultiChanResult returns the MULTI-CHANNEL RESULT field.
func (f LoginRspFlags) MultiChanResult() LoginRspFlags { return f & LoginRspMultiChanMask }

// LoginRspFields is the content of an SRP_LOGIN_RSP.
type LoginRspFields struct {
	// ReqLimDelta is the initial number of credits; it must not exceed the receives posted.
	ReqLimDelta uint32
	// Tag is the login request's TAG.
	Tag Tag
	// MaxITIULen is the largest IU the target can receive. ib_srp only warns when this is
	// smaller than what it sends, so reject a login instead of answering with less.
	MaxITIULen uint32
	// MaxTIIULen is the largest IU the target will send; ib_srp sizes its receive buffers with
	// it (once per channel, not again on reconnect).
	MaxTIIULen uint32
	// SupBufFmt is the SUPPORTED BUFFER FORMATS field.
	SupBufFmt BufFmt
	// RspFlags holds the multi-channel result, SOLNT and IMMED bits.
	RspFlags LoginRspFlags
}

// LoginRsp is a view of SRP_LOGIN_RSP.
type LoginRsp []byte

// Validate checks length and opcode.
func (b LoginRsp) Validate() error { return checkIU(b, OpLoginRsp, hdrOpcode, LoginRspSize) }

// ReqLimDelta returns the REQUEST LIMIT DELTA.
func (b LoginRsp) ReqLimDelta() uint32 { return hdrWordOf(b) }

// Tag returns the TAG.
func (b LoginRsp) Tag() Tag { return hdrTagOf(b) }

// MaxITIULen returns the MAXIMUM INITIATOR-TO-TARGET IU LENGTH.
func (b LoginRsp) MaxITIULen() uint32 { return binary.BigEndian.Uint32(b[loginRspMaxITIULen:]) }

// MaxTIIULen returns the MAXIMUM TARGET-TO-INITIATOR IU LENGTH.
func (b LoginRsp) MaxTIIULen() uint32 { return binary.BigEndian.Uint32(b[loginRspMaxTIIULen:]) }

// SupBufFmt returns the SUPPORTED BUFFER FORMATS.
func (b LoginRsp) SupBufFmt() BufFmt { return BufFmt(binary.BigEndian.Uint16(b[loginRspBufFmt:])) }

// RspFlags returns the RSP FLAGS byte.
func (b LoginRsp) RspFlags() LoginRspFlags { return LoginRspFlags(b[loginRspFlags]) }

// Fields returns all fields. Call Validate first.
func (b LoginRsp) Fields() LoginRspFields {
	return LoginRspFields{
		ReqLimDelta: b.ReqLimDelta(),
		Tag:         b.Tag(),
		MaxITIULen:  b.MaxITIULen(),
		MaxTIIULen:  b.MaxTIIULen(),
		SupBufFmt:   b.SupBufFmt(),
		RspFlags:    b.RspFlags(),
	}
}

// Encode writes the 52-byte SRP_LOGIN_RSP into b and returns LoginRspSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b LoginRsp) Encode(f *LoginRspFields) int {
	_ = b[LoginRspSize-1] // the one bounds check; panics if b is short
	putHdr(b, OpLoginRsp, 0, f.ReqLimDelta, f.Tag)
	binary.BigEndian.PutUint32(b[loginRspMaxITIULen:], f.MaxITIULen)
	binary.BigEndian.PutUint32(b[loginRspMaxTIIULen:], f.MaxTIIULen)
	binary.BigEndian.PutUint16(b[loginRspBufFmt:], uint16(f.SupBufFmt))
	b[loginRspFlags] = byte(f.RspFlags)
	clear(b[loginRspReserved2:LoginRspSize])
	return LoginRspSize
}

// SRP_LOGIN_REJ (struct srp_login_rej, 32 bytes) is the private data of the CM REJ (reason 28,
// consumer defined):
//
//	    +--------+--------+--------+--------+--------+--------+--------+--------+
//	 0  | OPCODE |        reserved          |             REASON                |
//	    +--------+--------------------------+-----------------------------------+
//	 8  |                                 TAG                                   |
//	    +-----------------------------------------------------------------------+
//	16  |                               reserved                                |
//	    +-----------------+-----------------------------------------------------+
//	24  | SUP BUF FORMATS |                    reserved                         |
//	    +-----------------+-----------------------------------------------------+
//
// The first 16 bytes are the common header (hdr.go), with the REASON as its WORD.
const (
	loginRejReserved2 = 16
	loginRejBufFmt    = 24
	loginRejReserved3 = 26
)

// LoginRejReason is the REASON of SRP_LOGIN_REJ.
type LoginRejReason uint32

// Login reject reasons (enum srp_login_rej_reason in include/scsi/srp.h). ib_srp prints a
// dedicated message for LoginRejReqITIULengthTooLarge and the number for the others.
const (
	// LoginRejUnableEstablishChannel: unable to establish RDMA channel, no reason specified.
	LoginRejUnableEstablishChannel LoginRejReason = 0x00010000
	// LoginRejInsufficientResources: insufficient RDMA channel resources.
	LoginRejInsufficientResources LoginRejReason = 0x00010001
	// LoginRejReqITIULengthTooLarge: requested maximum initiator-to-target IU length too large.
	LoginRejReqITIULengthTooLarge LoginRejReason = 0x00010002
	// LoginRejUnableAssociateChannel: unable to associate RDMA channel with specified I_T nexus
	// (LIO and SCST use it when the target port identifier is not theirs).
	LoginRejUnableAssociateChannel LoginRejReason = 0x00010003
	// LoginRejUnsupportedDescriptorFmt: one or more requested data buffer descriptor formats
	// are not supported.
	LoginRejUnsupportedDescriptorFmt LoginRejReason = 0x00010004
	// LoginRejMultiChannelUnsupported: target port does not support multiple RDMA channels per
	// I_T nexus.
	LoginRejMultiChannelUnsupported LoginRejReason = 0x00010005
	// LoginRejChannelLimitReached: RDMA channel limit reached for this initiator.
	LoginRejChannelLimitReached LoginRejReason = 0x00010006
)

// String returns the srp.h name, the meaning and the number, e.g.
// "SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE (requested maximum initiator to target IU length
// too large, 0x00010002)", so a log line can be matched with the initiator's dmesg, which only
// prints the number.
func (r LoginRejReason) String() string {
	n, ok := loginRejReasonNames[r]
	if !ok {
		return fmt.Sprintf("SRP_LOGIN_REJ reason %#08x", uint32(r))
	}
	return fmt.Sprintf("%s (%s, %#08x)", n.name, n.text, uint32(r))
}

// loginRejReasonNames are the srp.h name and the meaning of each reason.
var loginRejReasonNames = map[LoginRejReason]struct{ name, text string }{
	LoginRejUnableEstablishChannel: {"SRP_LOGIN_REJ_UNABLE_ESTABLISH_CHANNEL",
		"unable to establish RDMA channel, no reason specified"},
	LoginRejInsufficientResources: {"SRP_LOGIN_REJ_INSUFFICIENT_RESOURCES",
		"insufficient RDMA channel resources"},
	LoginRejReqITIULengthTooLarge: {"SRP_LOGIN_REJ_REQ_IT_IU_LENGTH_TOO_LARGE",
		"requested maximum initiator to target IU length too large"},
	LoginRejUnableAssociateChannel: {"SRP_LOGIN_REJ_UNABLE_ASSOCIATE_CHANNEL",
		"unable to associate RDMA channel with specified I_T nexus"},
	LoginRejUnsupportedDescriptorFmt: {"SRP_LOGIN_REJ_UNSUPPORTED_DESCRIPTOR_FMT",
		"requested data buffer descriptor format not supported"},
	LoginRejMultiChannelUnsupported: {"SRP_LOGIN_REJ_MULTI_CHANNEL_UNSUPPORTED",
		"multiple RDMA channels per I_T nexus not supported"},
	LoginRejChannelLimitReached: {"SRP_LOGIN_REJ_CHANNEL_LIMIT_REACHED",
		"RDMA channel limit reached for this initiator"},
}

// LoginRejFields is the content of an SRP_LOGIN_REJ.
type LoginRejFields struct {
	Reason LoginRejReason
	// Tag is the login request's TAG.
	Tag Tag
	// SupBufFmt is the SUPPORTED BUFFER FORMATS field (LIO and SCST send direct+indirect).
	SupBufFmt BufFmt
}

// LoginRej is a view of SRP_LOGIN_REJ.
type LoginRej []byte

// Validate checks length and opcode.
func (b LoginRej) Validate() error { return checkIU(b, OpLoginRej, hdrOpcode, LoginRejSize) }

// Reason returns the REASON.
func (b LoginRej) Reason() LoginRejReason { return LoginRejReason(hdrWordOf(b)) }

// Tag returns the TAG.
func (b LoginRej) Tag() Tag { return hdrTagOf(b) }

// SupBufFmt returns the SUPPORTED BUFFER FORMATS.
func (b LoginRej) SupBufFmt() BufFmt { return BufFmt(binary.BigEndian.Uint16(b[loginRejBufFmt:])) }

// Fields returns all fields. Call Validate first.
func (b LoginRej) Fields() LoginRejFields {
	return LoginRejFields{Reason: b.Reason(), Tag: b.Tag(), SupBufFmt: b.SupBufFmt()}
}

// Encode writes the 32-byte SRP_LOGIN_REJ into b and returns LoginRejSize. It panics if b is
// shorter, as encoding/binary's Put functions do.
func (b LoginRej) Encode(f *LoginRejFields) int {
	_ = b[LoginRejSize-1] // the one bounds check; panics if b is short
	putHdr(b, OpLoginRej, 0, uint32(f.Reason), f.Tag)
	clear(b[loginRejReserved2:loginRejBufFmt])
	binary.BigEndian.PutUint16(b[loginRejBufFmt:], uint16(f.SupBufFmt))
	clear(b[loginRejReserved3:LoginRejSize])
	return LoginRejSize
}
