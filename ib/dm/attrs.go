package dm

import (
	"bytes"
	"encoding/binary"
)

// Sizes of the attributes (drivers/infiniband/ulp/srpt/ib_dm_mad.h, include/rdma/ib_mad.h).
const (
	ClassPortInfoSize = 72
	IOUnitInfoSize    = 132
	IOCProfileSize    = 128
	SvcEntrySize      = 48
	// SvcEntriesPerMAD is how many service entries one ServiceEntries MAD carries.
	SvcEntriesPerMAD = 4
	// MaxSlots is the number of I/O controller slots of an I/O unit.
	MaxSlots = 16
)

// SRP's values in an IOControllerProfile (T10 SRP r16a B.7, table B.7; ib_srpt.c and
// srp_daemon.h).
const (
	IOClassSRP       = 0x0100 // SRP_REV16A_IB_IO_CLASS
	IOSubclassSRP    = 0x609e // SRP_IO_SUBCLASS
	ProtocolSRP      = 0x0108 // SRP_PROTOCOL
	ProtocolVersion  = 0x0001 // SRP_PROTOCOL_VERSION
	ServiceNameSRP   = "SRP.T10:"
	opCapSendToIOC   = 0x01
	opCapSendFromIOC = 0x02
	opCapRDMARead    = 0x08 // RDMA READ from the IOC
	opCapRDMAWrite   = 0x20 // RDMA WRITE from the IOC
	// OpCapSRP is what ib_srpt advertises: SEND both ways, RDMA READ and WRITE by the target.
	OpCapSRP = opCapSendToIOC | opCapSendFromIOC | opCapRDMARead | opCapRDMAWrite
)

// ClassPortInfo is a view of struct ib_class_port_info; an agent fills only the versions and
// the response time value (ib_srpt: srpt_get_class_port_info).
type ClassPortInfo []byte

func (c ClassPortInfo) BaseVersion() uint8  { return c[0] }
func (c ClassPortInfo) ClassVersion() uint8 { return c[1] }

// RespTime is the response time value: the agent answers within 4.096 µs × 2^RespTime.
func (c ClassPortInfo) RespTime() uint8 { return uint8(binary.BigEndian.Uint32(c[4:]) & 0x1f) }

func putClassPortInfo(c ClassPortInfo, respTime uint8) {
	c[0], c[1] = 1, 1
	binary.BigEndian.PutUint32(c[4:], uint32(respTime&0x1f))
}

// IOUnitInfo is a view of struct ib_dm_iou_info: change id, the number of controller slots,
// and a nibble per slot (1 present, 0 empty), slot 1 in the high nibble of the first byte.
type IOUnitInfo []byte

func (u IOUnitInfo) ChangeID() uint16      { return binary.BigEndian.Uint16(u[0:]) }
func (u IOUnitInfo) MaxControllers() uint8 { return u[2] }

// Slot returns the nibble of slot n (1..128).
func (u IOUnitInfo) Slot(n int) uint8 {
	b := u[4+(n-1)/2]
	if n%2 == 1 {
		return b >> 4
	}
	return b & 0xf
}

func (u IOUnitInfo) setSlot(n int, v uint8) {
	i := 4 + (n-1)/2
	if n%2 == 1 {
		u[i] = u[i]&0x0f | v<<4
	} else {
		u[i] = u[i]&0xf0 | v&0xf
	}
}

// IOCProfile is a view of struct ib_dm_ioc_profile:
//
//	0 guid, 8 vendor id, 12 device id, 16 device version, 20 subsystem vendor id,
//	24 subsystem device id, 28 io class, 30 io subclass, 32 protocol, 34 protocol version,
//	40 send queue depth, 43 RDMA read depth, 44 send size, 48 RDMA size, 52 operation
//	capability mask, 54 service entries, 64 id string (64 bytes)
type IOCProfile []byte

func (p IOCProfile) GUID() uint64            { return binary.BigEndian.Uint64(p[0:]) }
func (p IOCProfile) VendorID() uint32        { return binary.BigEndian.Uint32(p[8:]) }
func (p IOCProfile) DeviceID() uint32        { return binary.BigEndian.Uint32(p[12:]) }
func (p IOCProfile) DeviceVersion() uint16   { return binary.BigEndian.Uint16(p[16:]) }
func (p IOCProfile) IOClass() uint16         { return binary.BigEndian.Uint16(p[28:]) }
func (p IOCProfile) IOSubclass() uint16      { return binary.BigEndian.Uint16(p[30:]) }
func (p IOCProfile) Protocol() uint16        { return binary.BigEndian.Uint16(p[32:]) }
func (p IOCProfile) ProtocolVersion() uint16 { return binary.BigEndian.Uint16(p[34:]) }
func (p IOCProfile) SendQueueDepth() uint16  { return binary.BigEndian.Uint16(p[40:]) }
func (p IOCProfile) RDMAReadDepth() uint8    { return p[43] }
func (p IOCProfile) SendSize() uint32        { return binary.BigEndian.Uint32(p[44:]) }
func (p IOCProfile) RDMASize() uint32        { return binary.BigEndian.Uint32(p[48:]) }
func (p IOCProfile) OpCapMask() uint8        { return p[52] }
func (p IOCProfile) NumSvcEntries() uint8    { return p[54] }
func (p IOCProfile) IDString() string        { return cString(p[64:128]) }

// SvcEntry is a view of struct ib_dm_svc_entry: a 40-byte name and the service ID.
type SvcEntry []byte

func (e SvcEntry) Name() string { return cString(e[0:40]) }
func (e SvcEntry) ID() uint64   { return binary.BigEndian.Uint64(e[40:]) }

func putSvcEntry(e SvcEntry, name string, id uint64) {
	clear(e[:SvcEntrySize])
	copy(e[0:39], name) // NUL-terminated, as snprintf writes it
	binary.BigEndian.PutUint64(e[40:], id)
}

// SvcEntries returns the i-th entry of a ServiceEntries MAD's data.
func SvcEntries(data []byte, i int) SvcEntry {
	return SvcEntry(data[i*SvcEntrySize : (i+1)*SvcEntrySize])
}

// SvcEntriesMod is the attribute modifier of a ServiceEntries GET: the slot and the first and
// last entry (srp_daemon and ib_srpt: slot << 16 | hi << 8 | lo).
func SvcEntriesMod(slot, lo, hi int) uint32 {
	return uint32(slot)<<16 | uint32(hi&0xff)<<8 | uint32(lo&0xff)
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
