package scsi

import (
	"encoding/binary"
	"math/bits"
)

// EXTENDED COPY (LID1) (SPC-4 6.4): the copy manager of this logical unit copies blocks between
// logical units of the target, backstore to backstore, instead of the initiator reading and
// writing every block over the fabric (VMware's XCOPY, sg_xcopy, ddpt). This file decodes the
// parameter list; xcopyrun.go runs the copy; copyresults.go answers RECEIVE COPY RESULTS and
// the THIRD-PARTY COPY VPD page.

// Operation codes and service actions of the third-party copy commands (SPC-4 table E.3).
const (
	opThirdPartyCopyOut = 0x83 // EXTENDED COPY
	opThirdPartyCopyIn  = 0x84 // RECEIVE COPY RESULTS
	saExtendedCopyLID1  = 0x00
	saCopyStatus        = 0x00
	saOperatingParams   = 0x03
)

// CDB usage data: EXTENDED COPY (LID1) has the PARAMETER LIST LENGTH in bytes 10-13; RECEIVE
// COPY RESULTS the LIST IDENTIFIER in byte 2 (COPY STATUS only: it is reserved for OPERATING
// PARAMETERS) and the ALLOCATION LENGTH in bytes 10-13. Bytes 2-9 and 14 are reserved.
var (
	usageExtendedCopy = []byte{opThirdPartyCopyOut, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}
	usageCopyStatus   = []byte{opThirdPartyCopyIn, 0x1F, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}
	usageCopyOpParams = []byte{opThirdPartyCopyIn, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x07}
)

// copyCommands are EXTENDED COPY (LID1) and the two RECEIVE COPY RESULTS service actions it
// needs. EXTENDED COPY conflicts with a persistent reservation as a write does (it writes to
// its destination); its copy targets are checked on their own (xcopyrun.go). RECEIVE COPY
// RESULTS only reports.
var copyCommands = []opInfo{
	{name: "EXTENDED COPY(LID1)", opcode: opThirdPartyCopyOut, serviceAction: saExtendedCopyLID1, hasSA: true,
		cdbLength: 16, usage: usageExtendedCopy, flags: opMayBlock, run: extendedCopy},
	{name: "RECEIVE COPY RESULTS COPY STATUS", opcode: opThirdPartyCopyIn, serviceAction: saCopyStatus, hasSA: true,
		cdbLength: 16, usage: usageCopyStatus, flags: opPRAllowed, run: receiveCopyStatus},
	{name: "RECEIVE COPY RESULTS OPERATING PARAMETERS", opcode: opThirdPartyCopyIn, serviceAction: saOperatingParams, hasSA: true,
		cdbLength: 16, usage: usageCopyOpParams, flags: opPRAllowed, run: receiveCopyOperatingParams},
}

// The copy manager's limits, reported by RECEIVE COPY RESULTS (OPERATING PARAMETERS) and the
// THIRD-PARTY COPY VPD page and enforced by the decoder. One EXTENDED COPY moves at most
// xcopyMaxSegments × xcopyMaxSegmentBytes (256 MiB): with the backstores' speeds that ends well
// inside an initiator's command timeout, and a task management function aborts it between
// chunks (xcopyrun.go).
const (
	xcopyMaxCSCDs        = 8
	xcopyMaxSegments     = 16
	xcopyMaxSegmentBytes = 16 << 20
	// xcopyMaxListLength is MAXIMUM DESCRIPTOR LIST LENGTH: room for the most CSCD and
	// segment descriptors of the kinds supported.
	xcopyMaxListLength = xcopyMaxCSCDs*cscdLength + xcopyMaxSegments*segB2BLength
	// xcopyMaxConcurrent bounds the copies one logical unit runs at once (TOTAL CONCURRENT
	// COPIES), each with its scratch buffer.
	xcopyMaxConcurrent = 16
)

// Parameter list layout (SPC-4 6.4.3): a 16-byte header, the CSCD descriptors, the segment
// descriptors and inline data.
const (
	xcopyHeaderLength = 16
	cscdLength        = 32   // every CSCD descriptor type code E0h-E9h
	cscdIdentifier    = 0xE4 // identification descriptor CSCD descriptor (SPC-4 6.4.5.7)
	segBlockToBlock   = 0x02 // block device to block device segment descriptor (SPC-4 6.4.6.5)
	segB2BLength      = 28   // its length, DESCRIPTOR LENGTH 0018h plus the 4-byte header
)

// LIST ID USAGE values (SPC-4 6.4.3, table 112).
const (
	listIDHoldData = 0 // the copy manager keeps the status, and held data (there is none)
	listIDRetain   = 2 // the copy manager keeps the status, held data is discarded
	listIDNone     = 3 // no list identifier: the status is not kept (SNLID 1)
)

// cscd is one identification descriptor CSCD descriptor: where it is in the parameter list, its
// designator and the disk block length it gives.
type cscd struct {
	off        int
	designator []byte // the designation descriptor: 4-byte header and designator
	blockSize  uint32
}

// copySegment is one block device to block device segment descriptor.
type copySegment struct {
	off            int
	src, dst       uint16 // CSCD DESCRIPTOR IDs
	dc             bool   // NUMBER OF BLOCKS counts destination blocks
	blocks         uint16
	srcLBA, dstLBA uint64
}

// copyList is a decoded EXTENDED COPY (LID1) parameter list.
type copyList struct {
	listID  byte
	idUsage byte
	cscds   []cscd
	segs    []copySegment
}

// decodeCopyList decodes and checks the parameter list p of an EXTENDED COPY (LID1) whose
// PARAMETER LIST LENGTH is len(p) (at least the header). It checks, in this order, what can be
// found without looking at the copy targets:
//   - the header: reserved bits, LIST ID USAGE 01b (reserved), a LIST IDENTIFIER with 11b;
//   - the lengths: descriptors or inline data past the parameter list are PARAMETER LIST
//     LENGTH ERROR, as are descriptor lists longer than MAXIMUM DESCRIPTOR LIST LENGTH; inline
//     data is INLINE DATA LENGTH EXCEEDED (MAXIMUM INLINE DATA LENGTH is 0);
//   - each CSCD descriptor: more than the maximum is TOO MANY TARGET DESCRIPTORS, a type code
//     other than E4h UNSUPPORTED TARGET DESCRIPTOR TYPE CODE, then its fields;
//   - each segment descriptor likewise (TOO MANY SEGMENT DESCRIPTORS, UNSUPPORTED SEGMENT
//     DESCRIPTOR TYPE CODE), then its fields.
//
// Field errors are INVALID FIELD IN PARAMETER LIST pointing at the field. What needs the copy
// targets (which logical unit a designator names, LBA ranges, CSCD indexes) is checked when the
// copy runs and reported as COPY ABORTED, as SPC-4 6.4.4 has it.
func decodeCopyList(p []byte) (l copyList, f fault) {
	l.listID = p[0]
	if p[1]&0xC0 != 0 {
		return l, paramFieldFault(1, 7)
	}
	// Byte 1 bit 5 is STR (the source data is striped), a hint; bits 2:0 PRIORITY, relative to
	// other commands, which this copy manager does not order by.
	l.idUsage = p[1] >> 3 & 0x3
	switch {
	case l.idUsage == 1:
		return l, paramFieldFault(1, 4)
	case l.idUsage == listIDNone && l.listID != 0:
		return l, paramFieldFault(0, -1)
	}
	cscdLen := int(binary.BigEndian.Uint16(p[2:]))
	if x := binary.BigEndian.Uint32(p[4:]); x != 0 {
		return l, paramFieldFault(4+bits.LeadingZeros32(x)/8, -1)
	}
	segLen := uint64(binary.BigEndian.Uint32(p[8:]))
	inlineLen := uint64(binary.BigEndian.Uint32(p[12:]))
	if uint64(xcopyHeaderLength)+uint64(cscdLen)+segLen+inlineLen > uint64(len(p)) ||
		uint64(cscdLen)+segLen > xcopyMaxListLength {
		return l, faultOf(ReasonParameterListLengthError)
	}
	if inlineLen > 0 {
		return l, fieldFault(ReasonInlineDataLengthExceeded, false, 12, -1)
	}

	off, end := xcopyHeaderLength, xcopyHeaderLength+cscdLen
	for off < end {
		if len(l.cscds) == xcopyMaxCSCDs {
			return l, faultOf(ReasonTooManyTargetDescriptors)
		}
		if p[off] != cscdIdentifier {
			return l, fieldFault(ReasonUnsupportedTargetDescriptorTypeCode, false, off, -1)
		}
		if end-off < cscdLength {
			return l, paramFieldFault(2, -1) // CSCD DESCRIPTOR LIST LENGTH ends inside one
		}
		d, f := decodeCSCD(p, off)
		if f != 0 {
			return l, f
		}
		l.cscds = append(l.cscds, d)
		off += cscdLength
	}

	end += int(segLen)
	for off < end {
		if len(l.segs) == xcopyMaxSegments {
			return l, faultOf(ReasonTooManySegmentDescriptors)
		}
		if p[off] != segBlockToBlock {
			return l, fieldFault(ReasonUnsupportedSegmentDescriptorTypeCode, false, off, -1)
		}
		if end-off < 4 || binary.BigEndian.Uint16(p[off+2:]) != segB2BLength-4 || end-off < segB2BLength {
			return l, paramFieldFault(off+2, -1) // DESCRIPTOR LENGTH
		}
		s, f := decodeSegment(p, off)
		if f != 0 {
			return l, f
		}
		l.segs = append(l.segs, s)
		off += segB2BLength
	}
	return l, 0
}

// decodeCSCD decodes the identification descriptor CSCD descriptor at p[off:] (SPC-4 6.4.5.7):
// byte 1 holds LU ID TYPE (ignored, SPC-4), NUL (obsolete in SPC-4, ignored) and the
// PERIPHERAL DEVICE TYPE, which must be 00h (direct access: the device type specific
// parameters are those of a block device); bytes 2-3 the RELATIVE INITIATOR PORT IDENTIFIER
// (ignored: the copy manager reaches its copy targets inside the target); bytes 4-27 a
// designation descriptor of at most 20 bytes of designator; bytes 28-31 the block device
// parameters: PAD (byte 28 bit 2, the only bit defined) and DISK BLOCK LENGTH.
func decodeCSCD(p []byte, off int) (cscd, fault) {
	d := p[off : off+cscdLength]
	if d[1]&0x1F != deviceTypeDisk {
		return cscd{}, paramFieldFault(off+1, 4)
	}
	if d[4]&0xF0 != 0 {
		return cscd{}, paramFieldFault(off+4, 7) // PROTOCOL IDENTIFIER, reserved here
	}
	if d[5]&0xC0 != 0 {
		return cscd{}, paramFieldFault(off+5, 7) // PIV and the reserved bit 6
	}
	if d[6] != 0 {
		return cscd{}, paramFieldFault(off+6, -1)
	}
	n := int(d[7])
	if n > 20 {
		return cscd{}, paramFieldFault(off+7, -1)
	}
	if d[28]&^0x04 != 0 {
		return cscd{}, paramFieldFault(off+28, 7)
	}
	bs := uint32(d[29])<<16 | uint32(d[30])<<8 | uint32(d[31])
	return cscd{off: off, designator: d[4 : 8+n], blockSize: bs}, 0
}

// decodeSegment decodes the block device to block device segment descriptor at p[off:] (SPC-4
// 6.4.6.5): byte 1 holds DC (bit 1) and CAT (bit 0), its other bits are reserved; bytes 8-9 are
// reserved. CAT only matters for a segment whose bytes are not whole blocks at both ends, which
// the copy refuses (UNEXPECTED INEXACT SEGMENT).
func decodeSegment(p []byte, off int) (copySegment, fault) {
	d := p[off : off+segB2BLength]
	if d[1]&0xFC != 0 {
		return copySegment{}, paramFieldFault(off+1, 7)
	}
	if d[8] != 0 || d[9] != 0 {
		return copySegment{}, paramFieldFault(off+8, -1)
	}
	return copySegment{
		off:    off,
		src:    binary.BigEndian.Uint16(d[4:]),
		dst:    binary.BigEndian.Uint16(d[6:]),
		dc:     d[1]&0x02 != 0,
		blocks: binary.BigEndian.Uint16(d[10:]),
		srcLBA: binary.BigEndian.Uint64(d[12:]),
		dstLBA: binary.BigEndian.Uint64(d[20:]),
	}, 0
}
