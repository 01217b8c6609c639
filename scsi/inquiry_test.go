package scsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// stdInquiryDefault is the standard INQUIRY data of a test LU with the default identification,
// byte by byte from SPC-4 6.6.2.
var stdInquiryDefault = cat(
	[]byte{
		0x00, // qualifier 000b, direct access block device
		0x00, // RMB 0
		0x06, // VERSION: SPC-4
		0x12, // HISUP, RESPONSE DATA FORMAT 2
		0x5B, // ADDITIONAL LENGTH 91
		0x08, // SCCS ACC TPGS 0, 3PC (EXTENDED COPY), PROTECT 0
		0x00, // ENCSERV MULTIP
		0x02, // CMDQUE
	},
	[]byte("SRPTGT  "),         // T10 VENDOR IDENTIFICATION
	[]byte("srptarget disk  "), // PRODUCT IDENTIFICATION
	[]byte("0001"),             // PRODUCT REVISION LEVEL
	zeros(22),                  // 36..57
	[]byte{0x00, 0xA0},         // SAM-5
	[]byte{0x09, 0x40},         // SRP
	[]byte{0x04, 0x60},         // SPC-4
	[]byte{0x04, 0xC0},         // SBC-3
	zeros(30),                  // 66..95
)

func TestInquiryStandard(t *testing.T) {
	_, m := readyMap(t, nil)
	require.Len(t, stdInquiryDefault, 96)
	for _, tc := range []struct {
		name     string
		alloc    uint16
		bufLen   int
		want     []byte
		transfer int
	}{
		{"linux first probe", 36, 36, stdInquiryDefault[:36], 36},
		{"whole", 96, 96, stdInquiryDefault, 96},
		{"allocation larger than the data", 255, 255, stdInquiryDefault, 96},
		{"allocation of 4 bytes", 4, 255, []byte{0x00, 0x00, 0x06, 0x12}, 4},
		{"allocation of 5 bytes shows ADDITIONAL LENGTH", 5, 255, []byte{0x00, 0x00, 0x06, 0x12, 0x5B}, 5},
		{"allocation zero", 0, 255, []byte{}, 0},
		{"buffer smaller than the allocation", 96, 20, stdInquiryDefault[:20], 96},
		{"two-byte allocation length", 0x0100, 512, stdInquiryDefault, 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := run(m, testNexus, 0, []byte{0x12, 0, 0, byte(tc.alloc >> 8), byte(tc.alloc), 0}, nil, tc.bufLen)
			requireData(t, c, tc.want, tc.transfer)
		})
	}
}

func TestInquiryIdentification(t *testing.T) {
	_, m := readyMap(t, func(cfg *Config) {
		cfg.Vendor, cfg.Product, cfg.Revision = "LIO-ORG", "FILEIO", "4.0"
	})
	c := run(m, testNexus, 0, []byte{0x12, 0, 0, 0, 36, 0}, nil, 36)
	requireGood(t, c)
	require.Equal(t, []byte("LIO-ORG FILEIO          4.0 "), data(c)[8:36])

	// All 8/16/4 bytes used: no padding.
	_, m = readyMap(t, func(cfg *Config) {
		cfg.Vendor, cfg.Product, cfg.Revision = "ABCDEFGH", "0123456789abcdef", "WXYZ"
	})
	c = run(m, testNexus, 0, []byte{0x12, 0, 0, 0, 36, 0}, nil, 36)
	requireGood(t, c)
	require.Equal(t, []byte("ABCDEFGH0123456789abcdefWXYZ"), data(c)[8:36])
}

func TestInquiryErrors(t *testing.T) {
	_, m := readyMap(t, nil)
	for _, tc := range []cdbCase{
		{"page code without EVPD", []byte{0x12, 0, 0x80, 0, 0xFF, 0}, 2, -1},
		{"page code 0x83 without EVPD", []byte{0x12, 0, 0x83, 0, 0xFF, 0}, 2, -1},
		{"CMDDT (obsolete)", []byte{0x12, 0x02, 0, 0, 0xFF, 0}, 1, 1},
		{"CMDDT and EVPD", []byte{0x12, 0x03, 0, 0, 0xFF, 0}, 1, 1},
		{"reserved byte 1 bits", []byte{0x12, 0xE0, 0, 0, 0xFF, 0}, 1, 7},
		{"unsupported VPD page 0x89", []byte{0x12, 0x01, 0x89, 0, 0xFF, 0}, 2, -1},
		{"unsupported VPD page 0xB7", []byte{0x12, 0x01, 0xB7, 0, 0xFF, 0}, 2, -1},
		{"unsupported VPD page 0xB9 4-byte probe", []byte{0x12, 0x01, 0xB9, 0, 4, 0}, 2, -1},
		{"VPD page 0xB2 without thin provisioning", []byte{0x12, 0x01, 0xB2, 0, 0xFF, 0}, 2, -1},
		{"LINK", []byte{0x12, 0, 0, 0, 0xFF, 0x01}, 5, 0},
		{"NACA", []byte{0x12, 0, 0, 0, 0xFF, 0x04}, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCDBCase(t, run(m, testNexus, 0, tc.cdb, nil, 255), tc)
		})
	}
}
