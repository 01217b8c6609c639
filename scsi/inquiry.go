package scsi

import "encoding/binary"

// Peripheral device types and qualifiers (SPC-4 6.6.2, tables 139 and 140).
const (
	deviceTypeDisk          = 0x00 // direct access block device (SBC-3)
	deviceTypeWellKnownLU   = 0x1E
	deviceTypeUnknown       = 0x1F
	peripheralNotAccessible = 0x03 << 5 // qualifier 011b: no logical unit here
)

// Version descriptors (SPC-4 table 146) reported in the standard INQUIRY data: the standards the
// device server claims, as LIO reports them for an SRP target.
const (
	versionDescriptorSAM5 = 0x00A0
	versionDescriptorSRP  = 0x0940
	versionDescriptorSPC4 = 0x0460
	versionDescriptorSBC3 = 0x04C0
)

// standardInquiryLength is the length of the standard INQUIRY data. LIO returns 96 bytes
// (ADDITIONAL LENGTH 91) and Linux reads what ADDITIONAL LENGTH announces; 96 bytes hold the
// version descriptors at 58..65 and leave the remaining descriptor slots zero.
const standardInquiryLength = 96

// inquiry handles INQUIRY (SPC-4 6.6): the standard data, or a vital product data page when
// EVPD is set. It runs despite a pending unit attention, and also without a logical unit (lu is
// nil) for a LUN that is not mapped and for the REPORT LUNS well-known logical unit.
func inquiry(lu *LogicalUnit, c *Command) {
	if c.failOn(checkCDBUsage(c.CDB, usageInquiry)) {
		return
	}
	evpd := c.CDB[1]&0x01 != 0
	page := c.CDB[2]
	alloc := int(binary.BigEndian.Uint16(c.CDB[3:5]))
	if !evpd {
		if page != 0 {
			// PAGE CODE without EVPD asks for nothing SPC-4 defines.
			c.invalidCDBField(2, -1)
			return
		}
		var buf [standardInquiryLength]byte
		standardInquiry(lu, c, buf[:])
		c.putDataIn(buf[:], alloc)
		return
	}
	vpdInquiry(lu, c, page, alloc)
}

// peripheralByte is byte 0 of INQUIRY data: qualifier and device type of what the command
// addressed.
func peripheralByte(lu *LogicalUnit, c *Command) byte {
	switch {
	case lu != nil:
		return deviceTypeDisk
	case c.LUN == ReportLUNsWellKnownLUN:
		return deviceTypeWellKnownLU
	}
	return peripheralNotAccessible | deviceTypeUnknown
}

// standardInquiry fills buf (standardInquiryLength bytes, zeroed) with the standard INQUIRY data
// (SPC-4 6.6.2).
func standardInquiry(lu *LogicalUnit, c *Command, buf []byte) {
	buf[0] = peripheralByte(lu, c)
	buf[1] = 0x00 // RMB 0: the medium is not removable
	buf[2] = 0x06 // VERSION: SPC-4; Linux needs at least 5 to use READ CAPACITY(16) and RSOC
	// HISUP: LUNs follow the SAM-5 hierarchical (eight-byte) format; RESPONSE DATA FORMAT 2.
	// NORMACA is 0: ACA is not supported.
	buf[3] = 0x10 | 0x02
	buf[4] = standardInquiryLength - 5 // ADDITIONAL LENGTH
	// Byte 5: SCCS, ACC and PROTECT (no protection information) are zero; 3PC is set for a
	// logical unit: its copy manager runs EXTENDED COPY (xcopy.go). TPGS is 01b,
	// implicit asymmetric access only (the states change by configuration), when the port
	// has an ALUA configuration: Linux then attaches scsi_dh_alua, which asks REPORT TARGET
	// PORT GROUPS. Where the states are shared with other device servers it is 11b, SET TARGET
	// PORT GROUPS supported too (aluashare.go). Without ALUA it is 00b. Byte 6: ENCSERV and
	// MULTIP are zero.
	if c.alua() != nil {
		buf[5] = 0x01 << 4
		if lu.sharedALUA(c) {
			buf[5] = 0x03 << 4
		}
	}
	if lu != nil {
		buf[5] |= 0x08 // 3PC
	}
	buf[7] = 0x02 // CMDQUE: without it Linux keeps a queue depth of one
	vendor, product, revision := DefaultVendor, DefaultProduct, DefaultRevision
	if lu != nil {
		vendor, product, revision = lu.cfg.Vendor, lu.cfg.Product, lu.cfg.Revision
	}
	putASCII(buf[8:16], vendor)
	putASCII(buf[16:32], product)
	putASCII(buf[32:36], revision)
	binary.BigEndian.PutUint16(buf[58:], versionDescriptorSAM5)
	binary.BigEndian.PutUint16(buf[60:], versionDescriptorSRP)
	binary.BigEndian.PutUint16(buf[62:], versionDescriptorSPC4)
	if lu != nil {
		binary.BigEndian.PutUint16(buf[64:], versionDescriptorSBC3)
	}
}

// putASCII writes s left-aligned into the ASCII field dst and fills the rest with spaces
// (SPC-4 4.4.1).
func putASCII(dst []byte, s string) {
	n := copy(dst, s)
	for i := n; i < len(dst); i++ {
		dst[i] = ' '
	}
}
