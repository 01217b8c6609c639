package iu

import "encoding/binary"

// Every IU but the RDMA/CM form of the login request begins with the same 16 bytes
// (include/scsi/srp.h):
//
//	   +--------+--------+--------+--------+--------+--------+--------+--------+
//	0  | OPCODE | SOLNOT |    reserved     |              WORD                 |
//	   +--------+--------+-----------------+-----------------------------------+
//	8  |                                 TAG                                   |
//	   +-----------------------------------------------------------------------+
//
// SOLNOT is reserved in the login IUs, SRP_I_LOGOUT, SRP_CRED_RSP and SRP_AER_RSP. WORD is the
// REQUEST LIMIT DELTA of SRP_RSP, SRP_LOGIN_RSP, SRP_CRED_REQ and SRP_AER_REQ, the REASON of
// SRP_T_LOGOUT and SRP_LOGIN_REJ, BUFFMT and the descriptor counts in SRP_CMD's bytes 5-7, and
// reserved elsewhere. The views read and write these bytes through the helpers below.
const (
	hdrOpcode = 0
	hdrSolNot = 1
	hdrWord   = 4
	hdrTag    = 8
	hdrSize   = 16
)

// hdrTagOf returns the TAG of the IU b.
func hdrTagOf(b []byte) Tag { return Tag(binary.BigEndian.Uint64(b[hdrTag:])) }

// hdrWordOf returns bytes 4-7 of the IU b (REQUEST LIMIT DELTA or REASON).
func hdrWordOf(b []byte) uint32 { return binary.BigEndian.Uint32(b[hdrWord:]) }

// putHdr writes the 16-byte header in two stores, its reserved bytes 2-3 as zero. b must hold
// hdrSize bytes; the callers' own bounds check covers it.
func putHdr(b []byte, op Opcode, solNot uint8, word uint32, tag Tag) {
	binary.BigEndian.PutUint64(b[hdrOpcode:], uint64(op)<<56|uint64(solNot)<<48|uint64(word))
	binary.BigEndian.PutUint64(b[hdrTag:], uint64(tag))
}

// tagIU is the view of the 16-byte IUs that carry nothing but the header's opcode and TAG
// (SRP_I_LOGOUT, SRP_CRED_RSP, SRP_AER_RSP): F, their Fields struct, names the opcode.
type tagIU[F tagFields] []byte

// tagFields is what the Fields struct of a tagIU is: the TAG, and the IU's opcode.
type tagFields interface {
	~struct{ Tag Tag }
	opcode() Opcode
}

// Validate checks length and opcode.
func (b tagIU[F]) Validate() error {
	var f F
	return checkIU(b, f.opcode(), hdrOpcode, hdrSize)
}

// Tag returns the TAG.
func (b tagIU[F]) Tag() Tag { return hdrTagOf(b) }

// Fields returns all fields. Call Validate first.
func (b tagIU[F]) Fields() F { return F{Tag: b.Tag()} }

// Encode writes the 16-byte IU into b and returns its size. It panics if b is shorter, as
// encoding/binary's Put functions do.
func (b tagIU[F]) Encode(f *F) int {
	_ = b[hdrSize-1] // the one bounds check; panics if b is short
	putHdr(b, (*f).opcode(), 0, 0, struct{ Tag Tag }(*f).Tag)
	return hdrSize
}
