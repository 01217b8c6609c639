// Package dm is InfiniBand Device Management (management class 0x06) for an SRP target: the
// MADs srp_daemon and ibsrpdm send to find SRP targets (IOUnitInfo, IOControllerProfile,
// ServiceEntries, InfiniBand Architecture Specification vol. 1 chapter 16.3, and T10 SRP r16a
// annex B), as typed views over the 256 bytes of a MAD; the agent's answers, as the kernel's
// LIO ib_srpt gives them (drivers/infiniband/ulp/srpt/ib_srpt.c, srpt_mgmt_method_get); and
// the discovery an initiator runs with them. It does no I/O: ib/umad carries the MADs.
package dm

import (
	"encoding/binary"
	"errors"
)

// MADSize is the size of a MAD without RMPP (IB_MGMT_MAD_SIZE).
const MADSize = 256

// Offsets of the data in the MADs used here: a Device Management MAD has a 64-byte header
// (the 24-byte common header, the RMPP header and 28 reserved bytes; IB_MGMT_DEVICE_HDR) and
// 192 bytes of data; a Subnet Administration MAD a 56-byte header (IB_MGMT_SA_HDR).
const (
	DMDataOffset = 64
	SADataOffset = 56
)

// Management classes, methods and attributes (include/rdma/ib_mad.h, ib_sa.h, and
// drivers/infiniband/ulp/srpt/ib_dm_mad.h).
const (
	ClassSubnAdm    = 0x03
	ClassDeviceMgmt = 0x06

	MethodGet     = 0x01
	MethodSet     = 0x02
	MethodGetResp = 0x81
	// methodResponse is the bit of every response method (IB_MGMT_METHOD_RESP).
	methodResponse = 0x80

	AttrClassPortInfo = 0x0001
	AttrIOUnitInfo    = 0x0010
	AttrIOCProfile    = 0x0011
	AttrSvcEntries    = 0x0012
	AttrNodeRecord    = 0x0011 // Subnet Administration
)

// Status is the MAD status field.
type Status uint16

// Statuses a Device Management agent answers (ib_dm_mad.h: the MAD common status values of
// the specification's table 115, and the class-specific NO_IOC).
const (
	StatusOK              Status = 0x0000
	StatusUnsupMethod     Status = 0x0008
	StatusUnsupMethodAttr Status = 0x000c
	StatusInvalidField    Status = 0x001c
	StatusNoIOC           Status = 0x0100
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "success"
	case StatusUnsupMethod:
		return "unsupported method"
	case StatusUnsupMethodAttr:
		return "unsupported method/attribute combination"
	case StatusInvalidField:
		return "invalid attribute or attribute modifier"
	case StatusNoIOC:
		return "no I/O controller in this slot"
	}
	return "status " + hex16(uint16(s))
}

func hex16(v uint16) string {
	const digits = "0123456789abcdef"
	return "0x" + string([]byte{digits[v>>12], digits[v>>8&15], digits[v>>4&15], digits[v&15]})
}

// ErrShort: fewer bytes than a MAD.
var ErrShort = errors.New("dm: shorter than a MAD (256 bytes)")

// MAD is a view of a MAD: the common header (struct ib_mad_hdr) and the class's data.
//
//	offset size field
//	0      1    base version (1)
//	1      1    management class
//	2      1    class version
//	3      1    method
//	4      2    status
//	6      2    class specific
//	8      8    transaction id
//	16     2    attribute id
//	18     2    reserved
//	20     4    attribute modifier
type MAD []byte

// Check reports ErrShort unless m holds a whole MAD.
func (m MAD) Check() error {
	if len(m) < MADSize {
		return ErrShort
	}
	return nil
}

func (m MAD) BaseVersion() uint8     { return m[0] }
func (m MAD) MgmtClass() uint8       { return m[1] }
func (m MAD) ClassVersion() uint8    { return m[2] }
func (m MAD) Method() uint8          { return m[3] }
func (m MAD) Status() Status         { return Status(binary.BigEndian.Uint16(m[4:])) }
func (m MAD) TID() uint64            { return binary.BigEndian.Uint64(m[8:]) }
func (m MAD) AttrID() uint16         { return binary.BigEndian.Uint16(m[16:]) }
func (m MAD) AttrMod() uint32        { return binary.BigEndian.Uint32(m[20:]) }
func (m MAD) SetMethod(v uint8)      { m[3] = v }
func (m MAD) SetStatus(s Status)     { binary.BigEndian.PutUint16(m[4:], uint16(s)) }
func (m MAD) SetTID(v uint64)        { binary.BigEndian.PutUint64(m[8:], v) }
func (m MAD) SetAttrID(v uint16)     { binary.BigEndian.PutUint16(m[16:], v) }
func (m MAD) SetAttrMod(v uint32)    { binary.BigEndian.PutUint32(m[20:], v) }
func (m MAD) DMData() []byte         { return m[DMDataOffset:MADSize] }
func (m MAD) SAData() []byte         { return m[SADataOffset:MADSize] }
func (m MAD) IsResponse() bool       { return m[3]&methodResponse != 0 }
func (m MAD) setClass(c, v uint8)    { m[0], m[1], m[2] = 1, c, v }
func (m MAD) SetSACompMask(v uint64) { binary.BigEndian.PutUint64(m[48:], v) }

// NewRequest writes a GET of attribute attr with modifier mod in class (version ver) to m,
// with transaction id tid.
func NewRequest(m MAD, class, ver uint8, method uint8, attr uint16, mod uint32, tid uint64) {
	clear(m[:MADSize])
	m.setClass(class, ver)
	m.SetMethod(method)
	m.SetTID(tid)
	m.SetAttrID(attr)
	m.SetAttrMod(mod)
}
