package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBuildSense checks sense data byte by byte against SPC-4 4.5.2 (descriptor format) and
// 4.5.3 (fixed format).
func TestBuildSense(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reason     Reason
		info       SenseInfo
		fixed      []byte
		descriptor []byte
	}{
		{
			name:       "NO SENSE",
			reason:     ReasonNone,
			fixed:      []byte{0x70, 0, 0x00, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x00, 0x00, 0, 0, 0, 0},
			descriptor: []byte{0x72, 0x00, 0x00, 0x00, 0, 0, 0, 0x00},
		},
		{
			name:       "unit attention",
			reason:     ReasonPowerOnResetOrBusDeviceReset,
			fixed:      []byte{0x70, 0, 0x06, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x29, 0x00, 0, 0, 0, 0},
			descriptor: []byte{0x72, 0x06, 0x29, 0x00, 0, 0, 0, 0x00},
		},
		{
			name:   "INVALID FIELD IN CDB, byte 2",
			reason: ReasonInvalidFieldInCDB,
			info:   SenseInfo{FieldPointerValid: true, InCDB: true, FieldPointer: 2},
			// SKSV, C/D; FIELD POINTER 0002h.
			fixed: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x24, 0x00, 0, 0xC0, 0x00, 0x02},
			// Sense key specific descriptor: type 02h, length 06h.
			descriptor: []byte{0x72, 0x05, 0x24, 0x00, 0, 0, 0, 0x08,
				0x02, 0x06, 0x00, 0x00, 0xC0, 0x00, 0x02, 0x00},
		},
		{
			name:   "INVALID FIELD IN CDB, byte 1 bit 4",
			reason: ReasonInvalidFieldInCDB,
			info:   SenseInfo{FieldPointerValid: true, InCDB: true, FieldPointer: 1, BitPointerValid: true, BitPointer: 4},
			// SKSV, C/D, BPV, BIT POINTER 4.
			fixed: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x24, 0x00, 0, 0xCC, 0x00, 0x01},
			descriptor: []byte{0x72, 0x05, 0x24, 0x00, 0, 0, 0, 0x08,
				0x02, 0x06, 0x00, 0x00, 0xCC, 0x00, 0x01, 0x00},
		},
		{
			name:   "INVALID FIELD IN PARAMETER LIST, byte 0107h bit 5",
			reason: ReasonInvalidFieldInParameterList,
			info:   SenseInfo{FieldPointerValid: true, FieldPointer: 0x0107, BitPointerValid: true, BitPointer: 5},
			// SKSV, BPV, BIT POINTER 5; C/D 0.
			fixed: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x26, 0x00, 0, 0x8D, 0x01, 0x07},
			descriptor: []byte{0x72, 0x05, 0x26, 0x00, 0, 0, 0, 0x08,
				0x02, 0x06, 0x00, 0x00, 0x8D, 0x01, 0x07, 0x00},
		},
		{
			name:   "UNRECOVERED READ ERROR at LBA 12345678h",
			reason: ReasonUnrecoveredReadError,
			info:   SenseInfo{Information: 0x12345678, InformationValid: true},
			// VALID, INFORMATION in bytes 3-6.
			fixed: []byte{0xF0, 0, 0x03, 0x12, 0x34, 0x56, 0x78, 0x0A, 0, 0, 0, 0, 0x11, 0x00, 0, 0, 0, 0},
			// Information descriptor: type 00h, length 0Ah, VALID.
			descriptor: []byte{0x72, 0x03, 0x11, 0x00, 0, 0, 0, 0x0C,
				0x00, 0x0A, 0x80, 0x00, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78},
		},
		{
			name:   "WRITE ERROR beyond 32 bits: VALID 0 in fixed format",
			reason: ReasonWriteError,
			info:   SenseInfo{Information: 0x0000000123456789, InformationValid: true},
			fixed:  []byte{0x70, 0, 0x03, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x0C, 0x00, 0, 0, 0, 0},
			descriptor: []byte{0x72, 0x03, 0x0C, 0x00, 0, 0, 0, 0x0C,
				0x00, 0x0A, 0x80, 0x00, 0, 0, 0, 0x01, 0x23, 0x45, 0x67, 0x89},
		},
		{
			name:   "LBA OUT OF RANGE with INFORMATION and field pointer",
			reason: ReasonLBAOutOfRange,
			info:   SenseInfo{Information: 0xFFFFFFFF, InformationValid: true, FieldPointerValid: true, InCDB: true, FieldPointer: 2},
			fixed:  []byte{0xF0, 0, 0x05, 0xFF, 0xFF, 0xFF, 0xFF, 0x0A, 0, 0, 0, 0, 0x21, 0x00, 0, 0xC0, 0x00, 0x02},
			descriptor: []byte{0x72, 0x05, 0x21, 0x00, 0, 0, 0, 0x14,
				0x00, 0x0A, 0x80, 0x00, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF,
				0x02, 0x06, 0x00, 0x00, 0xC0, 0x00, 0x02, 0x00},
		},
		{
			name:   "MISCOMPARE DURING VERIFY OPERATION at offset 513",
			reason: ReasonMiscompareDuringVerify,
			info:   SenseInfo{Information: 513, InformationValid: true},
			fixed:  []byte{0xF0, 0, 0x0E, 0, 0, 0x02, 0x01, 0x0A, 0, 0, 0, 0, 0x1D, 0x00, 0, 0, 0, 0},
			descriptor: []byte{0x72, 0x0E, 0x1D, 0x00, 0, 0, 0, 0x0C,
				0x00, 0x0A, 0x80, 0x00, 0, 0, 0, 0, 0, 0, 0x02, 0x01},
		},
		{
			name:       "SPACE ALLOCATION FAILED WRITE PROTECT",
			reason:     ReasonSpaceAllocationFailed,
			fixed:      []byte{0x70, 0, 0x07, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x27, 0x07, 0, 0, 0, 0},
			descriptor: []byte{0x72, 0x07, 0x27, 0x07, 0, 0, 0, 0x00},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf [MaxSenseLength]byte
			for i := range buf {
				buf[i] = 0xEE // BuildSense must write every byte it reports
			}
			n := BuildSense(buf[:], false, tc.reason, tc.info)
			require.Equal(t, tc.fixed, buf[:n], "fixed")
			for i := range buf {
				buf[i] = 0xEE
			}
			n = BuildSense(buf[:], true, tc.reason, tc.info)
			require.Equal(t, tc.descriptor, buf[:n], "descriptor")
		})
	}
}

// TestParseSenseRoundTrip builds sense data for every reason, with and without each kind of
// detail, in both formats, and parses it back.
func TestParseSenseRoundTrip(t *testing.T) {
	infos := []SenseInfo{
		{},
		{Information: 0xDEADBEEF, InformationValid: true},
		{Information: 0x0102030405060708, InformationValid: true},
		{FieldPointerValid: true, InCDB: true, FieldPointer: 9},
		{FieldPointerValid: true, FieldPointer: 0xFFFF, BitPointerValid: true, BitPointer: 7},
		{Information: 77, InformationValid: true, FieldPointerValid: true, InCDB: true, FieldPointer: 1, BitPointerValid: true, BitPointer: 0},
	}
	for r := ReasonNone; r < reasonCount; r++ {
		for _, info := range infos {
			for _, descriptor := range []bool{false, true} {
				var buf [MaxSenseLength]byte
				n := BuildSense(buf[:], descriptor, r, info)
				p, ok := ParseSense(buf[:n])
				require.True(t, ok, "%v", r)
				want := ParsedSense{ResponseCode: SenseCurrentFixed, Key: r.Key(), ASC: r.ASC(), ASCQ: r.ASCQ(), SenseInfo: info}
				if descriptor {
					want.ResponseCode = SenseCurrentDescriptor
				} else if info.Information > 0xFFFFFFFF {
					// Fixed format cannot hold it: INFORMATION is not valid.
					want.Information, want.InformationValid = 0, false
				}
				require.Equal(t, want, p, "%v %+v descriptor=%v", r, info, descriptor)
			}
		}
		require.NotEqual(t, "UNKNOWN REASON", r.String())
	}
	require.Equal(t, "UNKNOWN REASON", reasonCount.String())
}

func TestParseSenseRejects(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		{0x70, 0, 5},
		{0x70, 0, 0x05, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x24}, // fixed, 13 bytes
		{0x7F, 0, 0, 0, 0, 0, 0, 0},                         // vendor specific response code
		{0x00, 0, 0, 0, 0, 0, 0, 0},
	} {
		_, ok := ParseSense(b)
		require.False(t, ok, "% x", b)
	}
	// Descriptor sense whose ADDITIONAL SENSE LENGTH overruns the buffer, or whose descriptor
	// overruns it: what is there is decoded, the rest ignored.
	p, ok := ParseSense([]byte{0x72, 0x05, 0x24, 0x00, 0, 0, 0, 0x20, 0x02, 0x06, 0x00, 0x00, 0xC0, 0x00})
	require.True(t, ok)
	require.Equal(t, SenseIllegalRequest, p.Key)
	require.False(t, p.FieldPointerValid)
	// Deferred errors parse too.
	p, ok = ParseSense([]byte{0x71, 0, 0x03, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x0C, 0x00, 0, 0, 0, 0})
	require.True(t, ok)
	require.Equal(t, uint8(SenseDeferredFixed), p.ResponseCode)
	require.Equal(t, SenseMediumError, p.Key)
}

// TestDSenseSwitchesFormat checks that D_SENSE set by MODE SELECT makes the next error use
// descriptor format, and that clearing it goes back to fixed format.
func TestDSenseSwitchesFormat(t *testing.T) {
	_, m := readyMap(t, nil)
	badInquiry := []byte{0x12, 0, 0x80, 0, 0xFF, 0}

	c := run(m, testNexus, 0, badInquiry, nil, 255)
	require.Equal(t, StatusCheckCondition, c.Status)
	require.Equal(t, []byte{0x70, 0, 0x05, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x24, 0x00, 0, 0xC0, 0x00, 0x02}, c.SenseData())

	param := cat([]byte{0x00, 0x00, 0x00, 0x00}, controlDSensePage)
	requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))

	c = run(m, testNexus, 0, badInquiry, nil, 255)
	require.Equal(t, StatusCheckCondition, c.Status)
	require.Equal(t, []byte{0x72, 0x05, 0x24, 0x00, 0, 0, 0, 0x08, 0x02, 0x06, 0x00, 0x00, 0xC0, 0x00, 0x02, 0x00}, c.SenseData())

	// Unit attentions are reported in the selected format too (other nexus: MODE PARAMETERS
	// CHANGED is not pending for it as it was unknown; its first command sees POWER ON).
	c = run(m, otherNexus, 0, []byte{0x00, 0, 0, 0, 0, 0}, nil, 0)
	require.Equal(t, []byte{0x72, 0x06, 0x29, 0x00, 0, 0, 0, 0x00}, c.SenseData())

	// REQUEST SENSE follows its DESC bit, not D_SENSE.
	c = run(m, testNexus, 0, []byte{0x03, 0, 0, 0, 0xFF, 0}, nil, 255)
	requireData(t, c, []byte{0x70, 0, 0x00, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x00, 0x00, 0, 0, 0, 0}, 18)

	param = cat([]byte{0x00, 0x00, 0x00, 0x00}, controlCurrent)
	requireGood(t, run(m, testNexus, 0, modeSelect6(true, false, byte(len(param))), param, 0))
	c = run(m, testNexus, 0, badInquiry, nil, 255)
	require.Equal(t, byte(0x70), c.SenseData()[0])
}

func TestRequestSense(t *testing.T) {
	_, m := readyMap(t, nil)
	noSenseFixed := []byte{0x70, 0, 0x00, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0, 0x00, 0x00, 0, 0, 0, 0}
	for _, tc := range []struct {
		name     string
		cdb      []byte
		want     []byte
		transfer int
	}{
		{"fixed", []byte{0x03, 0, 0, 0, 252, 0}, noSenseFixed, 18},
		{"descriptor", []byte{0x03, 1, 0, 0, 252, 0}, []byte{0x72, 0x00, 0x00, 0x00, 0, 0, 0, 0}, 8},
		{"allocation 8", []byte{0x03, 0, 0, 0, 8, 0}, noSenseFixed[:8], 8},
		{"allocation 0", []byte{0x03, 0, 0, 0, 0, 0}, []byte{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireData(t, run(m, testNexus, 0, tc.cdb, nil, 255), tc.want, tc.transfer)
		})
	}
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0x03, 0x02, 0, 0, 18, 0}, nil, 255), 1, 1)
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0x03, 0, 0x01, 0, 18, 0}, nil, 255), 2, 0)
	requireInvalidCDB(t, run(m, testNexus, 0, []byte{0x03, 0, 0, 0x80, 18, 0}, nil, 255), 3, 7)
}
