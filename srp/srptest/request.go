package srptest

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/srptarget/srptarget/srp/iu"
)

// Request is one SCSI command.
type Request struct {
	// LUN is the logical unit number, encoded as SAM does and as Linux does for LUNs it found
	// with REPORT LUNS: peripheral device addressing below 256, flat space addressing
	// (0x40 | high bits) from 256 to 16383.
	LUN uint16
	// RawLUN, when non-zero, is sent as the 8-byte LOGICAL UNIT NUMBER field (big-endian)
	// instead of LUN's encoding, for tests of LUN addressing.
	RawLUN uint64
	// CDB is the command descriptor block; bytes beyond 16 go to the additional CDB, padded to
	// a multiple of 4 (ib_srp never sends more than 16 because its max_cmd_len is 16).
	CDB []byte
	// Attr is the task attribute; ib_srp always sends iu.TaskAttrSimple (0).
	Attr iu.TaskAttr
	// Tag is the TAG to send. Zero allocates one as ib_srp does (see Channel.Submit).
	Tag iu.Tag
	// DataOut is the data-out (write) buffer. It is registered as it is, not copied: leave it
	// alone until the response arrives.
	DataOut []byte
	// DataInLen is the size of the data-in (read) buffer.
	DataInLen int
	// Layout selects the data buffer descriptors; nil does what ib_srp does.
	Layout Layout
}

// lun returns the LOGICAL UNIT NUMBER field as a big-endian integer.
func (r *Request) lun() uint64 {
	if r.RawLUN != 0 {
		return r.RawLUN
	}
	return encodeLUN(r.LUN)
}

// encodeLUN is SAM's single-level LUN encoding: peripheral device addressing (byte 0 = 0,
// byte 1 = LUN) below 256, flat space addressing (byte 0 = 0x40 | LUN >> 8) above. It is what
// Linux's int_to_scsilun produces for the LUN numbers scsilun_to_int made from REPORT LUNS.
func encodeLUN(n uint16) uint64 {
	var b [8]byte
	if n < 256 {
		b[1] = byte(n)
	} else {
		b[0] = 0x40 | byte(n>>8)&0x3F
		b[1] = byte(n)
	}
	return binary.BigEndian.Uint64(b[:])
}

// Response is the SRP_RSP that completed a Request.
type Response struct {
	// Tag is the TAG of the command (and of the response).
	Tag iu.Tag
	// Status is the SCSI status byte.
	Status uint8
	// Sense is the sense data (SNSVALID), complete; ib_srp passes on at most 96 bytes.
	Sense []byte
	// RespData is the response data (RSPVALID); SRP_RSP to a command normally has none.
	RespData []byte
	// DataIn holds the valid data-in bytes: the buffer minus the DIUNDER residual.
	DataIn []byte
	// Flags are the SRP_RSP flags (residual and validity bits).
	Flags iu.RspFlags
	// DataInResidual and DataOutResidual are the residual counts as sent (meaningful with the
	// corresponding OVER / UNDER flag).
	DataInResidual  uint32
	DataOutResidual uint32
	// ReqLimDelta is the REQUEST LIMIT DELTA of this response.
	ReqLimDelta uint32
	// IU is a copy of the whole SRP_RSP as received, for byte-level assertions.
	IU []byte
}

// Good reports whether the status is GOOD.
func (r *Response) Good() bool { return r.Status == 0 }

// Err returns nil for status GOOD and a *StatusError otherwise, so that tests can write
// require.NoError(t, rsp.Err()).
func (r *Response) Err() error {
	if r.Good() {
		return nil
	}
	e := &StatusError{Status: r.Status, Sense: r.Sense}
	e.Key, e.ASC, e.ASCQ, e.HasSense = r.SenseKey()
	return e
}

// SenseKey decodes the sense key, ASC and ASCQ from fixed (0x70/0x71) or descriptor
// (0x72/0x73) format sense data; ok is false if there is none or it is too short.
func (r *Response) SenseKey() (key, asc, ascq uint8, ok bool) {
	return senseKey(r.Sense)
}

func senseKey(s []byte) (key, asc, ascq uint8, ok bool) {
	if len(s) < 1 {
		return 0, 0, 0, false
	}
	switch s[0] & 0x7F {
	case 0x70, 0x71:
		if len(s) < 14 {
			return 0, 0, 0, false
		}
		return s[2] & 0x0F, s[12], s[13], true
	case 0x72, 0x73:
		if len(s) < 4 {
			return 0, 0, 0, false
		}
		return s[1] & 0x0F, s[2], s[3], true
	}
	return 0, 0, 0, false
}

// StatusError is a non-GOOD SCSI status, with the sense it came with.
type StatusError struct {
	Status         uint8
	Sense          []byte
	HasSense       bool
	Key, ASC, ASCQ uint8
}

func (e *StatusError) Error() string {
	if e.HasSense {
		return fmt.Sprintf("srptest: SCSI status %#02x, sense key %#x, ASC/ASCQ %#02x/%#02x", e.Status, e.Key, e.ASC, e.ASCQ)
	}
	return fmt.Sprintf("srptest: SCSI status %#02x", e.Status)
}

// LinuxTag returns the TAG that ib_srp puts on the wire for a host-order value v on a
// little-endian host (x86): ib_srp stores its u32 or u64 tag in the 8-byte field without
// byte swapping, so the bytes are v's little-endian bytes, which iu.Tag (read big-endian)
// sees byte-reversed.
func LinuxTag(v uint64) iu.Tag { return iu.Tag(bits.ReverseBytes64(v)) }

// Tag values ib_srp uses.
const (
	// tagTskMgmt is SRP_TAG_TSK_MGMT, bit 31 of the host-order tag of a task management IU.
	tagTskMgmt = 1 << 31
	// tagNoReq is SRP_TAG_NO_REQ (~0U), the task tag of LOGICAL UNIT RESET.
	tagNoReq = 0xFFFFFFFF
)

// LUNResetTaskTag is the TAG OF TASK TO BE MANAGED that ib_srp sends with LOGICAL UNIT RESET:
// SRP_TAG_NO_REQ (0xFFFFFFFF) in host byte order, i.e. bytes ff ff ff ff 00 00 00 00.
var LUNResetTaskTag = LinuxTag(tagNoReq)
