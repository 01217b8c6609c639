package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/srptarget/srptarget/backstore"
)

// Mode pages of the test LU (WriteCache on), written out from SBC-3 6.4.5 and SPC-4 7.5.8/7.5.11.
var (
	rwErrorRecovery   = cat([]byte{0x01, 0x0A}, zeros(10))       // all zero, nothing changeable
	cachingCurrent    = cat([]byte{0x08, 0x12, 0x04}, zeros(17)) // WCE
	cachingNoWCE      = cat([]byte{0x08, 0x12, 0x00}, zeros(17))
	cachingChangeable = cat([]byte{0x08, 0x12, 0x05}, zeros(17)) // WCE, RCD
	controlCurrent    = cat([]byte{0x0A, 0x0A, 0x02, 0x10}, zeros(8))
	controlDSensePage = cat([]byte{0x0A, 0x0A, 0x06, 0x10}, zeros(8))
	controlChangeable = cat([]byte{0x0A, 0x0A, 0x04, 0x00}, zeros(8)) // D_SENSE
	iecCurrent        = cat([]byte{0x1C, 0x0A, 0x08}, zeros(9))       // DEXCPT
	iecChangeable     = cat([]byte{0x1C, 0x0A, 0x00}, zeros(9))

	// Short block descriptor of 1000 blocks of 512 bytes.
	shortBD = []byte{0x00, 0x00, 0x03, 0xE8, 0x00, 0x00, 0x02, 0x00}
	// Long block descriptor of the same.
	longBD = []byte{0, 0, 0, 0, 0x00, 0x00, 0x03, 0xE8, 0, 0, 0, 0, 0x00, 0x00, 0x02, 0x00}
)

func modeSense6(dbd bool, pc, page, subpage, alloc byte) []byte {
	cdb := []byte{0x1A, 0, pc<<6 | page, subpage, alloc, 0}
	if dbd {
		cdb[1] = 0x08
	}
	return cdb
}

func modeSense10(dbd, llbaa bool, pc, page, subpage byte, alloc uint16) []byte {
	cdb := []byte{0x5A, 0, pc<<6 | page, subpage, 0, 0, 0, byte(alloc >> 8), byte(alloc), 0}
	if dbd {
		cdb[1] |= 0x08
	}
	if llbaa {
		cdb[1] |= 0x10
	}
	return cdb
}

func TestModeSense(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, tc := range []struct {
		name string
		cdb  []byte
		want []byte
	}{
		// MODE SENSE(6): header MODE DATA LENGTH, MEDIUM TYPE, DEVICE-SPECIFIC (DPOFUA), BLOCK
		// DESCRIPTOR LENGTH.
		{"caching current", modeSense6(false, 0, 0x08, 0, 255),
			cat([]byte{0x1F, 0x00, 0x10, 0x08}, shortBD, cachingCurrent)},
		{"caching changeable", modeSense6(false, 1, 0x08, 0, 255),
			cat([]byte{0x1F, 0x00, 0x10, 0x08}, shortBD, cachingChangeable)},
		{"caching default", modeSense6(false, 2, 0x08, 0, 255),
			cat([]byte{0x1F, 0x00, 0x10, 0x08}, shortBD, cachingCurrent)},
		{"caching DBD", modeSense6(true, 0, 0x08, 0, 255),
			cat([]byte{0x17, 0x00, 0x10, 0x00}, cachingCurrent)},
		{"control current", modeSense6(true, 0, 0x0A, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, controlCurrent)},
		{"control changeable", modeSense6(true, 1, 0x0A, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, controlChangeable)},
		{"control default", modeSense6(true, 2, 0x0A, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, controlCurrent)},
		{"informational exceptions current", modeSense6(true, 0, 0x1C, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, iecCurrent)},
		{"informational exceptions changeable", modeSense6(true, 1, 0x1C, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, iecChangeable)},
		{"informational exceptions default", modeSense6(true, 2, 0x1C, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, iecCurrent)},
		{"all pages", modeSense6(false, 0, 0x3F, 0, 255),
			cat([]byte{0x43, 0x00, 0x10, 0x08}, shortBD, rwErrorRecovery, cachingCurrent, controlCurrent, iecCurrent)},
		{"all pages and subpages", modeSense6(true, 0, 0x3F, 0xFF, 255),
			cat([]byte{0x3B, 0x00, 0x10, 0x00}, rwErrorRecovery, cachingCurrent, controlCurrent, iecCurrent)},
		{"all pages changeable", modeSense6(true, 1, 0x3F, 0, 255),
			cat([]byte{0x3B, 0x00, 0x10, 0x00}, rwErrorRecovery, cachingChangeable, controlChangeable, iecChangeable)},
		{"all pages default", modeSense6(true, 2, 0x3F, 0, 255),
			cat([]byte{0x3B, 0x00, 0x10, 0x00}, rwErrorRecovery, cachingCurrent, controlCurrent, iecCurrent)},
		{"read-write error recovery current", modeSense6(true, 0, 0x01, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, rwErrorRecovery)},
		{"read-write error recovery changeable", modeSense6(true, 1, 0x01, 0, 255),
			cat([]byte{0x0F, 0x00, 0x10, 0x00}, rwErrorRecovery)},
		{"read-write error recovery default", modeSense10(false, false, 2, 0x01, 0, 512),
			cat([]byte{0x00, 0x1A, 0x00, 0x10, 0x00, 0x00, 0x00, 0x08}, shortBD, rwErrorRecovery)},
		// Linux's write protect probe: 4 bytes of page 3Fh, then 4 of page 00h.
		{"linux write protect probe", modeSense6(false, 0, 0x3F, 0, 4), []byte{0x43, 0x00, 0x10, 0x08}},
		{"page 00h: header and block descriptor", modeSense6(false, 0, 0x00, 0, 255),
			cat([]byte{0x0B, 0x00, 0x10, 0x08}, shortBD)},
		{"page 00h DBD", modeSense6(true, 0, 0x00, 0, 255), []byte{0x03, 0x00, 0x10, 0x00}},
		// Linux's cache probe: 4 bytes, then the length from the header.
		{"linux cache probe", modeSense6(false, 0, 0x08, 0, 4), []byte{0x1F, 0x00, 0x10, 0x08}},
		{"truncated in the page", modeSense6(false, 0, 0x08, 0, 14), cat([]byte{0x1F, 0x00, 0x10, 0x08}, shortBD, []byte{0x08, 0x12})},
		{"allocation zero", modeSense6(false, 0, 0x08, 0, 0), []byte{}},

		// MODE SENSE(10): MODE DATA LENGTH (2), MEDIUM TYPE, DEVICE-SPECIFIC, LONGLBA, reserved,
		// BLOCK DESCRIPTOR LENGTH (2).
		{"10: caching", modeSense10(false, false, 0, 0x08, 0, 512),
			cat([]byte{0x00, 0x22, 0x00, 0x10, 0x00, 0x00, 0x00, 0x08}, shortBD, cachingCurrent)},
		{"10: caching LLBAA", modeSense10(false, true, 0, 0x08, 0, 512),
			cat([]byte{0x00, 0x2A, 0x00, 0x10, 0x01, 0x00, 0x00, 0x10}, longBD, cachingCurrent)},
		{"10: LLBAA with DBD", modeSense10(true, true, 0, 0x08, 0, 512),
			cat([]byte{0x00, 0x1A, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00}, cachingCurrent)},
		{"10: control changeable", modeSense10(true, false, 1, 0x0A, 0, 512),
			cat([]byte{0x00, 0x12, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00}, controlChangeable)},
		{"10: all pages", modeSense10(false, false, 0, 0x3F, 0, 512),
			cat([]byte{0x00, 0x46, 0x00, 0x10, 0x00, 0x00, 0x00, 0x08}, shortBD, rwErrorRecovery, cachingCurrent, controlCurrent, iecCurrent)},
		{"10: 8-byte probe", modeSense10(false, false, 0, 0x3F, 0, 8),
			[]byte{0x00, 0x46, 0x00, 0x10, 0x00, 0x00, 0x00, 0x08}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m, testNexus, 0, tc.cdb, nil, 512)
			requireData(t, c, tc.want, len(tc.want))
		})
	}
}

func TestModeSenseErrors(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, tc := range []struct {
		name    string
		cdb     []byte
		reason  Reason
		byteOff int
		bit     int
	}{
		{"saved values", modeSense6(false, 3, 0x08, 0, 255), ReasonSavingParametersNotSupported, 2, 7},
		{"saved values, all pages", modeSense10(false, false, 3, 0x3F, 0, 512), ReasonSavingParametersNotSupported, 2, 7},
		{"unsupported page 02h", modeSense6(false, 0, 0x02, 0, 255), ReasonInvalidFieldInCDB, 2, 5},
		{"read-write error recovery subpage 01h", modeSense6(false, 0, 0x01, 0x01, 255), ReasonInvalidFieldInCDB, 3, -1},
		{"unsupported page 03h", modeSense6(false, 0, 0x03, 0, 255), ReasonInvalidFieldInCDB, 2, 5},
		{"unsupported page 19h", modeSense10(false, false, 0, 0x19, 0, 512), ReasonInvalidFieldInCDB, 2, 5},
		{"linux I/O hints subpage 0Ah/05h", modeSense10(false, false, 0, 0x0A, 0x05, 512), ReasonInvalidFieldInCDB, 3, -1},
		{"control extension subpage 0Ah/01h", modeSense6(false, 0, 0x0A, 0x01, 255), ReasonInvalidFieldInCDB, 3, -1},
		{"caching subpage FFh", modeSense6(false, 0, 0x08, 0xFF, 255), ReasonInvalidFieldInCDB, 3, -1},
		{"all pages, subpage 01h", modeSense6(false, 0, 0x3F, 0x01, 255), ReasonInvalidFieldInCDB, 3, -1},
		{"page 00h, subpage 01h", modeSense6(false, 0, 0x00, 0x01, 255), ReasonInvalidFieldInCDB, 3, -1},
		{"LLBAA in MODE SENSE(6)", []byte{0x1A, 0x10, 0x08, 0, 255, 0}, ReasonInvalidFieldInCDB, 1, 4},
		{"reserved byte 4 of MODE SENSE(10)", []byte{0x5A, 0, 0x08, 0, 1, 0, 0, 0, 255, 0}, ReasonInvalidFieldInCDB, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m, testNexus, 0, tc.cdb, nil, 512)
			requireField(t, c, tc.reason, true, tc.byteOff, tc.bit)
		})
	}
}

func TestModeSenseWriteProtect(t *testing.T) {
	t.Run("read-only logical unit", func(t *testing.T) {
		_, m := readyMap(t, func(cfg *Config) { cfg.ReadOnly = true })
		c := run(m, testNexus, 0, modeSense6(true, 0, 0x3F, 0, 4), nil, 4)
		requireData(t, c, []byte{0x3B, 0x00, 0x90, 0x00}, 4)
	})
	t.Run("read-only mapping", func(t *testing.T) {
		lu := newTestLU(t, 1000, 512, nil)
		m, err := NewLUNMap([]Mapping{{LUN: 0, LU: lu}, {LUN: 1, LU: lu, ReadOnly: true}})
		require.NoError(t, err)
		clearPowerOnUA(t, m, testNexus)
		c := run(m, testNexus, 1, modeSense10(true, false, 0, 0x3F, 0, 8), nil, 8)
		requireData(t, c, []byte{0x00, 0x3E, 0x00, 0x90, 0x00, 0x00, 0x00, 0x00}, 8)
		// The same logical unit through the writable mapping.
		c = run(m, testNexus, 0, modeSense10(true, false, 0, 0x3F, 0, 8), nil, 8)
		requireData(t, c, []byte{0x00, 0x3E, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00}, 8)
	})
}

func TestModeSenseLargeCapacity(t *testing.T) {
	// 2^32 + 10 blocks: the short block descriptor caps NUMBER OF LOGICAL BLOCKS at FFFFFFFFh,
	// the long one holds it.
	bs, err := backstore.NewNull((1<<32+10)*512, 512)
	require.NoError(t, err)
	lu, err := NewLogicalUnit(Config{Backstore: bs, Serial: "big"})
	require.NoError(t, err)
	m := newTestMap(t, lu)
	clearPowerOnUA(t, m, testNexus)
	c := run(m, testNexus, 0, modeSense6(false, 0, 0x00, 0, 255), nil, 255)
	requireData(t, c, []byte{0x0B, 0x00, 0x10, 0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x02, 0x00}, 12)
	c = run(m, testNexus, 0, modeSense10(false, true, 0, 0x00, 0, 255), nil, 255)
	requireData(t, c, []byte{
		0x00, 0x16, 0x00, 0x10, 0x01, 0x00, 0x00, 0x10,
		0, 0, 0, 0x01, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x00, 0x00, 0x02, 0x00,
	}, 24)
	// The default of WriteCache is off.
	c = run(m, testNexus, 0, modeSense6(true, 2, 0x08, 0, 255), nil, 255)
	requireData(t, c, cat([]byte{0x17, 0x00, 0x10, 0x00}, cachingNoWCE), 24)
}

func modeSelect6(pf, sp bool, plen byte) []byte {
	cdb := []byte{0x15, 0, 0, 0, plen, 0}
	if pf {
		cdb[1] |= 0x10
	}
	if sp {
		cdb[1] |= 0x01
	}
	return cdb
}

func modeSelect10(plen uint16) []byte {
	return []byte{0x55, 0x10, 0, 0, 0, 0, 0, byte(plen >> 8), byte(plen), 0}
}

// modeSense6Page returns the current page (DBD) as MODE SENSE(6) reports it, without header.
func modeSense6Page(t *testing.T, m *LUNMap, n *Nexus, page byte) []byte {
	t.Helper()
	c := run(m, n, 0, modeSense6(true, 0, page, 0, 255), nil, 255)
	requireGood(t, c)
	return data(c)[4:]
}

func TestModeSelect(t *testing.T) {
	t.Run("clear WCE with MODE SELECT(6)", func(t *testing.T) {
		lu, m := readyMap(t, nil)
		param := cat([]byte{0x00, 0x00, 0x00, 0x00}, cachingNoWCE)
		c := run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0)
		requireGood(t, c)
		require.Equal(t, 24, c.TransferLength)
		require.Equal(t, cachingNoWCE, modeSense6Page(t, m, testNexus, 0x08))
		require.False(t, lu.writeCacheEnabled())
		require.False(t, lu.WriteCacheEnabled(), "what srptarget luns shows")
		// The default is still WCE.
		c = run(m, testNexus, 0, modeSense6(true, 2, 0x08, 0, 255), nil, 255)
		requireData(t, c, cat([]byte{0x17, 0x00, 0x10, 0x00}, cachingCurrent), 24)
	})

	t.Run("set D_SENSE with MODE SELECT(10) and a block descriptor", func(t *testing.T) {
		lu, m := readyMap(t, nil)
		param := cat([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08}, shortBD, controlDSensePage)
		c := run(m, testNexus, 0, modeSelect10(uint16(len(param))), param, 0)
		requireGood(t, c)
		require.True(t, lu.descriptorSense())
		require.Equal(t, controlDSensePage, modeSense6Page(t, m, testNexus, 0x0A))
	})

	t.Run("long block descriptor", func(t *testing.T) {
		_, m := readyMap(t, nil)
		param := cat([]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x10}, longBD, cachingNoWCE)
		requireGood(t, run(m, testNexus, 0, modeSelect10(uint16(len(param))), param, 0))
		require.Equal(t, cachingNoWCE, modeSense6Page(t, m, testNexus, 0x08))
	})

	t.Run("zero block descriptor", func(t *testing.T) {
		_, m := readyMap(t, nil)
		param := cat([]byte{0x00, 0x00, 0x00, 0x08}, zeros(8))
		requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))
	})

	t.Run("several pages in one list", func(t *testing.T) {
		lu, m := readyMap(t, nil)
		param := cat([]byte{0x00, 0x00, 0x00, 0x00}, rwErrorRecovery, cachingNoWCE, controlDSensePage, iecCurrent)
		requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))
		require.False(t, lu.writeCacheEnabled())
		require.True(t, lu.descriptorSense())
	})

	t.Run("header only, and an empty list", func(t *testing.T) {
		_, m := readyMap(t, nil)
		requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, 4), []byte{0, 0, 0, 0}, 0))
		c := run(m, testNexus, 0, modeSelect6(true, false, 0), nil, 0)
		requireGood(t, c)
		require.Zero(t, c.TransferLength)
	})

	t.Run("fields copied from MODE SENSE are ignored", func(t *testing.T) {
		_, m := readyMap(t, nil)
		// MODE DATA LENGTH and DEVICE-SPECIFIC PARAMETER (WP, DPOFUA) as MODE SENSE sent them.
		param := cat([]byte{0x17, 0x00, 0x90, 0x00}, cachingNoWCE)
		requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))
	})

	t.Run("RCD is changeable", func(t *testing.T) {
		_, m := readyMap(t, nil)
		page := cat([]byte{0x08, 0x12, 0x05}, zeros(17))
		param := cat([]byte{0x00, 0x00, 0x00, 0x00}, page)
		requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))
		require.Equal(t, page, modeSense6Page(t, m, testNexus, 0x08))
	})

	t.Run("LOGICAL UNIT RESET restores the defaults", func(t *testing.T) {
		lu, m := readyMap(t, nil)
		param := cat([]byte{0x00, 0x00, 0x00, 0x00}, cachingNoWCE, controlDSensePage)
		requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))
		require.Equal(t, TMFComplete, m.LogicalUnitReset(testNexus, EncodeLUN(0)))
		require.True(t, lu.writeCacheEnabled())
		require.False(t, lu.descriptorSense())
	})
}

func TestModeSelectErrors(t *testing.T) {
	hdr6 := []byte{0x00, 0x00, 0x00, 0x00}
	for _, tc := range []struct {
		name     string
		cdb      []byte
		param    []byte // nil: the CDB's own length of zeroes
		reason   Reason
		inCDB    bool
		byteOff  int
		bit      int
		noFields bool // no field pointer
	}{
		{"PF zero", modeSelect6(false, false, 24), cat(hdr6, cachingNoWCE), ReasonInvalidFieldInCDB, true, 1, 4, false},
		{"SP one", modeSelect6(true, true, 24), cat(hdr6, cachingNoWCE), ReasonInvalidFieldInCDB, true, 1, 0, false},
		{"reserved CDB byte 2", []byte{0x15, 0x10, 0x01, 0, 24, 0}, cat(hdr6, cachingNoWCE), ReasonInvalidFieldInCDB, true, 2, 0, false},
		{"list shorter than the header", modeSelect6(true, false, 3), []byte{0, 0, 0}, ReasonParameterListLengthError, false, 0, 0, true},
		{"list shorter than the MODE SELECT(10) header", modeSelect10(7), zeros(7), ReasonParameterListLengthError, false, 0, 0, true},
		{"data-out shorter than the list", modeSelect6(true, false, 24), cat(hdr6, cachingNoWCE[:10]), ReasonParameterListLengthError, false, 0, 0, true},
		{"truncated page", modeSelect6(true, false, 11), cat(hdr6, cachingNoWCE[:7]), ReasonParameterListLengthError, false, 0, 0, true},
		{"one byte of page", modeSelect6(true, false, 5), cat(hdr6, []byte{0x08}), ReasonParameterListLengthError, false, 0, 0, true},
		{"truncated block descriptor", modeSelect6(true, false, 8), []byte{0, 0, 0, 8, 0, 0, 0, 0}, ReasonParameterListLengthError, false, 0, 0, true},
		{"medium type", modeSelect6(true, false, 24), cat([]byte{0, 0x01, 0, 0}, cachingNoWCE), ReasonInvalidFieldInParameterList, false, 1, -1, false},
		{"block descriptor length 4", modeSelect6(true, false, 28), cat([]byte{0, 0, 0, 4}, zeros(4), cachingNoWCE), ReasonInvalidFieldInParameterList, false, 3, -1, false},
		{"long block descriptor without LONGLBA", modeSelect10(24), cat([]byte{0, 0, 0, 0, 0, 0, 0, 0x10}, longBD), ReasonInvalidFieldInParameterList, false, 6, -1, false},
		{"short block descriptor with LONGLBA", modeSelect10(16), cat([]byte{0, 0, 0, 0, 0x01, 0, 0, 0x08}, shortBD), ReasonInvalidFieldInParameterList, false, 6, -1, false},
		{"reserved header byte 4", modeSelect10(8), []byte{0, 0, 0, 0, 0x02, 0, 0, 0}, ReasonInvalidFieldInParameterList, false, 4, 1, false},
		{"reserved header byte 5", modeSelect10(8), []byte{0, 0, 0, 0, 0, 0x80, 0, 0}, ReasonInvalidFieldInParameterList, false, 5, -1, false},
		{"block count changes", modeSelect6(true, false, 12), cat([]byte{0, 0, 0, 8}, []byte{0x00, 0x00, 0x03, 0xE9, 0x00, 0x00, 0x02, 0x00}), ReasonInvalidFieldInParameterList, false, 4, -1, false},
		{"block length changes", modeSelect6(true, false, 12), cat([]byte{0, 0, 0, 8}, []byte{0x00, 0x00, 0x03, 0xE8, 0x00, 0x00, 0x10, 0x00}), ReasonInvalidFieldInParameterList, false, 9, -1, false},
		{"block descriptor reserved byte", modeSelect6(true, false, 12), cat([]byte{0, 0, 0, 8}, []byte{0x00, 0x00, 0x03, 0xE8, 0x01, 0x00, 0x02, 0x00}), ReasonInvalidFieldInParameterList, false, 8, -1, false},
		{"long block count changes", modeSelect10(24), cat([]byte{0, 0, 0, 0, 0x01, 0, 0, 0x10}, []byte{0, 0, 0, 1, 0, 0, 0x03, 0xE8, 0, 0, 0, 0, 0, 0, 0x02, 0}), ReasonInvalidFieldInParameterList, false, 8, -1, false},
		{"long block descriptor reserved", modeSelect10(24), cat([]byte{0, 0, 0, 0, 0x01, 0, 0, 0x10}, []byte{0, 0, 0, 0, 0, 0, 0x03, 0xE8, 0, 0, 0x01, 0, 0, 0, 0x02, 0}), ReasonInvalidFieldInParameterList, false, 18, -1, false},
		{"long block length changes", modeSelect10(24), cat([]byte{0, 0, 0, 0, 0x01, 0, 0, 0x10}, []byte{0, 0, 0, 0, 0, 0, 0x03, 0xE8, 0, 0, 0, 0, 0, 0, 0x10, 0}), ReasonInvalidFieldInParameterList, false, 20, -1, false},
		{"unsupported page 02h", modeSelect6(true, false, 20), cat(hdr6, []byte{0x02, 0x0E}, zeros(14)), ReasonInvalidFieldInParameterList, false, 4, 5, false},
		{"read-write error recovery AWRE", modeSelect6(true, false, 16), cat(hdr6, []byte{0x01, 0x0A, 0x80}, zeros(9)), ReasonInvalidFieldInParameterList, false, 6, 7, false},
		{"read-write error recovery READ RETRY COUNT", modeSelect6(true, false, 16), cat(hdr6, []byte{0x01, 0x0A, 0x00, 0x05}, zeros(8)), ReasonInvalidFieldInParameterList, false, 7, 2, false},
		{"PS bit", modeSelect6(true, false, 24), cat(hdr6, []byte{0x88, 0x12}, zeros(18)), ReasonInvalidFieldInParameterList, false, 4, 7, false},
		{"SPF bit", modeSelect6(true, false, 24), cat(hdr6, []byte{0x48, 0x12}, zeros(18)), ReasonInvalidFieldInParameterList, false, 4, 6, false},
		{"wrong page length", modeSelect6(true, false, 22), cat(hdr6, []byte{0x08, 0x10}, zeros(16)), ReasonInvalidFieldInParameterList, false, 5, -1, false},
		{"caching: retention priority not changeable", modeSelect6(true, false, 24), cat(hdr6, []byte{0x08, 0x12, 0x04, 0x01}, zeros(16)), ReasonInvalidFieldInParameterList, false, 7, 0, false},
		{"caching: IC not changeable", modeSelect6(true, false, 24), cat(hdr6, []byte{0x08, 0x12, 0x84}, zeros(17)), ReasonInvalidFieldInParameterList, false, 6, 7, false},
		{"caching: last byte", modeSelect6(true, false, 24), cat(hdr6, []byte{0x08, 0x12, 0x04}, zeros(16), []byte{0x20}), ReasonInvalidFieldInParameterList, false, 23, 5, false},
		{"control: QUEUE ALGORITHM MODIFIER not changeable", modeSelect6(true, false, 16), cat(hdr6, []byte{0x0A, 0x0A, 0x02, 0x00}, zeros(8)), ReasonInvalidFieldInParameterList, false, 7, 4, false},
		{"control: GLTSD cleared", modeSelect6(true, false, 16), cat(hdr6, []byte{0x0A, 0x0A, 0x00, 0x10}, zeros(8)), ReasonInvalidFieldInParameterList, false, 6, 1, false},
		{"control: TAS set", modeSelect6(true, false, 16), cat(hdr6, []byte{0x0A, 0x0A, 0x02, 0x10, 0x00, 0x40}, zeros(6)), ReasonInvalidFieldInParameterList, false, 9, 6, false},
		{"informational exceptions: DEXCPT cleared", modeSelect6(true, false, 16), cat(hdr6, []byte{0x1C, 0x0A, 0x00}, zeros(9)), ReasonInvalidFieldInParameterList, false, 6, 3, false},
		{"second page bad, first not applied", modeSelect6(true, false, 36), cat(hdr6, cachingNoWCE, []byte{0x0A, 0x0A, 0x06, 0x00}, zeros(8)), ReasonInvalidFieldInParameterList, false, 27, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lu, m := readyMap(t, nil)
			clearPowerOnUA(t, m, otherNexus)
			c := run(m, testNexus, 0, tc.cdb, tc.param, 0)
			if tc.noFields {
				s := requireSense(t, c, tc.reason)
				require.False(t, s.FieldPointerValid)
			} else {
				requireField(t, c, tc.reason, tc.inCDB, tc.byteOff, tc.bit)
			}
			// Nothing changed.
			require.True(t, lu.writeCacheEnabled())
			require.False(t, lu.descriptorSense())
			require.Equal(t, ReasonNone, lu.PendingUA(otherNexus))
		})
	}
}

// TestModeSelectUnitAttention checks that a MODE SELECT that changes a parameter establishes MODE
// PARAMETERS CHANGED for every other nexus, not for its own, and that one changing nothing
// establishes nothing.
func TestModeSelectUnitAttention(t *testing.T) {
	lu, m := readyMap(t, nil)
	clearPowerOnUA(t, m, otherNexus)

	same := cat([]byte{0x00, 0x00, 0x00, 0x00}, cachingCurrent)
	requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(same))), same, 0))
	require.Equal(t, ReasonNone, lu.PendingUA(otherNexus))

	change := cat([]byte{0x00, 0x00, 0x00, 0x00}, cachingNoWCE)
	requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(change))), change, 0))
	require.Equal(t, ReasonNone, lu.PendingUA(testNexus))
	requireGood(t, run(m, testNexus, 0, []byte{0x00, 0, 0, 0, 0, 0}, nil, 0))

	c := run(m, otherNexus, 0, []byte{0x00, 0, 0, 0, 0, 0}, nil, 0)
	requireSense(t, c, ReasonModeParametersChanged)
	requireGood(t, run(m, otherNexus, 0, []byte{0x00, 0, 0, 0, 0, 0}, nil, 0))
	// The other nexus sees the new value.
	require.Equal(t, cachingNoWCE, modeSense6Page(t, m, otherNexus, 0x08))
}
