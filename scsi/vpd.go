package scsi

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"
)

// Vital product data page codes (SPC-4 7.8, SBC-3 6.5).
const (
	vpdSupportedPages             = 0x00
	vpdUnitSerialNumber           = 0x80
	vpdDeviceIdentification       = 0x83
	vpdExtendedInquiryData        = 0x86
	vpdThirdPartyCopyPage         = 0x8F
	vpdBlockLimits                = 0xB0
	vpdBlockDeviceCharacteristics = 0xB1
	vpdLogicalBlockProvisioning   = 0xB2
)

// vpdBufferSize bounds every VPD page: the largest is the device identification page, at most
// 4 + 20 (NAA) + 259 (T10 vendor ID) + 8 + 8 (port designators) + 260 (SCSI name) bytes.
const vpdBufferSize = 1024

// ieeeCompanyID is the IEEE company identifier in the NAA designator. It is the one LIO uses
// (OUI 00-14-05), so that a logical unit moved between LIO and this target with the same unit
// serial number keeps its WWID and multipath and udev by-id names keep working.
const ieeeCompanyID = 0x001405

// Designator fields (SPC-4 7.8.6.1).
const (
	codeSetBinary = 0x1
	codeSetASCII  = 0x2
	codeSetUTF8   = 0x3

	assocLU         = 0x00 << 4
	assocTargetPort = 0x01 << 4

	designatorT10VendorID      = 0x1
	designatorNAA              = 0x3
	designatorRelativePort     = 0x4
	designatorTargetPortGroup  = 0x5
	designatorSCSINameString   = 0x8
	maxSCSINameDesignatorBytes = 256 // SPC-4 7.8.6.11: at most 256 bytes, a multiple of four
)

// vpdInquiry answers INQUIRY with EVPD set: the page's 4-byte header (qualifier and device type,
// page code, PAGE LENGTH) and the page, truncated to the allocation length. PAGE LENGTH always
// describes the whole page: Linux first asks for 4 bytes to learn it.
func vpdInquiry(lu *LogicalUnit, c *Command, page byte, alloc int) {
	var buf [vpdBufferSize]byte
	buf[0] = peripheralByte(lu, c)
	buf[1] = page
	var n int
	switch {
	case lu == nil && page == vpdSupportedPages:
		// No logical unit: only the list of pages, which is this page alone.
		n = 1
	case lu == nil:
		c.invalidCDBField(2, -1)
		return
	case page == vpdSupportedPages:
		n = lu.vpdSupportedPages(buf[:])
	case page == vpdUnitSerialNumber:
		n = copy(buf[4:], lu.cfg.Serial)
	case page == vpdDeviceIdentification:
		n = lu.vpdDeviceIdentification(c, buf[:])
	case page == vpdExtendedInquiryData:
		n = vpdExtendedInquiry(buf[:])
	case page == vpdThirdPartyCopyPage:
		n = vpdThirdPartyCopy(buf[:])
	case page == vpdBlockLimits:
		n = lu.vpdBlockLimits(buf[:])
	case page == vpdBlockDeviceCharacteristics:
		n = lu.vpdBlockDeviceCharacteristics(buf[:])
	case page == vpdLogicalBlockProvisioning && lu.supportsUnmap():
		n = lu.vpdLogicalBlockProvisioning(buf[:])
	default:
		c.invalidCDBField(2, -1)
		return
	}
	binary.BigEndian.PutUint16(buf[2:], uint16(n))
	c.putDataIn(buf[:4+n], alloc)
}

// vpdSupportedPages writes the SUPPORTED VPD PAGES list (SPC-4 7.8.14) in ascending order.
// Linux fetches every page listed here when it attaches the disk. Page 0x89 (ATA information)
// must never appear: it makes Linux treat the device as a SATL.
func (lu *LogicalUnit) vpdSupportedPages(buf []byte) int {
	pages := [...]byte{vpdSupportedPages, vpdUnitSerialNumber, vpdDeviceIdentification,
		vpdExtendedInquiryData, vpdThirdPartyCopyPage, vpdBlockLimits, vpdBlockDeviceCharacteristics, vpdLogicalBlockProvisioning}
	n := len(pages)
	if !lu.supportsUnmap() {
		n--
	}
	return copy(buf[4:], pages[:n])
}

// vpdDeviceIdentification writes the designation descriptors of the device identification
// page (SPC-4 7.8.6) and returns their length:
//
//   - NAA IEEE Registered Extended (type 3, logical unit, binary): what Linux's
//     sd_get_unique_id and udev's scsi_id use as the WWID;
//   - T10 vendor ID (type 1, logical unit, ASCII): vendor, then product ":" serial, as LIO;
//   - relative target port (type 4) and target port group (type 5) of the port the command
//     came through;
//   - SCSI name string (type 8, target port, UTF-8): the target port's name.
//
// The port designators have PIV 0: this package does not know the transport's protocol
// identifier, and SPC-4 lets PIV 0 leave PROTOCOL IDENTIFIER unspecified.
func (lu *LogicalUnit) vpdDeviceIdentification(c *Command, buf []byte) int {
	off := 4

	// NAA designator.
	d := buf[off:]
	d[0], d[1], d[2], d[3] = codeSetBinary, assocLU|designatorNAA, 0, 16
	naaRegisteredExtended(d[4:20], lu.cfg.Serial)
	off += 20

	// T10 vendor ID designator: T10 VENDOR IDENTIFICATION (8 bytes) and a vendor specific
	// identifier, truncated so that the DESIGNATOR LENGTH fits its byte.
	d = buf[off:]
	d[0], d[1], d[2] = codeSetASCII, assocLU|designatorT10VendorID, 0
	putASCII(d[4:12], lu.cfg.Vendor)
	n := 8
	n += copy(d[4+n:4+255], strings.TrimRight(lu.cfg.Product, " "))
	n += copy(d[4+n:4+255], ":")
	n += copy(d[4+n:4+255], lu.cfg.Serial)
	d[3] = byte(n)
	off += 4 + n

	if c.Nexus == nil || c.Nexus.Port == nil {
		return off - 4
	}
	port := c.Nexus.Port

	// Relative target port designator: two obsolete bytes, then the identifier.
	d = buf[off:]
	d[0], d[1], d[2], d[3] = codeSetBinary, assocTargetPort|designatorRelativePort, 0, 4
	binary.BigEndian.PutUint16(d[6:], port.RelativeID)
	off += 8

	// Target port group designator: two reserved bytes, then the group.
	d = buf[off:]
	d[0], d[1], d[2], d[3] = codeSetBinary, assocTargetPort|designatorTargetPortGroup, 0, 4
	binary.BigEndian.PutUint16(d[6:], c.portGroupID())
	off += 8

	// SCSI name string designator: null-terminated, null-padded to a multiple of four, at most
	// 256 bytes; a longer name is cut at a character boundary so that the terminator stays.
	if port.Name != "" {
		name := port.Name
		if len(name) > maxSCSINameDesignatorBytes-1 {
			end := maxSCSINameDesignatorBytes - 1
			for end > 0 && !utf8.RuneStart(name[end]) {
				end--
			}
			name = name[:end]
		}
		l := (len(name) + 1 + 3) &^ 3
		d = buf[off:]
		d[0], d[1], d[2], d[3] = codeSetUTF8, assocTargetPort|designatorSCSINameString, 0, byte(l)
		copy(d[4:], name) // the terminator and padding are the zeroes already there
		off += 4 + l
	}
	return off - 4
}

// NAAIdentifier is the NAA IEEE Registered Extended designator that VPD page 0x83 gives the
// logical unit with unit serial number serial (naaRegisteredExtended): what Linux builds the
// disk's WWID from, so two logical units with one are one disk to multipath.
func NAAIdentifier(serial string) [16]byte {
	var id [16]byte
	naaRegisteredExtended(id[:], serial)
	return id
}

// naaRegisteredExtended writes the 16-byte NAA IEEE Registered Extended designator as LIO builds
// it: NAA 6, the 24-bit IEEE company identifier, then the hexadecimal digits of the unit serial
// number, in order, as the vendor specific identifier (36 bits) and its extension (64 bits).
// Characters that are not hexadecimal digits are skipped; at most 25 digits are used; the rest
// stays zero.
func naaRegisteredExtended(dst []byte, serial string) {
	clear(dst[:16])
	dst[0] = 0x60 | byte(ieeeCompanyID>>20)&0x0F
	dst[1] = byte(ieeeCompanyID >> 12 & 0xFF)
	dst[2] = byte(ieeeCompanyID >> 4 & 0xFF)
	dst[3] = byte(ieeeCompanyID&0x0F) << 4
	off, low := 3, true
	for i := 0; i < len(serial) && off < 16; i++ {
		v, ok := hexDigit(serial[i])
		if !ok {
			continue
		}
		if low {
			dst[off] |= v
			off++
		} else {
			dst[off] = v << 4
		}
		low = !low
	}
}

func hexDigit(ch byte) (byte, bool) {
	switch {
	case ch >= '0' && ch <= '9':
		return ch - '0', true
	case ch >= 'a' && ch <= 'f':
		return ch - 'a' + 10, true
	case ch >= 'A' && ch <= 'F':
		return ch - 'A' + 10, true
	}
	return 0, false
}

// Bits of the extended INQUIRY data page (SPC-4 7.8.7).
const (
	extInqHeadSup = 0x04 // byte 5: HEAD OF QUEUE task attribute supported
	extInqOrdSup  = 0x02 // byte 5: ORDERED
	extInqSimpSup = 0x01 // byte 5: SIMPLE
	extInqVSup    = 0x01 // byte 6: V_SUP, a volatile cache
)

// vpdExtendedInquiry writes the extended INQUIRY data page (SPC-4 7.8.7), page length 3Ch:
//   - HEADSUP, ORDSUP and SIMPSUP: the task set honours the three task attributes
//     (taskset.go); ACA is not one of them (NORMACA is 0);
//   - V_SUP: there is a volatile cache, the one the caching mode page's WCE turns on, which
//     SYNCHRONIZE CACHE empties; NV_SUP 0, there is no non-volatile one;
//   - MAXIMUM SUPPORTED SENSE DATA LENGTH: MaxSenseLength;
//   - everything else 0: no protection information (SPT, GRD_CHK, APP_CHK, REF_CHK), no
//     group numbers or priorities (GROUP_SUP, PRIOR_SUP), no microcode download, no self-test.
func vpdExtendedInquiry(buf []byte) int {
	buf[5] = extInqHeadSup | extInqOrdSup | extInqSimpSup
	buf[6] = extInqVSup
	buf[13] = MaxSenseLength
	return 0x3C
}

// vpdBlockLimits writes the block limits page (SBC-3 6.5.3) with page length 3Ch, the length
// Linux needs before it reads the unmap and write same fields. The limits come from the same
// functions the SBC handlers enforce them with (maxCompareAndWriteBlocks, maxUnmapBlocks,
// maxUnmapDescriptors, maxWriteSameBlocks), so that what is advertised is what is accepted.
func (lu *LogicalUnit) vpdBlockLimits(buf []byte) int {
	perPhysical := lu.blocksPerPhysical()
	// Byte 4: WSNZ 0, WRITE SAME with NUMBER OF LOGICAL BLOCKS zero writes to the end of the
	// medium (writesame.go).
	buf[5] = lu.maxCompareAndWriteBlocks()
	binary.BigEndian.PutUint16(buf[6:], uint16(min(perPhysical, 0xFFFF))) // OPTIMAL TRANSFER LENGTH GRANULARITY
	binary.BigEndian.PutUint32(buf[8:], lu.cfg.MaxTransferBytes>>lu.blockShift)
	binary.BigEndian.PutUint32(buf[12:], lu.cfg.OptimalTransferBytes>>lu.blockShift)
	// 16..19 MAXIMUM PREFETCH LENGTH: 0, no limit: PRE-FETCH takes any range of the medium.
	if lu.supportsUnmap() {
		binary.BigEndian.PutUint32(buf[20:], lu.maxUnmapBlocks())
		binary.BigEndian.PutUint32(buf[24:], lu.maxUnmapDescriptors())
		binary.BigEndian.PutUint32(buf[28:], lu.optimalUnmapGranularity())
		// UGAVALID 1, UNMAP GRANULARITY ALIGNMENT 0: LBA 0 starts a unit of unmap
		// granularity, as it starts a physical block.
		buf[32] = 0x80
	}
	binary.BigEndian.PutUint64(buf[36:], lu.maxWriteSameBlocks())
	// 44..55 MAXIMUM ATOMIC TRANSFER LENGTH, ATOMIC ALIGNMENT, ATOMIC TRANSFER LENGTH
	// GRANULARITY (atomic.go); 56..63, the atomic boundary limits, 0.
	binary.BigEndian.PutUint32(buf[44:], lu.atomic.max)
	binary.BigEndian.PutUint32(buf[48:], lu.atomic.alignment)
	binary.BigEndian.PutUint32(buf[52:], lu.atomic.granularity)
	return 0x3C
}

// optimalUnmapGranularity is OPTIMAL UNMAP GRANULARITY (VPD page 0xB0 bytes 28-31), in
// logical blocks: the physical block, or the backstore's own unit of deallocation when that is
// larger (a file's filesystem block). Linux rounds its discards to it, so that a file system
// with 4 KiB blocks on a LUN of 512-byte blocks has its discards free space instead of having
// the parts of filesystem blocks that a hole cannot cover zeroed.
func (lu *LogicalUnit) optimalUnmapGranularity() uint32 {
	g := lu.bs.Capabilities().UnmapGranularity >> lu.blockShift
	return uint32(max(lu.blocksPerPhysical(), uint64(min(g, 1<<20))))
}

// vpdBlockDeviceCharacteristics writes the block device characteristics page (SBC-3 6.5.2).
// A MEDIUM ROTATION RATE of 1 tells Linux the disk is not rotational; 0 means not reported.
// The medium is non-rotational when the configuration says so or the backstore does (RAM, or a
// file or block device on a disk whose queue/rotational is 0). NOMINAL FORM FACTOR is 0 (not
// reported).
func (lu *LogicalUnit) vpdBlockDeviceCharacteristics(buf []byte) int {
	if lu.cfg.NonRotational || lu.bs.Capabilities().NonRotational {
		binary.BigEndian.PutUint16(buf[4:], 1)
	}
	if lu.supportsBlockErase() {
		buf[7] = 0x01 << 6 // WABEREQ 01b: after SANITIZE BLOCK ERASE reads succeed (zeroes)
	}
	return 0x3C
}

// vpdLogicalBlockProvisioning writes the logical block provisioning page (SBC-3 6.5.4), only
// offered with thin provisioning: UNMAP (LBPU) and WRITE SAME(16) and (10) with UNMAP (LBPWS,
// LBPWS10) deallocate, LBPRZ when unmapped blocks read back as zeroes (Linux then uses WRITE
// SAME with UNMAP to write zeroes), and the PROVISIONING TYPE is thin (010b).
func (lu *LogicalUnit) vpdLogicalBlockProvisioning(buf []byte) int {
	buf[5] = 0x80 | 0x40 | 0x20 // LBPU, LBPWS, LBPWS10
	if lu.unmappedReadsZero() {
		buf[5] |= 0x04 // LBPRZ
	}
	buf[6] = 0x02 // PROVISIONING TYPE: thin provisioned
	return 4
}

// unmappedReadsZero reports whether a deallocated block reads back as zeroes (LBPRZ).
func (lu *LogicalUnit) unmappedReadsZero() bool {
	return lu.supportsUnmap() && lu.bs.Capabilities().UnmapZeroes
}
