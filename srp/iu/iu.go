package iu

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Opcode is byte 0 of every IU (byte 11 of the RDMA/CM login request). Its two top bits give
// the direction: 00 initiator request, 11 target response, 10 target request, 01 initiator
// response.
type Opcode uint8

// IU opcodes, as include/scsi/srp.h names them.
const (
	OpLoginReq Opcode = 0x00 // SRP_LOGIN_REQ
	OpTskMgmt  Opcode = 0x01 // SRP_TSK_MGMT
	OpCmd      Opcode = 0x02 // SRP_CMD
	OpILogout  Opcode = 0x03 // SRP_I_LOGOUT
	OpLoginRsp Opcode = 0xC0 // SRP_LOGIN_RSP
	OpRsp      Opcode = 0xC1 // SRP_RSP
	OpLoginRej Opcode = 0xC2 // SRP_LOGIN_REJ
	OpTLogout  Opcode = 0x80 // SRP_T_LOGOUT
	OpCredReq  Opcode = 0x81 // SRP_CRED_REQ
	OpAerReq   Opcode = 0x82 // SRP_AER_REQ
	OpCredRsp  Opcode = 0x41 // SRP_CRED_RSP
	OpAerRsp   Opcode = 0x42 // SRP_AER_RSP
)

// opcodeNames are the standard names of the opcodes.
var opcodeNames = map[Opcode]string{
	OpLoginReq: "SRP_LOGIN_REQ", OpTskMgmt: "SRP_TSK_MGMT", OpCmd: "SRP_CMD", OpILogout: "SRP_I_LOGOUT",
	OpLoginRsp: "SRP_LOGIN_RSP", OpRsp: "SRP_RSP", OpLoginRej: "SRP_LOGIN_REJ", OpTLogout: "SRP_T_LOGOUT",
	OpCredReq: "SRP_CRED_REQ", OpAerReq: "SRP_AER_REQ", OpCredRsp: "SRP_CRED_RSP", OpAerRsp: "SRP_AER_RSP",
}

// String returns the standard name (SRP_CMD, ...) so that logs match the kernel's messages.
func (o Opcode) String() string { return nameOr(opcodeNames, o, "SRP opcode %#02x") }

// nameOr is the String of the enumerations of this package: the name names gives v, or else v
// printed with the format unknown.
func nameOr[T ~uint8 | ~uint32](names map[T]string, v T, unknown string) string {
	if s, ok := names[v]; ok {
		return s
	}
	return fmt.Sprintf(unknown, uint64(v))
}

// IU sizes in bytes (fixed sizes, or the fixed part of variable-length IUs), from the
// compile-time size checks in ib_srp.c and the struct definitions in include/scsi/srp.h.
const (
	LoginReqSize     = 64 // struct srp_login_req (IB CM private data)
	LoginReqRDMASize = 56 // struct srp_login_req_rdma (RDMA/CM private data)
	LoginRspSize     = 52 // struct srp_login_rsp
	LoginRejSize     = 32 // struct srp_login_rej
	ILogoutSize      = 16 // struct srp_i_logout
	TLogoutSize      = 16 // struct srp_t_logout
	TskMgmtSize      = 48 // struct srp_tsk_mgmt
	CmdMinSize       = 48 // struct srp_cmd up to and including the 16-byte CDB
	RspMinSize       = 36 // struct srp_rsp without response and sense data
	CredReqSize      = 16 // struct srp_cred_req
	CredRspSize      = 16 // struct srp_cred_rsp
	AerReqMinSize    = 36 // struct srp_aer_req without sense data
	AerRspSize       = 16 // struct srp_aer_rsp
)

// Errors returned by the decoders and encoders, always wrapped with context (test them with
// errors.Is).
var (
	// ErrShort: the IU (or the buffer given to a variable-size encoder) is shorter than its
	// layout needs.
	ErrShort = errors.New("srp: IU too short")
	// ErrOpcode: byte 0 (byte 11 of the RDMA/CM login) is not the opcode of the expected IU.
	ErrOpcode = errors.New("srp: unexpected opcode")
	// ErrInconsistent: length fields, descriptor counts or flags disagree with each other or with
	// the IU length.
	ErrInconsistent = errors.New("srp: inconsistent IU")
	// ErrUnsupportedFormat: a data buffer descriptor format that is reserved, not allowed in
	// that direction, or (immediate data) not negotiated at login. The target answers it with
	// SRP_T_LOGOUT reason 6/7 or a CHECK CONDITION, not with a protocol failure.
	ErrUnsupportedFormat = errors.New("srp: unsupported data buffer descriptor format")
	// ErrInvalidField: an encoder input that cannot be represented on the wire.
	ErrInvalidField = errors.New("srp: field cannot be encoded")
)

// Tag is the 8-byte TAG of an IU, read as a big-endian integer. SRP treats it as opaque: the
// target only compares it (ABORT TASK's TAG OF TASK TO BE MANAGED) and echoes it in the
// response. ib_srp stores a host-endian integer in it, so the numeric value printed here is not
// the initiator's tag number; the bytes round-trip unchanged because encoders write it back
// big-endian.
type Tag uint64

// PortID is a 16-byte SRP initiator or target port identifier. In the r16a format (the one
// Linux uses unless the target reports I/O class 0xff00) the first 8 bytes are an identifier
// extension and the last 8 an EUI-64 (port GUID or IOC GUID).
type PortID [16]byte

// IDExt returns the first 8 bytes (identifier extension) as a big-endian integer.
func (p PortID) IDExt() uint64 { return binary.BigEndian.Uint64(p[0:8]) }

// GUID returns the last 8 bytes (port or IOC GUID) as a big-endian integer.
func (p PortID) GUID() uint64 { return binary.BigEndian.Uint64(p[8:16]) }

// String prints the identifier as 0x followed by 32 hex digits, as LIO and SCST log it.
func (p PortID) String() string {
	return fmt.Sprintf("0x%016x%016x", p.IDExt(), p.GUID())
}

// BufFmt is the 16-bit REQUIRED / SUPPORTED BUFFER FORMATS field of the login IUs.
type BufFmt uint16

// Buffer format bits (SRP_BUF_FORMAT_*). ib_srp always requires both.
const (
	BufFormatDirect   BufFmt = 1 << 1 // SRP_BUF_FORMAT_DIRECT: direct data buffer descriptors
	BufFormatIndirect BufFmt = 1 << 2 // SRP_BUF_FORMAT_INDIRECT: indirect data buffer descriptors
)

// Solicited-notification bits. The requester asks the peer to set the IB solicited-event bit
// on the SEND that answers it. ib_srp never sets them and ignores them.
const (
	// SOLNT is bit 0 of byte 1 of SRP_RSP, SRP_T_LOGOUT, SRP_CRED_REQ and SRP_AER_REQ.
	SOLNT uint8 = 1 << 0
	// SCSOLNT (byte 1 of SRP_CMD and SRP_TSK_MGMT): solicit on successful completion.
	SCSOLNT uint8 = 1 << 1
	// UCSOLNT (byte 1 of SRP_CMD and SRP_TSK_MGMT): solicit on unsuccessful completion.
	UCSOLNT uint8 = 1 << 2
)

// View is the decoding half of the contract every IU view meets: a []byte that validates
// untrusted input and decodes into its Fields struct F. SRP_CMD is the exception: its Fields
// needs the immediate data offset granted at login.
type View[F any] interface {
	~[]byte
	Validate() error
	Fields() F
}

// The views that meet View, checked at compile time by instantiating Parse with each.
var (
	_ = Parse[LoginReq]
	_ = Parse[LoginReqRDMA]
	_ = Parse[LoginRsp]
	_ = Parse[LoginRej]
	_ = Parse[TskMgmt]
	_ = Parse[Rsp]
	_ = Parse[ILogout]
	_ = Parse[TLogout]
	_ = Parse[CredReq]
	_ = Parse[CredRsp]
	_ = Parse[AerReq]
	_ = Parse[AerRsp]
)

// Parse validates b as the IU V and decodes it: iu.Parse[iu.TLogout](b). Variable parts of
// the fields (sense data) are copies, so the result outlives b. SRP_CMD, whose decoding needs
// the immediate data offset of its login, is decoded with Cmd.Fields; the login request, whose
// form depends on the transport, with ParseLoginReq or Parse[LoginReq] / Parse[LoginReqRDMA].
func Parse[V View[F], F any](b []byte) (F, error) {
	v := V(b)
	if err := v.Validate(); err != nil {
		var zero F
		return zero, err
	}
	return v.Fields(), nil
}

// checkIU is the common length and opcode check of every decoder.
func checkIU(b []byte, op Opcode, opAt, size int) error {
	if len(b) < size {
		return fmt.Errorf("srp: %v of %d bytes, need %d: %w", op, len(b), size, ErrShort)
	}
	if got := Opcode(b[opAt]); got != op {
		return fmt.Errorf("srp: opcode %v where %v expected: %w", got, op, ErrOpcode)
	}
	return nil
}

// checkBuf is the common output-buffer check of every encoder.
func checkBuf(b []byte, op Opcode, size int) error {
	if len(b) < size {
		return fmt.Errorf("srp: encoding %v needs %d bytes, buffer has %d: %w", op, size, len(b), ErrShort)
	}
	return nil
}
