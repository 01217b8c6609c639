package scsi

import (
	"encoding/binary"
	"math/bits"
)

// Mode page codes (SPC-4 7.5, SBC-3 6.4).
const (
	modePageVendor                  = 0x00 // no page format: the header and block descriptor only
	modePageReadWriteErrorRecovery  = 0x01
	modePageCaching                 = 0x08
	modePageControl                 = 0x0A
	modePageInformationalExceptions = 0x1C
	modePageAll                     = 0x3F
	modeSubpageAll                  = 0xFF
)

// Page control values of MODE SENSE (SPC-4 table 99).
const (
	pcCurrent    = 0
	pcChangeable = 1
	pcDefault    = 2
	pcSaved      = 3
)

// Bits of the mode parameter header's DEVICE-SPECIFIC PARAMETER for direct-access devices
// (SBC-3 6.4.1).
const (
	deviceSpecificWP     = 0x80 // write protected
	deviceSpecificDPOFUA = 0x10 // DPO and FUA supported; Linux sends FUA only when it is set
)

// modePage describes one supported mode page.
type modePage struct {
	code   byte
	length int // the whole page, its two header bytes included
	// fill writes the page with values v (bytes 0 and 1 are written by the caller).
	fill func(p []byte, v modeValues)
	// changeable writes the mask of the bits MODE SELECT may change.
	changeable func(p []byte)
	// parse takes the changeable values from a page sent by MODE SELECT into v.
	parse func(p []byte, v *modeValues)
}

// modePages are the supported pages in ascending page code order, the order of MODE SENSE with
// page code 3Fh. None has subpages, and none is saveable (PS is 0).
var modePages = [...]modePage{
	{code: modePageReadWriteErrorRecovery, length: 12, fill: func([]byte, modeValues) {}, changeable: func([]byte) {}, parse: func([]byte, *modeValues) {}},
	{code: modePageCaching, length: 20, fill: fillCachingPage, changeable: changeableCachingPage, parse: parseCachingPage},
	{code: modePageControl, length: 12, fill: fillControlPage, changeable: changeableControlPage, parse: parseControlPage},
	{code: modePageInformationalExceptions, length: 12, fill: fillIECPage, changeable: func([]byte) {}, parse: func([]byte, *modeValues) {}},
}

func findModePage(code byte) *modePage {
	for i := range modePages {
		if modePages[i].code == code {
			return &modePages[i]
		}
	}
	return nil
}

// The read-write error recovery mode page (SBC-3 6.4.7) is all zeroes, as LIO has it, and
// nothing in it is changeable: the backstore retries and recovers as it does, and the device
// server reports every error it cannot recover (AWRE, ARRE, TB, PER and DTE 0; RETRY COUNTs
// and RECOVERY TIME LIMIT 0, not specified). Initiators probe it; sg_modes and sdparm show it.

// Caching mode page (SBC-3 6.4.5): WCE (byte 2 bit 2) and RCD (byte 2 bit 0) are changeable;
// everything else (retention priorities, prefetch) is 0, as this device server has no such
// controls.
const (
	cachingWCE = 0x04
	cachingRCD = 0x01
)

func fillCachingPage(p []byte, v modeValues) {
	if v.wce {
		p[2] |= cachingWCE
	}
	if v.rcd {
		p[2] |= cachingRCD
	}
}

func changeableCachingPage(p []byte) { p[2] = cachingWCE | cachingRCD }

func parseCachingPage(p []byte, v *modeValues) {
	v.wce = p[2]&cachingWCE != 0
	v.rcd = p[2]&cachingRCD != 0
}

// Control mode page (SPC-4 7.5.8). D_SENSE (byte 2 bit 2) is changeable. The rest describes
// fixed behaviour: TST 000b (one task set for all nexuses), GLTSD 1 (no log parameters are saved
// implicitly: there are none), QUEUE ALGORITHM MODIFIER from the mode state (1: SIMPLE commands
// may be reordered, which is what the task set does), QERR 00b, UA_INTLCK_CTRL 00b, TAS 0
// (aborted commands get no status), SWP 0, BUSY TIMEOUT PERIOD 0 (undefined).
const (
	controlGLTSD  = 0x02
	controlDSense = 0x04
)

func fillControlPage(p []byte, v modeValues) {
	p[2] = controlGLTSD
	if v.dSense {
		p[2] |= controlDSense
	}
	p[3] = v.qam << 4
}

func changeableControlPage(p []byte) { p[2] = controlDSense }

func parseControlPage(p []byte, v *modeValues) {
	v.dSense = p[2]&controlDSense != 0
}

// Informational exceptions control mode page (SPC-4 7.5.11): DEXCPT is 1, since this device
// server reports no informational exceptions; MRIE 0; nothing is changeable.
func fillIECPage(p []byte, v modeValues) {
	p[2] = 0x08 // DEXCPT
}

// writeProtected reports whether the logical unit is write-protected for c: a read-only
// logical unit or backstore, or a read-only mapping. MODE SENSE then reports WP, and the
// commands of opWriteProtected (writes and MODE SELECT) are refused.
func (lu *LogicalUnit) writeProtected(c *Command) bool {
	return lu.cfg.ReadOnly || lu.bs.ReadOnly() || c.readOnly
}

// modeHeaderLen is the length of the mode parameter header of the 6-byte or (ten) the 10-byte
// form of MODE SENSE and MODE SELECT (SPC-4 7.5.4).
func modeHeaderLen(ten bool) int {
	if ten {
		return 8
	}
	return 4
}

// formLength is the length field of the 6-byte (byte 4) or, ten, the 10-byte (bytes 7-8) form of
// MODE SENSE and MODE SELECT: the allocation length or the parameter list length.
func formLength(cdb []byte, ten bool) int {
	if ten {
		return int(binary.BigEndian.Uint16(cdb[7:9]))
	}
	return int(cdb[4])
}

// modeSense handles MODE SENSE(6) and MODE SENSE(10) (SPC-4 6.11, 6.12): the mode parameter
// header, a block descriptor unless DBD is set (the long form when LLBAA is set), then the page
// or pages asked for with the values PC selects. The header's MODE DATA LENGTH always describes
// all of it, because Linux asks for 4 bytes first and then for exactly that length.
func modeSense(lu *LogicalUnit, c *Command) {
	ten, ok := c.checkForm(opModeSense10, usageModeSense6, usageModeSense10)
	if !ok {
		return
	}
	hdrLen := modeHeaderLen(ten)
	dbd := c.CDB[1]&0x08 != 0
	llbaa := ten && c.CDB[1]&0x10 != 0
	pc := c.CDB[2] >> 6
	code := c.CDB[2] & 0x3F
	subpage := c.CDB[3]
	alloc := formLength(c.CDB, ten)

	if pc == pcSaved {
		// SPC-4 6.11.1: saved values are not implemented.
		c.failInfo(ReasonSavingParametersNotSupported,
			SenseInfo{FieldPointerValid: true, InCDB: true, FieldPointer: 2, BitPointerValid: true, BitPointer: 7})
		return
	}
	var one *modePage
	switch {
	case code == modePageAll:
		if subpage != 0 && subpage != modeSubpageAll {
			c.invalidCDBField(3, -1)
			return
		}
	case code == modePageVendor:
		// SPC-4: with PC and PAGE CODE zero the device server should return the header
		// and block descriptor; Linux asks for it when page 3Fh fails.
		if subpage != 0 {
			c.invalidCDBField(3, -1)
			return
		}
	default:
		if one = findModePage(code); one == nil {
			c.invalidCDBField(2, 5)
			return
		}
		if subpage != 0 {
			// For example the I/O advice hints subpage 0Ah/05h that Linux asks for.
			c.invalidCDBField(3, -1)
			return
		}
	}

	var v modeValues
	switch pc {
	case pcCurrent:
		lu.mode.mu.Lock()
		v = lu.mode.current()
		lu.mode.mu.Unlock()
	case pcDefault:
		v = lu.mode.defaults
	}

	var buf [8 + 16 + 12 + 20 + 12 + 12]byte
	off := hdrLen
	bdLen := 0
	if !dbd {
		blocks := lu.Blocks()
		if llbaa {
			// Long LBA mode parameter block descriptor (SBC-3 6.4.2.3).
			bdLen = 16
			binary.BigEndian.PutUint64(buf[off:], blocks)
			binary.BigEndian.PutUint32(buf[off+12:], lu.blockSize)
		} else {
			// Short LBA mode parameter block descriptor (SBC-3 6.4.2.2): a capacity too
			// large for NUMBER OF LOGICAL BLOCKS shows as FFFFFFFFh.
			bdLen = 8
			binary.BigEndian.PutUint32(buf[off:], uint32(min(blocks, 0xFFFFFFFF)))
			binary.BigEndian.PutUint32(buf[off+4:], lu.blockSize) // byte 4 reserved, 5-7 length
		}
		off += bdLen
	}
	put := func(pg *modePage) {
		p := buf[off : off+pg.length]
		p[0], p[1] = pg.code, byte(pg.length-2)
		if pc == pcChangeable {
			pg.changeable(p)
		} else {
			pg.fill(p, v)
		}
		off += pg.length
	}
	switch {
	case one != nil:
		put(one)
	case code == modePageAll:
		for i := range modePages {
			put(&modePages[i])
		}
	}

	deviceSpecific := byte(deviceSpecificDPOFUA)
	if lu.writeProtected(c) {
		deviceSpecific |= deviceSpecificWP
	}
	if ten {
		binary.BigEndian.PutUint16(buf[0:], uint16(off-2)) // MODE DATA LENGTH
		buf[3] = deviceSpecific
		if bdLen == 16 {
			buf[4] = 0x01 // LONGLBA
		}
		binary.BigEndian.PutUint16(buf[6:], uint16(bdLen))
	} else {
		buf[0] = byte(off - 1)
		buf[2] = deviceSpecific
		buf[3] = byte(bdLen)
	}
	c.putDataIn(buf[:off], alloc)
}

// modeSelect handles MODE SELECT(6) and MODE SELECT(10) (SPC-4 6.9, 6.10). The parameter list
// is a mode parameter header, an optional block descriptor that must describe the current
// capacity and block length (neither can be changed), and any number of read-write error
// recovery, caching, control and informational exceptions pages, in which only the changeable bits may differ from the current
// values. The whole list is checked before anything changes; the changes take effect at once,
// and every other nexus gets MODE PARAMETERS CHANGED. An initiator for which the logical unit
// is write-protected never gets here (opChangesModePages): the parameters are shared.
//
// Fields SPC-4 and SBC-3 call reserved for MODE SELECT but that an application client copies
// from MODE SENSE data are ignored rather than refused: MODE DATA LENGTH and the
// DEVICE-SPECIFIC PARAMETER (WP, DPOFUA).
func modeSelect(lu *LogicalUnit, c *Command) {
	ten, ok := c.checkForm(opModeSelect10, usageModeSelect6, usageModeSelect10)
	if !ok {
		return
	}
	hdrLen := modeHeaderLen(ten)
	plen := formLength(c.CDB, ten)
	c.TransferLength = plen
	if c.CDB[1]&0x10 == 0 {
		// PF 0 would mean vendor-specific pages; only the standard page format exists here.
		c.invalidCDBField(1, 4)
		return
	}
	if c.CDB[1]&0x01 != 0 {
		// SP: saving is not implemented; SPC-4 6.9 says INVALID FIELD IN CDB.
		c.invalidCDBField(1, 0)
		return
	}
	if plen == 0 {
		return // SPC-4: an empty parameter list is not an error
	}
	if len(c.DataOut) < plen || plen < hdrLen {
		c.fail(ReasonParameterListLengthError)
		return
	}
	data := c.DataOut[:plen]

	var mediumType, bdLenOff, bdLen int
	longLBA := false
	if ten {
		mediumType, bdLenOff = 2, 6
		if x := data[4] &^ 0x01; x != 0 {
			c.invalidParamField(4, bits.Len8(x)-1)
			return
		}
		longLBA = data[4]&0x01 != 0
		if data[5] != 0 {
			c.invalidParamField(5, -1)
			return
		}
		bdLen = int(binary.BigEndian.Uint16(data[6:8]))
	} else {
		mediumType, bdLenOff = 1, 3
		bdLen = int(data[3])
	}
	if data[mediumType] != 0 {
		c.invalidParamField(mediumType, -1)
		return
	}
	if bdLen != 0 && !(bdLen == 8 && !longLBA) && !(bdLen == 16 && longLBA) {
		c.invalidParamField(bdLenOff, -1)
		return
	}
	if hdrLen+bdLen > plen {
		c.fail(ReasonParameterListLengthError)
		return
	}
	if c.failOn(lu.checkBlockDescriptor(data[hdrLen:hdrLen+bdLen], hdrLen)) {
		return
	}

	lu.mode.mu.Lock()
	defer lu.mode.mu.Unlock()
	cur := lu.mode.current()
	next := cur
	for off := hdrLen + bdLen; off < plen; {
		if plen-off < 2 {
			c.fail(ReasonParameterListLengthError)
			return
		}
		if data[off]&0x80 != 0 { // PS is reserved in MODE SELECT
			c.invalidParamField(off, 7)
			return
		}
		if data[off]&0x40 != 0 { // SPF: no page has subpages
			c.invalidParamField(off, 6)
			return
		}
		pg := findModePage(data[off] & 0x3F)
		if pg == nil {
			c.invalidParamField(off, 5)
			return
		}
		if int(data[off+1]) != pg.length-2 {
			c.invalidParamField(off+1, -1)
			return
		}
		if off+pg.length > plen {
			c.fail(ReasonParameterListLengthError)
			return
		}
		var want, mask [20]byte
		pg.fill(want[:], next)
		pg.changeable(mask[:])
		p := data[off : off+pg.length]
		for i := 2; i < pg.length; i++ {
			if x := (p[i] ^ want[i]) &^ mask[i]; x != 0 {
				c.invalidParamField(off+i, bits.Len8(x)-1)
				return
			}
		}
		pg.parse(p, &next)
		off += pg.length
	}
	if next == cur {
		return
	}
	lu.mode.set(next)
	lu.mu.Lock()
	lu.nexuses.establishUALocked(nil, c.Nexus, ReasonModeParametersChanged)
	lu.mu.Unlock()
}

// checkBlockDescriptor checks the block descriptor sent by MODE SELECT (bd is empty when there
// is none). The capacity and block length cannot be changed, so NUMBER OF LOGICAL BLOCKS must be
// zero (SBC-3 6.4.2: no change) or the current value as MODE SENSE reports it, and LOGICAL BLOCK
// LENGTH zero or the current one. off is the descriptor's offset in the parameter list, for the
// field pointer.
func (lu *LogicalUnit) checkBlockDescriptor(bd []byte, off int) fault {
	blocks := lu.Blocks()
	var count uint64
	var reserved []byte
	var length uint32
	var reservedOff, lengthOff int
	switch len(bd) {
	case 0:
		return 0
	case 8:
		// Short LBA: NUMBER OF LOGICAL BLOCKS (0-3), reserved (4), LOGICAL BLOCK LENGTH (5-7).
		count, blocks = uint64(binary.BigEndian.Uint32(bd[0:4])), min(blocks, 0xFFFFFFFF)
		reserved, reservedOff = bd[4:5], 4
		length, lengthOff = binary.BigEndian.Uint32(bd[4:8])&0x00FFFFFF, 5
	default:
		// Long LBA: NUMBER OF LOGICAL BLOCKS (0-7), reserved (8-11), LOGICAL BLOCK LENGTH
		// (12-15).
		count = binary.BigEndian.Uint64(bd[0:8])
		reserved, reservedOff = bd[8:12], 8
		length, lengthOff = binary.BigEndian.Uint32(bd[12:16]), 12
	}
	if count != 0 && count != blocks {
		return paramFieldFault(off, -1)
	}
	for i, b := range reserved {
		if b != 0 {
			return paramFieldFault(off+reservedOff+i, -1)
		}
	}
	if length != 0 && length != lu.blockSize {
		return paramFieldFault(off+lengthOff, -1)
	}
	return 0
}
