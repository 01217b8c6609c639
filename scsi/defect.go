package scsi

import "encoding/binary"

// READ DEFECT DATA(10/12) (SBC-3 5.12, 5.13). The medium has no defects a host could act on:
// the lists are empty.

// usageReadDefectData10: REQ_PLIST, REQ_GLIST and DEFECT LIST FORMAT in byte 2, ALLOCATION
// LENGTH in bytes 7-8. usageReadDefectData12: the same bits in byte 1, ADDRESS DESCRIPTOR
// INDEX in bytes 2-5, ALLOCATION LENGTH in bytes 6-9.
var (
	usageReadDefectData10 = []byte{opReadDefectData10, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0x07}
	usageReadDefectData12 = []byte{opReadDefectData12, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}
)

// Bits of the byte that selects the defect lists, and the one reserved DEFECT LIST FORMAT
// value (SBC-4 table 6: 000b short block, 001b extended bytes from index, 010b extended
// physical sector, 011b long block, 100b bytes from index, 101b physical sector, 110b vendor
// specific).
const (
	defectReqPList        = 0x10
	defectReqGList        = 0x08
	defectFormatMask      = 0x07
	defectFormatReserved  = 0x07
	defectListHeader10Len = 4
	defectListHeader12Len = 8
)

// readDefectData10 and readDefectData12 return a defect list header and no descriptors. The
// header echoes the request: PLISTV and GLISTV are set for the lists asked for (each is valid,
// and empty), and DEFECT LIST FORMAT is the format asked for, since an empty list is in every
// format and the device server then has no reason to substitute its own. A reserved format is
// INVALID FIELD IN CDB. READ DEFECT DATA(12) takes any ADDRESS DESCRIPTOR INDEX: past the end of
// an empty list, nothing follows the header either way; its GENERATION CODE is 0 (not
// reported).
func readDefectData10(lu *LogicalUnit, c *Command) {
	// Bytes 2-3 of the header: DEFECT LIST LENGTH 0.
	readDefectData(c, usageReadDefectData10, 2, defectListHeader10Len, int(binary.BigEndian.Uint16(c.CDB[7:9])))
}

func readDefectData12(lu *LogicalUnit, c *Command) {
	// Bytes 2-3 of the header: GENERATION CODE 0; bytes 4-7: DEFECT LIST LENGTH 0.
	readDefectData(c, usageReadDefectData12, 1, defectListHeader12Len, int(binary.BigEndian.Uint32(c.CDB[6:10])))
}

// readDefectData answers either command: sel is the offset of the byte that selects the lists
// and the format, hdrLen the length of the header.
func readDefectData(c *Command, usage []byte, sel, hdrLen, alloc int) {
	if c.failOn(checkCDBUsage(c.CDB, usage)) {
		return
	}
	if c.CDB[sel]&defectFormatMask == defectFormatReserved {
		c.invalidCDBField(sel, 2)
		return
	}
	var buf [defectListHeader12Len]byte
	buf[1] = c.CDB[sel] & (defectReqPList | defectReqGList | defectFormatMask)
	c.putDataIn(buf[:hdrLen], alloc)
}
